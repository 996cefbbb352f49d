#pragma once
// UUIDv7 (RFC 9562): 48-bit Unix-ms timestamp, version 7, variant 10, and a
// 12-bit sub-millisecond counter so ids made in one process sort in creation order.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fleetlink/export.hpp"

namespace fleetlink {

struct FLEETLINK_API Uuid {
  std::array<std::uint8_t, 16> bytes{};
  std::string to_string() const;               // canonical 36-char lowercase
  std::uint64_t unix_ms() const noexcept;      // the embedded timestamp
  unsigned version() const noexcept;
  auto operator<=>(const Uuid&) const = default;
};

// Monotonic inside this process (thread-safe).
FLEETLINK_API Uuid uuid_v7();
// Same, with an explicit clock reading: for tests.
FLEETLINK_API Uuid uuid_v7_at(std::uint64_t unix_ms);
FLEETLINK_API std::optional<Uuid> parse_uuid(std::string_view text) noexcept;
FLEETLINK_API bool is_uuid_v7(std::string_view text) noexcept;

}  // namespace fleetlink
