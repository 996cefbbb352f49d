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
#include <libwebsockets.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "artifacts/artifact_store.hpp"
#include "fleet/fleet.hpp"

namespace fleetlink::broker::net {

class ArtifactEndpoint {
 public:
  static constexpr std::string_view kPathPrefix = "/v1/artifacts/";

  // Both outlive every rig connection (the lws context).
  ArtifactEndpoint(ArtifactStore& store, Fleet& fleet);
  ArtifactEndpoint(const ArtifactEndpoint&) = delete;
  ArtifactEndpoint& operator=(const ArtifactEndpoint&) = delete;
  ~ArtifactEndpoint();

  static bool is_artifact_path(std::string_view uri) noexcept { return uri.starts_with(kPathPrefix); }

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
  void authorize(Upload& u, const std::optional<CommandView>& command);
  void answer(Upload& u, int status, std::string body);
  void refuse(Upload& u, int status, std::string_view error, std::string detail);
  void take(Upload& u, std::string_view bytes);

  ArtifactStore& store_;
  Fleet& fleet_;
  std::unordered_map<lws*, std::unique_ptr<Upload>> uploads_;
  std::uint64_t next_id_ = 0;
  std::uint64_t stored_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace fleetlink::broker::net
