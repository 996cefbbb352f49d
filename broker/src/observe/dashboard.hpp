#pragma once
// The operator's dashboard: one self-contained HTML page (no external
// assets) served at GET /. It polls /v1/rigs and offers a Force reconnect
// button per rig.
#include <string_view>

namespace fleetlink::broker {

std::string_view dashboard_html() noexcept;

}  // namespace fleetlink::broker
