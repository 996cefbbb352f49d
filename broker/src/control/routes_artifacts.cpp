// GET /v1/commands/{cmd}/artifacts and GET /v1/commands/{cmd}/artifacts/{name}:
// the files rigs uploaded for a command (artifacts/artifact_store.hpp), listed
// with their size and digest, and their bytes, streamed from the file (or, for
// one kept in the S3-compatible store, a 307 to a presigned GET URL).
#include <string>

#include "artifacts/artifact_store.hpp"
#include "control/handler_support.hpp"
#include "control/handlers.hpp"
#include "control/http_util.hpp"
#include "control/routes.hpp"

namespace fleetlink::broker {

nlohmann::ordered_json artifacts_json(const ArtifactStore& store, const std::string& cmd_id) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ArtifactInfo& a : store.list(cmd_id)) {
    list.push_back({{"name", a.name},
                    {"size", a.size},
                    {"sha256", a.sha256},
                    {"rig_id", a.rig_id},
                    {"stored_at_ms", a.stored_at_ms},
                    {"store", a.s3_key.empty() ? "broker" : "s3"},
                    {"href", "/v1/commands/" + cmd_id + "/artifacts/" + a.name}});
  }
  return list;
}

namespace handlers {

HttpResponse get_command_artifacts(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  if (ctx.options.artifacts == nullptr)
    return json_error(503, "artifacts_off", "this broker keeps no artifacts (--store none without --artifact-dir)");
  return json_response(200, nlohmann::ordered_json{{"cmd_id", cmd_id},
                                                   {"artifacts", artifacts_json(*ctx.options.artifacts, cmd_id)}});
}

HttpResponse get_command_artifact(const RouteContext& ctx) {
  const std::string& cmd_id = ctx.params.get("cmd");
  const std::string& name = ctx.params.get("name");
  if (ctx.options.artifacts == nullptr)
    return json_error(503, "artifacts_off", "this broker keeps no artifacts (--store none without --artifact-dir)");
  const std::optional<ArtifactInfo> a = ctx.options.artifacts->find(cmd_id, name);
  if (!a) {
    return json_response(404, nlohmann::ordered_json{{"error", "unknown_artifact"},
                                                     {"cmd_id", cmd_id},
                                                     {"name", name},
                                                     {"detail", "no such artifact (never uploaded, or past retention)"}});
  }
  if (!a->s3_key.empty()) {
    // Kept in the S3 store: the client fetches it there, by a URL signed for a while.
    if (!ctx.options.artifact_s3_url) {
      return json_error(503, "s3_off",
                        "the artifact is kept in an S3 store (key " + a->s3_key + ") this broker is not configured for");
    }
    const std::string url = ctx.options.artifact_s3_url(*a);
    // ?location: the URL as JSON, 200, for a browser page (a fetch() that
    // followed the 307 across origins would need the store to allow CORS).
    const bool location_only = parse_query(ctx.request.query).count("location") != 0;
    HttpResponse r = json_response(location_only ? 200 : 307, nlohmann::ordered_json{{"name", a->name},
                                                               {"size", a->size},
                                                               {"sha256", a->sha256},
                                                               {"location", url}});
    if (!location_only) r.headers.emplace_back("Location", url);
    r.headers.emplace_back("X-Fleetlink-Sha256", a->sha256);
    return r;
  }
  HttpResponse r;
  r.status = 200;
  r.content_type = "application/octet-stream";
  r.file_path = ctx.options.artifacts->path_of(cmd_id, name);
  r.file_size = a->size;
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + a->name + "\"");
  r.headers.emplace_back("X-Fleetlink-Sha256", a->sha256);
  return r;
}

}  // namespace handlers
}  // namespace fleetlink::broker
