#include "net/artifact_endpoint.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/log.hpp"
#include "common/sha256.hpp"
#include "fleetlink/artifacts.hpp"
#include "net/lws_io.hpp"
#include "net/tls_identity.hpp"

namespace fleetlink::broker::net {

namespace {

// Body bytes that arrive while the command is looked up (a store that answers
// later) are kept in memory up to this much; past it the socket is paused.
constexpr std::size_t kMaxEarlyBytes = 4 * 1024 * 1024;

std::string header(lws* wsi, lws_token_indexes token) {
  const int len = lws_hdr_total_length(wsi, token);
  if (len <= 0) return {};
  std::string v(static_cast<std::size_t>(len) + 1, '\0');
  const int n = lws_hdr_copy(wsi, v.data(), len + 1, token);
  v.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return v;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

int http_status_of(ArtifactRefusal why) {
  switch (why) {
    case ArtifactRefusal::bad_name: return 400;
    case ArtifactRefusal::too_large: return 413;
    case ArtifactRefusal::store_full: return 507;
    case ArtifactRefusal::busy: return 503;
    case ArtifactRefusal::size_mismatch: return 400;
    case ArtifactRefusal::digest_mismatch: return 422;
    case ArtifactRefusal::io: return 500;
  }
  return 500;
}

// The x-amz-meta-* header the rig's PUT carries: the sha256 it declared, kept
// with the object so the broker's HEAD (and anyone's) can compare it.
constexpr const char* kShaMeta = "x-amz-meta-fleetlink-sha256";

std::uint64_t now_s() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace

// A signed HEAD of an object in the S3 store, run on libuv's thread pool (a
// blocking libcurl call never holds the loop); the answer comes back on the loop.
struct ArtifactEndpoint::HeadCheck {
  uv_work_t req{};
  std::string url;
  ArtifactEndpoint* endpoint = nullptr;
  std::shared_ptr<bool> alive;
  lws* wsi = nullptr;
  std::uint64_t upload_id = 0;
  // The answer
  CURLcode rc = CURLE_OK;
  long status = 0;
  curl_off_t length = -1;
  std::string meta_sha256;
  std::string curl_error;

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
    auto* self = static_cast<HeadCheck*>(user);
    std::string_view line(data, size * n);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos) {
      std::string name(line.substr(0, colon));
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      if (name == kShaMeta) {
        std::string_view v = line.substr(colon + 1);
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
        self->meta_sha256 = std::string(v);
      }
    }
    return size * n;
  }

