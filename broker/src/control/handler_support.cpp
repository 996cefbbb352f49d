#include "control/handler_support.hpp"

#include "control/control_json.hpp"

namespace fleetlink::broker {

using json = nlohmann::ordered_json;

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

std::string unrecorded_detail(const Error& e, bool sent) {
  if (sent)
    return "the command store could not record it (" + e.detail +
           "): it went to its rig, and its record is written when the store recovers (lost if this broker "
           "stops first)";
  return "the command store could not record it (" + e.detail + "): it was not sent";
}

HttpResponse json_error(int status, std::string_view code, std::string_view detail) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(error_body(code, detail));
  return r;
}

std::optional<json> parse_object_body(const HttpRequest& req, bool allow_empty, HttpResponse& error) {
  if (req.body.find_first_not_of(" \t\r\n") == std::string::npos) {
    if (allow_empty) return json::object();
    error = json_error(400, "bad_request", "request body is empty; expected a JSON object");
    return std::nullopt;
  }
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    error = json_error(400, "bad_request", "request body is not valid JSON");
    return std::nullopt;
  }
  if (!body.is_object()) {
    error = json_error(400, "bad_request", "request body must be a JSON object");
    return std::nullopt;
  }
  return body;
}

std::string string_field(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

bool json_to_string_map(const json& args, StringMap& out, std::string& detail) {
  if (args.is_null()) return true;
  if (!args.is_object()) {
    detail = "\"args\" must be an object of strings";
    return false;
  }
  for (const auto& [key, value] : args.items()) {
    if (value.is_string()) {
      out[key] = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      out[key] = value.dump();
    } else {
      detail = "\"args." + key + "\" must be a string";
      return false;
    }
  }
  return true;
}

}  // namespace fleetlink::broker
