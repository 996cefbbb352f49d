#include "control/command_request.hpp"

#include "control/handler_support.hpp"

namespace fleetlink::broker {

namespace {

using json = nlohmann::ordered_json;

std::optional<std::string> optional_seconds(const json& body, const char* key, std::optional<std::uint32_t>& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 0xffffffffULL)
    return "\"" + std::string(key) + "\" must be a whole number of seconds";
  out = static_cast<std::uint32_t>(it->get<std::uint64_t>());
  return std::nullopt;
}

std::optional<std::string> optional_string(const json& body, const char* key, std::string& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return "\"" + std::string(key) + "\" must be a string";
  out = it->get<std::string>();
  return std::nullopt;
}

}  // namespace

std::optional<std::string> read_command_request(const json& body, CommandRequest& out) {
  out.kind = string_field(body, "kind");
  if (out.kind.empty()) return "\"kind\" is required and must be a non-empty string";
  std::string detail;
  if (const auto a = body.find("args"); a != body.end() && !json_to_string_map(*a, out.args, detail)) return detail;
  if (auto e = optional_string(body, "cmd_id", out.cmd_id)) return e;
  if (auto e = optional_string(body, "idempotency_key", out.idempotency_key)) return e;
  if (auto e = optional_seconds(body, "deliver_within_s", out.deliver_within_s)) return e;
  if (auto e = optional_seconds(body, "timeout_s", out.timeout_s)) return e;
  if (const auto h = body.find("hold"); h != body.end() && !h->is_null()) {
    if (!h->is_boolean()) return "\"hold\" must be true or false";
    out.hold = h->get<bool>();
  }
  return std::nullopt;
}

}  // namespace fleetlink::broker
