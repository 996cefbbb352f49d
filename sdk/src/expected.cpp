// Names of the SDK's error codes, for logs and JSON error bodies.
#include "fleetlink/expected.hpp"

namespace fleetlink {

const char* to_string(Errc e) noexcept {
  switch (e) {
    case Errc::ok: return "ok";
    case Errc::truncated: return "truncated";
    case Errc::malformed: return "malformed";
    case Errc::missing_field: return "missing_field";
    case Errc::bad_field: return "bad_field";
    case Errc::unknown_type: return "unknown_type";
    case Errc::unsupported_version: return "unsupported_version";
    case Errc::too_large: return "too_large";
    case Errc::io: return "io";
    case Errc::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

}  // namespace fleetlink