  void run() {
    CURL* c = curl_easy_init();
    if (c == nullptr) {
      rc = CURLE_FAILED_INIT;
      return;
    }
    char errbuf[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, this);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (rc != CURLE_OK) curl_error = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
    curl_easy_cleanup(c);
  }
};

struct ArtifactEndpoint::Upload {
  enum class Phase : std::uint8_t { authorizing, receiving, checking, answering };
  // upload: the bytes come in this request; ask: where to upload them;
  // uploaded: they are in the S3 store, record them.
  enum class Kind : std::uint8_t { upload, ask, uploaded };
  lws* wsi = nullptr;
  std::uint64_t id = 0;
  Phase phase = Phase::authorizing;
  Kind kind = Kind::upload;
  std::string cmd_id;
  std::string name;
  std::string sha256;             // declared
  std::uint64_t declared = 0;
  std::string rig_id;             // the command's, once authorized
  CertIdentity identity;
  std::string early;              // body bytes that came before the command was found
  bool paused = false;
  bool body_complete = false;
  Sha256 digest;
  std::optional<ArtifactStore::Incoming> incoming;
  int status = 0;                 // the answer, once known
  std::string body;
};

ArtifactEndpoint::ArtifactEndpoint(ArtifactStore& store, Fleet& fleet, const s3::Target* s3, uv_loop_t* loop)
    : store_(store), fleet_(fleet), s3_(s3 != nullptr && loop != nullptr ? s3 : nullptr), loop_(loop) {
  // Before any thread of the pool uses curl: curl_global_init is not thread-safe.
  if (s3_ != nullptr) curl_global_init(CURL_GLOBAL_DEFAULT);
}
ArtifactEndpoint::~ArtifactEndpoint() { *alive_ = false; }

int ArtifactEndpoint::on_request(lws* wsi, std::string_view uri) {
  auto owned = std::make_unique<Upload>();
  Upload& u = *owned;
  u.wsi = wsi;
  u.id = ++next_id_;
  uploads_[wsi] = std::move(owned);

  const bool target = uri.starts_with(kTargetPrefix);
  if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) <= 0) {
    refuse(u, 405, "method_not_allowed", target ? "artifact targets are asked with POST" : "artifacts are uploaded with POST");
    return 0;
  }
  std::string_view rest = uri.substr(target ? kTargetPrefix.size() : kPathPrefix.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) {
    refuse(u, 400, "bad_request",
           target ? "the path is /v1/artifact-targets/{cmd_id}/{name}" : "the path is /v1/artifacts/{cmd_id}/{name}");
    return 0;
  }
  u.cmd_id = std::string(rest.substr(0, slash));
  u.name = std::string(rest.substr(slash + 1));
  char arg[128] = {};
  const char* sha = lws_get_urlarg_by_name(wsi, "sha256=", arg, sizeof arg);
  u.sha256 = sha ? sha : "";
  const std::string length = header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
  std::optional<std::uint64_t> declared = parse_u64(length);
  if (target) {
    // The size is the query's: the request itself has no body. (lws walks the
    // query's parts into the buffer and stops at the first that does not fit:
    // each buffer must hold the longest part, sha256=<64 hex>.)
    char size_arg[128] = {};
    const char* size = lws_get_urlarg_by_name(wsi, "size=", size_arg, sizeof size_arg);
    char done_arg[128] = {};
    const char* done = lws_get_urlarg_by_name(wsi, "uploaded=", done_arg, sizeof done_arg);
    u.kind = done != nullptr && std::string_view(done) == "1" ? Upload::Kind::uploaded : Upload::Kind::ask;
    if (declared.value_or(0) != 0) {
      refuse(u, 400, "bad_request", "an artifact-target request has no body");
      return 0;
    }
    declared = size ? parse_u64(size) : std::nullopt;
    if (!declared) {
      refuse(u, 400, "bad_size", "the query must give size= as the artifact's length in bytes");
      return 0;
    }
  }
  std::optional<CertIdentity> who = peer_identity(wsi);
  if (!who) {
    refuse(u, 401, "no_certificate", "an artifact upload needs the rig's client certificate (TLS)");
  } else if (!valid_artifact_name(u.name)) {
    refuse(u, 400, "bad_name", "artifact names are 1..128 of [A-Za-z0-9._-], not starting with '.'");
  } else if (!valid_sha256_hex(u.sha256)) {
    refuse(u, 400, "bad_digest", "the query must give sha256= as 64 lower-case hex digits");
  } else if (!declared) {
    refuse(u, 411, "length_required", "an artifact upload needs a Content-Length (no chunked bodies)");
  } else if (auto no = store_.check(u.cmd_id, u.name, *declared, /*here=*/u.kind == Upload::Kind::upload || s3_ == nullptr)) {
    refuse(u, http_status_of(no->why), to_string(no->why), no->detail);
  }
  if (u.phase == Upload::Phase::answering) return 0;
  u.identity = std::move(*who);
  u.declared = *declared;
  if (!u.digest.ok()) {
    refuse(u, 500, "io", "cannot start a sha256");
    return 0;
  }
  // The command decides the rest; a store that answers later answers on the loop.
  fleet_.command_then(u.cmd_id, [this, wsi, id = u.id](std::optional<CommandView> v) {
    auto it = uploads_.find(wsi);
    if (it == uploads_.end() || it->second->id != id) return;  // the connection went meanwhile
    authorize(*it->second, v);
  });
  return 0;
}

void ArtifactEndpoint::authorize(Upload& u, const std::optional<CommandView>& v) {
  if (u.phase != Upload::Phase::authorizing) return;
  if (!v) return refuse(u, 404, "unknown_command", "no command " + u.cmd_id);
  if (!identity_matches(v->rig_id, u.identity)) {
    return refuse(u, 403, "wrong_rig",
                  "command " + u.cmd_id + " is for rig " + v->rig_id + ", not for this certificate (" +
                      u.identity.subject + ")");
  }
  if (is_final(v->state)) {
    return refuse(u, 409, "command_finished",
                  "command " + u.cmd_id + " is " + std::string(to_string(v->state)) + ": its artifacts are closed");
  }
  u.rig_id = v->rig_id;
  if (u.kind != Upload::Kind::upload) return direct(u);
  ArtifactInfo info;
  info.cmd_id = u.cmd_id;
  info.name = u.name;
  info.sha256 = u.sha256;
  info.rig_id = v->rig_id;
  info.stored_at_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  auto begun = store_.begin(std::move(info), u.declared);
  if (auto* no = std::get_if<ArtifactError>(&begun)) return refuse(u, http_status_of(no->why), to_string(no->why), no->detail);
  u.incoming.emplace(std::move(std::get<ArtifactStore::Incoming>(begun)));
  u.phase = Upload::Phase::receiving;
  if (!u.early.empty()) {
    std::string early = std::move(u.early);
    u.early.clear();
    take(u, early);
  }
  if (u.paused) {
    u.paused = false;
    lws_rx_flow_control(u.wsi, 1);
  }
  if (u.body_complete) on_body_complete(u.wsi);
}

