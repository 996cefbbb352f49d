#pragma once
// What libfleetlink.so exports. The library is compiled with hidden visibility
// (-fvisibility=hidden -fvisibility-inlines-hidden), so its dynamic symbol table
// holds only the declarations marked FLEETLINK_API: the SDK's internals (the
// libwebsockets session, the TLS session store, msgpack) can change without
// touching the ABI behind the SONAME, and the loader resolves fewer symbols.
//
// The same definition serves building and using the library: on ELF a consumer
// calls a default-visibility declaration like any other, there is no import
// attribute to switch to.
//
// FLEETLINK_EXPORT_SYMBOL is the bare attribute, for symbols a plugin exports
// to the agent (FLEETLINK_PLUGIN in executor.hpp): a plugin built with hidden
// visibility still exports its entry points.
#if defined(__GNUC__) || defined(__clang__)
#define FLEETLINK_EXPORT_SYMBOL __attribute__((visibility("default")))
#else
#define FLEETLINK_EXPORT_SYMBOL
#endif

#define FLEETLINK_API FLEETLINK_EXPORT_SYMBOL
