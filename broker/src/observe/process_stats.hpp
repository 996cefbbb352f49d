#pragma once
// Process gauges for /metrics, read from /proc at scrape time.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace fleetlink::broker {

// "VmRSS:     12345 kB" in a /proc/<pid>/status text -> bytes.
std::optional<double> parse_vmrss_bytes(std::string_view proc_status);

// {"process_resident_memory_bytes": …, "process_open_fds": …}; a value that
// cannot be read is left out.
std::map<std::string, double> read_process_gauges();

}  // namespace fleetlink::broker
