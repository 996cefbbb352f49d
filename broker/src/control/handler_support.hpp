#pragma once
// What the control API's handlers share to read a request and write an answer.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "control/http_message.hpp"
#include "fleetlink/messages.hpp"

namespace fleetlink::broker {

// An answer with a JSON body (dump_json: invalid UTF-8 becomes U+FFFD).
HttpResponse json_response(int status, const nlohmann::ordered_json& body);

// A JSON error response {"error":code,"detail":detail}.
HttpResponse json_error(int status, std::string_view code, std::string_view detail);

// Why a command's store_unavailable answer came after it was created: the
// store could not record it, and it was `sent` anyway (it did not wait for its
// record) or withdrawn.
std::string unrecorded_detail(const Error& e, bool sent);

// Parses a request body that must be a JSON object (an empty body is `{}`
// when allow_empty). On failure, `error` is the 400 answer.
std::optional<nlohmann::ordered_json> parse_object_body(const HttpRequest& req, bool allow_empty,
                                                        HttpResponse& error);

// body[key] when it is a string; empty when absent or not a string.
std::string string_field(const nlohmann::ordered_json& body, const char* key);

// args values are strings; numbers and booleans are accepted and turned into
// their JSON text so `{"lines": 50}` works from a shell. False (and `detail`)
// when `args` is neither null nor such an object.
bool json_to_string_map(const nlohmann::ordered_json& args, StringMap& out, std::string& detail);

}  // namespace fleetlink::broker
