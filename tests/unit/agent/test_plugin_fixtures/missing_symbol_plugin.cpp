// A plugin without fleetlink_plugin_create/destroy.
#include <cstdint>

extern "C" __attribute__((visibility("default"))) std::uint32_t fleetlink_plugin_abi() { return 1; }
