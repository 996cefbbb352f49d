#include "artifact_commands.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "common/sha256.hpp"
#include "exit_codes.hpp"

namespace fleetctl {
namespace {

using json = nlohmann::json;

// GET /v1/commands/{id}/artifacts: the list, or the exit code of a failure.
int get_list(JobCli& cli, const std::string& cmd_id, json& list) {
  TransportError e;
  const auto r = cli.client.call("GET", "/v1/commands/" + cli.client.escape(cmd_id) + "/artifacts", {}, e);
  if (!r) return cli.unreachable(e);
  if (r->status != 200) return cli.api_error(*r);
  const json body = json::parse(r->body, nullptr, false);
  if (!body.is_object() || !body.contains("artifacts") || !body["artifacts"].is_array())
    return cli.fail(kFailed, "the broker's answer has no artifact list");
  list = body["artifacts"];
  if (cli.json_output) std::cout << r->body << "\n";
  return kOk;
}

}  // namespace

int artifacts_list(JobCli& cli, const std::string& cmd_id) {
  json list;
  if (const int rc = get_list(cli, cmd_id, list); rc != kOk) return rc;
  if (cli.json_output) return kOk;
  if (list.empty()) {
    std::cout << "no artifacts for " << cmd_id << "\n";
    return kOk;
  }
  std::printf("%-40s %14s  %s\n", "NAME", "BYTES", "SHA256");
  for (const json& a : list) {
    std::printf("%-40s %14llu  %s\n", a.value("name", "").c_str(),
                static_cast<unsigned long long>(a.value("size", std::uint64_t{0})), a.value("sha256", "").c_str());
  }
  return kOk;
}

int artifact_fetch(JobCli& cli, const std::string& cmd_id, const std::string& name, const std::string& out_path) {
  json list;
  {
    const bool was = cli.json_output;
    cli.json_output = false;  // the listing is ours to read, not to print
    const int rc = get_list(cli, cmd_id, list);
    cli.json_output = was;
    if (rc != kOk) return rc;
  }
  json entry;
  for (const json& a : list) {
    if (a.value("name", "") == name) entry = a;
  }
  if (entry.is_null()) return cli.fail(kFailed, "command " + cmd_id + " has no artifact named " + name);
  const std::string path = out_path.empty() ? name : out_path;
  const std::string partial = path + ".part";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) return cli.fail(kFailed, "cannot write " + partial);
  fleetlink::Sha256 sha;
  std::uint64_t got = 0;
  TransportError e;
  const auto take = [&](std::string_view piece) {
    out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    sha.update(piece);
    got += piece.size();
    return static_cast<bool>(out);
  };
  std::string location;
  long status = cli.client.stream(
      "/v1/commands/" + cli.client.escape(cmd_id) + "/artifacts/" + cli.client.escape(name), take, e, 0, &location);
  if (status == 307 && !location.empty()) {
    // Kept in the broker's S3 store: fetched there, by the URL the broker signed
    // (the token stays with the broker).
    status = cli.client.stream_url(location, take, e);
  }
  out.close();
  const std::string digest = sha.hex();
  auto give_up = [&](const std::string& why) {
    std::remove(partial.c_str());
    return cli.fail(kFailed, why);
  };
  if (status == 0) return give_up("control API unreachable: " + e.detail);
  if (status != 200) return give_up("the broker answered HTTP " + std::to_string(status) + " for " + name);
  if (!out) return give_up("writing " + partial + " failed");
  if (got != entry.value("size", std::uint64_t{0}) || digest != entry.value("sha256", "")) {
    return give_up(name + ": got " + std::to_string(got) + " bytes with sha256 " + digest + ", the broker lists " +
                   std::to_string(entry.value("size", std::uint64_t{0})) + " bytes with " + entry.value("sha256", ""));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) return give_up("cannot rename " + partial + " to " + path);
  std::cerr << path << ": " << got << " bytes, sha256 " << digest << " (checked)\n";
  return kOk;
}

}  // namespace fleetctl
