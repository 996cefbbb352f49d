#include "fleet/rig_grant.hpp"

#include <algorithm>

namespace fleetlink::broker {

const char* to_string(RigTokenMode m) noexcept {
  switch (m) {
    case RigTokenMode::off: return "off";
    case RigTokenMode::optional: return "optional";
    case RigTokenMode::required: return "required";
  }
  return "?";
}

std::optional<RigTokenMode> rig_token_mode_from_string(std::string_view s) noexcept {
  for (RigTokenMode m : {RigTokenMode::off, RigTokenMode::optional, RigTokenMode::required})
    if (s == to_string(m)) return m;
  return std::nullopt;
}

std::optional<std::string> token_problem(RigTokenMode mode, const RigGrant* grant, std::string_view rig_id) {
  if (mode == RigTokenMode::off) return std::nullopt;
  if (grant == nullptr) {
    if (mode == RigTokenMode::required) return std::string("rig token required (Authorization: Bearer on the upgrade)");
    return std::nullopt;
  }
  if (!grant->problem.empty()) return "rig token refused: " + grant->problem;
  if (grant->subject != rig_id) return "rig token is for '" + grant->subject + "', not this rig";
  return std::nullopt;
}

bool kind_granted(const RigGrant* grant, std::string_view kind) noexcept {
  if (grant == nullptr) return true;
  return std::binary_search(grant->kinds.begin(), grant->kinds.end(), kind);
}

}  // namespace fleetlink::broker
