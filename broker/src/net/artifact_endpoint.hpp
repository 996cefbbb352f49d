#pragma once
// The artifact endpoint on the rig port: `POST /v1/artifacts/{cmd_id}/{name}`
// over the same mutual TLS as the rig's WebSocket, but a connection of its own,
// so a 100 MB log never queues behind (or in front of) the rig's commands
// (docs/PROTOCOL.md §10).
//
// A request names its size (Content-Length) and its digest (X-Fleetlink-Sha256)
// up front. It is checked before a byte is stored: the certificate must be the
// command's rig, the command must exist and not be finished, and the limits of
// the ArtifactStore must hold. The body is hashed as it is written; only a body
// of the declared length and digest is renamed into place. Every answer closes
// the connection; a connection closed midway leaves nothing.
//
// `POST /v1/artifact-targets/{cmd_id}/{name}?sha256=&size=` (no body) asks
// where to upload, with the same checks: the answer is the broker itself, or,
// with an S3-compatible store configured, a presigned PUT URL. Once the rig has
// put the object, `...&uploaded=1` has the broker look at it (a signed HEAD: its
// size and digest) and record it (docs/PROTOCOL.md §10.1).
#include <libwebsockets.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "artifacts/artifact_store.hpp"
#include "fleet/fleet.hpp"
#include "s3/s3_target.hpp"

namespace fleetlink::broker::net {

class ArtifactEndpoint {
 public:
  static constexpr std::string_view kPathPrefix = "/v1/artifacts/";
  static constexpr std::string_view kTargetPrefix = "/v1/artifact-targets/";

  // All outlive every rig connection (the lws context). s3 null: uploads come
  // to the broker; else the loop runs the S3 store's HEAD checks (libuv's pool).
  ArtifactEndpoint(ArtifactStore& store, Fleet& fleet, const s3::Target* s3 = nullptr, uv_loop_t* loop = nullptr);
  ArtifactEndpoint(const ArtifactEndpoint&) = delete;
  ArtifactEndpoint& operator=(const ArtifactEndpoint&) = delete;
  ~ArtifactEndpoint();

  static bool is_artifact_path(std::string_view uri) noexcept {
    return uri.starts_with(kPathPrefix) || uri.starts_with(kTargetPrefix);
  }

  // The rig protocol's HTTP callbacks for a request on kPathPrefix; each returns the callback's answer.
  int on_request(lws* wsi, std::string_view uri);
  int on_body(lws* wsi, const char* in, std::size_t len);
  int on_body_complete(lws* wsi);
  int on_writeable(lws* wsi);
  // The connection is gone: an unfinished upload is dropped (its temporary file removed).
  void on_closed(lws* wsi);

  bool owns(lws* wsi) const { return uploads_.contains(wsi); }
  std::uint64_t stored_total() const noexcept { return stored_; }
  std::uint64_t refused_total() const noexcept { return refused_; }

 private:
  struct Upload;
  struct HeadCheck;
  void authorize(Upload& u, const std::optional<CommandView>& command);
  void direct(Upload& u);                                    // a target request, authorized
  void head_checked(Upload& u, const HeadCheck& check);      // uploaded=1: the S3 store's answer
  void answer(Upload& u, int status, std::string body);
  void refuse(Upload& u, int status, std::string_view error, std::string detail);
  void take(Upload& u, std::string_view bytes);

  ArtifactStore& store_;
  Fleet& fleet_;
  const s3::Target* s3_ = nullptr;
  uv_loop_t* loop_ = nullptr;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // HEAD checks finishing after the endpoint see false
  std::unordered_map<lws*, std::unique_ptr<Upload>> uploads_;
  std::uint64_t next_id_ = 0;
  std::uint64_t stored_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace fleetlink::broker::net