void ArtifactEndpoint::take(Upload& u, std::string_view bytes) {
  if (bytes.empty() || u.phase != Upload::Phase::receiving) return;
  u.digest.update(bytes);
  if (auto no = store_.write(*u.incoming, bytes)) refuse(u, http_status_of(no->why), to_string(no->why), no->detail);
}

void ArtifactEndpoint::direct(Upload& u) {
  if (u.kind == Upload::Kind::ask) {
    if (s3_ == nullptr) return answer(u, 200, nlohmann::json{{"store", "broker"}}.dump());
    // Both headers are signed: the store refuses a body of another length, and
    // keeps the declared digest with the object for the HEAD that records it.
    const std::string size = std::to_string(u.declared);
    const std::string url = s3_->presign("PUT", s3_->object_key(u.cmd_id, u.name), now_s(),
                                         {{"content-length", size}, {kShaMeta, u.sha256}});
    FL_INFO("artifact %s of %s goes to the S3 store (%llu bytes)", u.name.c_str(), u.cmd_id.c_str(),
            static_cast<unsigned long long>(u.declared));
    return answer(u, 200,
                  nlohmann::json{{"store", "s3"},
                                 {"method", "PUT"},
                                 {"url", url},
                                 {"headers", {{"content-length", size}, {kShaMeta, u.sha256}}},
                                 {"expires_in_s", s3_->settings().url_ttl_s}}
                      .dump());
  }
  if (s3_ == nullptr) {
    return refuse(u, 409, "s3_off", "this broker has no S3 store: upload with POST /v1/artifacts/ instead");
  }
  u.phase = Upload::Phase::checking;
  auto* check = new HeadCheck();
  check->req.data = check;
  check->url = s3_->presign("HEAD", s3_->object_key(u.cmd_id, u.name), now_s());
  check->endpoint = this;
  check->alive = alive_;
  check->wsi = u.wsi;
  check->upload_id = u.id;
  const int rc = uv_queue_work(
      loop_, &check->req, [](uv_work_t* req) { static_cast<HeadCheck*>(req->data)->run(); },
      [](uv_work_t* req, int) {
        std::unique_ptr<HeadCheck> done(static_cast<HeadCheck*>(req->data));
        if (!*done->alive) return;
        ArtifactEndpoint& self = *done->endpoint;
        auto it = self.uploads_.find(done->wsi);
        if (it == self.uploads_.end() || it->second->id != done->upload_id) return;  // the rig went meanwhile
        self.head_checked(*it->second, *done);
      });
  if (rc != 0) {
    delete check;
    refuse(u, 500, "io", std::string("cannot queue the S3 check: ") + uv_strerror(rc));
  }
}

void ArtifactEndpoint::head_checked(Upload& u, const HeadCheck& c) {
  const std::string where = s3_->describe() + "/" + s3_->object_key(u.cmd_id, u.name);
  if (c.rc != CURLE_OK) return refuse(u, 502, "s3_unreachable", "HEAD " + where + ": " + c.curl_error);
  if (c.status == 404) return refuse(u, 409, "not_uploaded", where + " is not in the S3 store (HEAD answered 404)");
  if (c.status != 200) {
    return refuse(u, c.status >= 500 ? 502 : 409, "s3_refused",
                  "HEAD " + where + " answered HTTP " + std::to_string(c.status));
  }
  if (c.length < 0 || static_cast<std::uint64_t>(c.length) != u.declared) {
    return refuse(u, 409, "size_mismatch",
                  where + " has " + std::to_string(c.length) + " bytes, the rig declared " + std::to_string(u.declared));
  }
  // The PUT had to carry it (it is signed into the URL): an object without it
  // was not put by that URL.
  if (c.meta_sha256 != u.sha256) {
    return refuse(u, 409, "digest_mismatch",
                  where + " carries sha256 '" + c.meta_sha256 + "' (" + kShaMeta + "), the rig declared " + u.sha256);
  }
  ArtifactInfo info;
  info.cmd_id = u.cmd_id;
  info.name = u.name;
  info.size = u.declared;
  info.sha256 = u.sha256;
  info.rig_id = u.rig_id;
  info.s3_key = s3_->object_key(u.cmd_id, u.name);
  info.stored_at_ms = now_s() * 1000;
  auto recorded = store_.record_remote(std::move(info));
  if (auto* no = std::get_if<ArtifactError>(&recorded)) return refuse(u, http_status_of(no->why), to_string(no->why), no->detail);
  const ArtifactInfo& a = std::get<ArtifactInfo>(recorded);
  ++stored_;
  FL_INFO("artifact recorded cmd=%s name=%s bytes=%llu rig=%s in the S3 store as %s", a.cmd_id.c_str(), a.name.c_str(),
          static_cast<unsigned long long>(a.size), a.rig_id.c_str(), a.s3_key.c_str());
  answer(u, 201, nlohmann::json{{"name", a.name}, {"size", a.size}, {"sha256", a.sha256}, {"store", "s3"}}.dump());
}

