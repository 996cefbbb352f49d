// A plugin that claims an ABI version no agent has: it must be refused before
// anything else in it is called.
#include <cstdint>
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) std::uint32_t fleetlink_plugin_abi() {
  return 999;
}
extern "C" __attribute__((visibility("default"))) void* fleetlink_plugin_create(const void*) {
  std::abort();  // never reached: the ABI check comes first
}
extern "C" __attribute__((visibility("default"))) void fleetlink_plugin_destroy(void*) {
  std::abort();
}
