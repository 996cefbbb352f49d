// Wire names of message types and of the enums carried as strings.
#include "fleetlink/messages.hpp"

#include <array>
#include <string_view>
#include <utility>

namespace fleetlink {
namespace {

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

constexpr std::array<std::pair<msg::NackReason, const char*>, 5> kNackReasons{{
    {msg::NackReason::seq_gap, "seq_gap"},
    {msg::NackReason::unsupported_kind, "unsupported_kind"},
    {msg::NackReason::not_allowed, "not_allowed"},
    {msg::NackReason::malformed, "malformed"},
    {msg::NackReason::busy, "busy"},
}};

constexpr std::array<std::pair<msg::Status, const char*>, 6> kStatuses{{
    {msg::Status::ok, "ok"},
    {msg::Status::failed, "failed"},
    {msg::Status::scheduled, "scheduled"},
    {msg::Status::cancelled, "cancelled"},
    {msg::Status::timeout, "timeout"},
    {msg::Status::duplicate, "duplicate"},
}};

}  // namespace

const char* type_name(const Message& m) noexcept {
  return std::visit(Overloaded{
                        [](const msg::Hello&) { return "hello"; },
                        [](const msg::Welcome&) { return "welcome"; },
                        [](const msg::Command&) { return "command"; },
                        [](const msg::Ack&) { return "ack"; },
                        [](const msg::Nack&) { return "nack"; },
                        [](const msg::Result&) { return "result"; },
                        [](const msg::OutputChunk&) { return "output"; },
                        [](const msg::Event&) { return "event"; },
                        [](const msg::Cancel&) { return "cancel"; },
                        [](const msg::Goaway&) { return "goaway"; },
                    },
                    m);
}

const char* to_string(msg::NackReason r) noexcept {
  for (const auto& [value, name] : kNackReasons) {
    if (value == r) return name;
  }
  return "unknown";
}

const char* to_string(msg::Status s) noexcept {
  for (const auto& [value, name] : kStatuses) {
    if (value == s) return name;
  }
  return "unknown";
}

std::optional<msg::NackReason> nack_reason_from_string(std::string_view s) noexcept {
  for (const auto& [value, name] : kNackReasons) {
    if (s == name) return value;
  }
  return std::nullopt;
}

std::optional<msg::Status> status_from_string(std::string_view s) noexcept {
  for (const auto& [value, name] : kStatuses) {
    if (s == name) return value;
  }
  return std::nullopt;
}

}  // namespace fleetlink