int ArtifactEndpoint::on_body(lws* wsi, const char* in, std::size_t len) {
  auto it = uploads_.find(wsi);
  if (it == uploads_.end()) return -1;
  Upload& u = *it->second;
  if (u.kind != Upload::Kind::upload) return 0;  // a target request has no body
  if (u.phase == Upload::Phase::authorizing) {
    u.early.append(in, len);
    if (u.early.size() > kMaxEarlyBytes && !u.paused) {
      u.paused = true;
      lws_rx_flow_control(wsi, 0);
    }
    return 0;
  }
  take(u, std::string_view(in, len));  // answering: the rest of a refused body is dropped
  return 0;
}

int ArtifactEndpoint::on_body_complete(lws* wsi) {
  auto it = uploads_.find(wsi);
  if (it == uploads_.end()) return -1;
  Upload& u = *it->second;
  u.body_complete = true;
  if (u.kind != Upload::Kind::upload || u.phase != Upload::Phase::receiving) return 0;  // authorizing: finished when the command is found
  auto stored = store_.commit(*u.incoming, u.digest.hex());
  if (auto* no = std::get_if<ArtifactError>(&stored)) {
    refuse(u, http_status_of(no->why), to_string(no->why), no->detail);
    return 0;
  }
  const ArtifactInfo& a = std::get<ArtifactInfo>(stored);
  ++stored_;
  FL_INFO("artifact stored cmd=%s name=%s bytes=%llu rig=%s", a.cmd_id.c_str(), a.name.c_str(),
          static_cast<unsigned long long>(a.size), a.rig_id.c_str());
  answer(u, 201, nlohmann::json{{"name", a.name}, {"size", a.size}, {"sha256", a.sha256}}.dump());
  return 0;
}

void ArtifactEndpoint::refuse(Upload& u, int status, std::string_view error, std::string detail) {
  if (u.phase == Upload::Phase::answering) return;
  ++refused_;
  FL_WARN("artifact upload refused cmd=%s name=%s: %d %.*s: %s", u.cmd_id.c_str(), u.name.c_str(), status,
          static_cast<int>(error.size()), error.data(), detail.c_str());
  u.incoming.reset();  // nothing half-stored
  answer(u, status, nlohmann::json{{"error", std::string(error)}, {"detail", detail}}.dump());
}

void ArtifactEndpoint::answer(Upload& u, int status, std::string body) {
  u.phase = Upload::Phase::answering;
  u.status = status;
  u.body = std::move(body);
  if (u.paused) {
    u.paused = false;
    lws_rx_flow_control(u.wsi, 1);
  }
  lws_callback_on_writable(u.wsi);
}

int ArtifactEndpoint::on_writeable(lws* wsi) {
  auto it = uploads_.find(wsi);
  if (it == uploads_.end() || it->second->phase != Upload::Phase::answering || it->second->status == 0) return 0;
  Upload& u = *it->second;
  unsigned char head[512];
  unsigned char* p = head;
  unsigned char* end = head + sizeof head - 1;
  if (lws_add_http_common_headers(wsi, static_cast<unsigned>(u.status), "application/json", u.body.size(), &p, end) ||
      lws_add_http_header_by_name(wsi, reinterpret_cast<const unsigned char*>("connection:"),
                                  reinterpret_cast<const unsigned char*>("close"), 5, &p, end) ||
      lws_finalize_http_header(wsi, &p, end)) {
    return -1;
  }
  std::string out(reinterpret_cast<const char*>(head), static_cast<std::size_t>(p - head));
  out += u.body;
  u.status = 0;  // written once
  (void)write_with_pre(wsi, out, LWS_WRITE_HTTP_FINAL);
  return -1;  // every answer ends the connection: a refused body is never read
}

void ArtifactEndpoint::on_closed(lws* wsi) {
  auto it = uploads_.find(wsi);
  if (it == uploads_.end()) return;
  Upload& u = *it->second;
  if (u.incoming) {
    FL_WARN("artifact upload cut off cmd=%s name=%s after %llu of %llu bytes: nothing stored", u.cmd_id.c_str(),
            u.name.c_str(), static_cast<unsigned long long>(u.incoming->written()),
            static_cast<unsigned long long>(u.declared));
  }
  uploads_.erase(it);  // an Incoming not committed removes its temporary file
}

}  // namespace fleetlink::broker::net
