#pragma once
// The operator's dashboard: one self-contained HTML page (no external assets)
// served at GET /. Its sources are plain files in observe/dashboard/ (page.html,
// dashboard.css, dashboard.js), put together into one page at build time
// (cmake/EmbedDashboard.cmake). It follows /v1/events and shows the rigs
// (virtualised, for 20,000), jobs and a command's live output; see
// docs/OPERATIONS.md, "The dashboard".
#include <string_view>

namespace fleetlink::broker {

std::string_view dashboard_html() noexcept;

}  // namespace fleetlink::broker
