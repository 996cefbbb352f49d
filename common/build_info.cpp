#include "common/build_info.hpp"

#include "fleetlink/version.hpp"
#include "fleetlink_build_commit.h"

namespace fleetlink::build_info {

std::string_view version() noexcept { return FLEETLINK_VERSION; }

std::string_view commit() noexcept { return FLEETLINK_BUILD_COMMIT; }

std::string version_line(std::string_view program, std::string_view more) {
  std::string line(program);
  line += ' ';
  line += version();
  std::string details;
  if (!commit().empty()) {
    details = "commit ";
    details += commit();
  }
  if (!more.empty()) {
    if (!details.empty()) details += ", ";
    details += more;
  }
  if (!details.empty()) line += " (" + details + ")";
  return line;
}

}  // namespace fleetlink::build_info
