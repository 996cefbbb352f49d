#pragma once
// Lets an unordered container of std::string keys be searched with a
// string_view (a cmd_id straight from a decoded frame or a URL) without
// building a std::string for every lookup.
#include <functional>
#include <string>
#include <string_view>

namespace fleetlink::broker {

struct TransparentStringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace fleetlink::broker
