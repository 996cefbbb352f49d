#include "fleetlink/artifacts.hpp"

namespace fleetlink {

bool valid_artifact_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxArtifactNameBytes || name.front() == '.') return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool valid_sha256_hex(std::string_view hex) noexcept {
  if (hex.size() != kSha256HexBytes) return false;
  for (const char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace fleetlink
