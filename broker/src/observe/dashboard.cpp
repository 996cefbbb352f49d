#include "observe/dashboard.hpp"

#include "observe/dashboard_page.hpp"  // generated from observe/dashboard/ (broker/CMakeLists.txt)

namespace fleetlink::broker {

std::string_view dashboard_html() noexcept {
  // The page's bytes are plain ASCII/UTF-8 text: viewing them as chars is exact.
  return {reinterpret_cast<const char*>(generated::kDashboardPage), generated::kDashboardPageSize};
}

}  // namespace fleetlink::broker
