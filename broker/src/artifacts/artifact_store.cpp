#include "artifacts/artifact_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "fleetlink/artifacts.hpp"

namespace fleetlink::broker {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIncoming = ".incoming";

std::string meta_name(std::string_view name) { return "." + std::string(name) + ".json"; }

ArtifactError refuse(ArtifactRefusal why, std::string detail) { return ArtifactError{why, std::move(detail)}; }

std::string errno_text(int e) { return std::strerror(e); }

bool valid_cmd_dir(std::string_view cmd_id) {
  // A cmd_id is a UUID: 36 of [0-9a-f-]. Anything else is no directory of ours.
  if (cmd_id.size() != 36) return false;
  return std::all_of(cmd_id.begin(), cmd_id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-'; });
}

std::optional<ArtifactInfo> read_meta(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  ArtifactInfo a;
  auto str = [&](const char* k, std::string& out) {
    if (!j.contains(k) || !j[k].is_string()) return false;
    out = j[k].get<std::string>();
    return true;
  };
  auto num = [&](const char* k, std::uint64_t& out) {
    if (!j.contains(k) || !j[k].is_number_unsigned()) return false;
    out = j[k].get<std::uint64_t>();
    return true;
  };
  if (!str("cmd_id", a.cmd_id) || !str("name", a.name) || !num("size", a.size) || !str("sha256", a.sha256) ||
      !str("rig_id", a.rig_id) || !num("stored_at_ms", a.stored_at_ms)) {
    return std::nullopt;
  }
  if (j.contains("s3_key") && !str("s3_key", a.s3_key)) return std::nullopt;
  return a;
}

bool write_meta(const fs::path& file, const ArtifactInfo& a) {
  nlohmann::json j = {{"cmd_id", a.cmd_id}, {"name", a.name},     {"size", a.size},
                      {"sha256", a.sha256}, {"rig_id", a.rig_id}, {"stored_at_ms", a.stored_at_ms}};
  if (!a.s3_key.empty()) j["s3_key"] = a.s3_key;
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump();
    if (!out.flush()) return false;
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  return !ec;
}

}  // namespace

const char* to_string(ArtifactRefusal why) noexcept {
  switch (why) {
    case ArtifactRefusal::bad_name: return "bad_name";
    case ArtifactRefusal::too_large: return "too_large";
    case ArtifactRefusal::store_full: return "store_full";
    case ArtifactRefusal::busy: return "busy";
    case ArtifactRefusal::size_mismatch: return "size_mismatch";
    case ArtifactRefusal::digest_mismatch: return "digest_mismatch";
    case ArtifactRefusal::io: return "io";
  }
  return "io";
}

// ---- Incoming ---------------------------------------------------------------

ArtifactStore::Incoming::Incoming(ArtifactStore* store, ArtifactInfo info, std::uint64_t declared, int fd,
                                  std::string tmp)
    : store_(store), info_(std::move(info)), declared_(declared), fd_(fd), tmp_(std::move(tmp)) {}

ArtifactStore::Incoming::Incoming(Incoming&& o) noexcept
    : store_(std::exchange(o.store_, nullptr)),
      info_(std::move(o.info_)),
      declared_(o.declared_),
      written_(o.written_),
      fd_(std::exchange(o.fd_, -1)),
      tmp_(std::move(o.tmp_)) {}

ArtifactStore::Incoming& ArtifactStore::Incoming::operator=(Incoming&& o) noexcept {
  if (this != &o) {
    discard();
    store_ = std::exchange(o.store_, nullptr);
    info_ = std::move(o.info_);
    declared_ = o.declared_;
    written_ = o.written_;
    fd_ = std::exchange(o.fd_, -1);
    tmp_ = std::move(o.tmp_);
  }
  return *this;
}

ArtifactStore::Incoming::~Incoming() { discard(); }

void ArtifactStore::Incoming::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  if (store_ != nullptr && store_->in_progress_ > 0) --store_->in_progress_;
  store_ = nullptr;
}

// ---- ArtifactStore ----------------------------------------------------------

ArtifactResult<std::unique_ptr<ArtifactStore>> ArtifactStore::open(std::string root, ArtifactLimits limits) {
  std::error_code ec;
  fs::create_directories(fs::path(root) / kIncoming, ec);
  if (ec) return refuse(ArtifactRefusal::io, "artifact directory " + root + ": " + ec.message());
  // Uploads a crash cut off: never committed, never listed.
  for (const auto& e : fs::directory_iterator(fs::path(root) / kIncoming, ec)) fs::remove(e.path(), ec);
  std::unique_ptr<ArtifactStore> store(new ArtifactStore(std::move(root), limits));
  store->recount();
  return store;
}

void ArtifactStore::recount() {
  total_bytes_ = 0;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(root_, ec)) {
    if (!dir.is_directory(ec) || !valid_cmd_dir(dir.path().filename().string())) continue;
    for (const auto& a : list(dir.path().filename().string())) {
      if (a.s3_key.empty()) total_bytes_ += a.size;  // the S3 store's bytes are not on this disk
    }
  }
}

std::uint64_t ArtifactStore::command_bytes(std::string_view cmd_id, std::string_view except_name) const {
  std::uint64_t n = 0;
  for (const auto& a : list(cmd_id)) {
    if (a.name != except_name) n += a.size;
  }
  return n;
}

std::optional<ArtifactError> ArtifactStore::check(std::string_view cmd_id, std::string_view name,
                                                  std::uint64_t declared, bool here) const {
  if (!valid_cmd_dir(cmd_id)) return refuse(ArtifactRefusal::bad_name, "not a command id: " + std::string(cmd_id));
  if (!valid_artifact_name(name)) {
    return refuse(ArtifactRefusal::bad_name, "artifact names are 1..128 of [A-Za-z0-9._-], not starting with '.'");
  }
  if (declared > limits_.max_artifact_bytes) {
    return refuse(ArtifactRefusal::too_large, "artifact of " + std::to_string(declared) + " bytes is over the " +
                                                  std::to_string(limits_.max_artifact_bytes) + "-byte limit per artifact");
  }
  const std::uint64_t others = command_bytes(cmd_id, name);
  if (others + declared > limits_.max_command_bytes) {
    return refuse(ArtifactRefusal::too_large,
                  "the command's artifacts would be " + std::to_string(others + declared) + " bytes, over the " +
                      std::to_string(limits_.max_command_bytes) + "-byte limit per command");
  }
  if (!here) return std::nullopt;
  if (total_bytes_ + declared > limits_.max_total_bytes) {
    return refuse(ArtifactRefusal::store_full, "the artifact store holds " + std::to_string(total_bytes_) +
                                                   " of its " + std::to_string(limits_.max_total_bytes) + " bytes");
  }
  if (in_progress_ >= limits_.max_uploads) {
    return refuse(ArtifactRefusal::busy, std::to_string(in_progress_) + " uploads in progress (the limit)");
  }
  return std::nullopt;
}

ArtifactResult<ArtifactStore::Incoming> ArtifactStore::begin(ArtifactInfo info, std::uint64_t declared) {
  if (auto no = check(info.cmd_id, info.name, declared)) return *no;
  const std::string tmp = (fs::path(root_) / kIncoming / (info.cmd_id + "." + std::to_string(++next_tmp_))).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    const int e = errno;
    return refuse(e == ENOSPC || e == EDQUOT ? ArtifactRefusal::store_full : ArtifactRefusal::io,
                  "cannot create " + tmp + ": " + errno_text(e));
  }
  ++in_progress_;
  return Incoming(this, std::move(info), declared, fd, tmp);
}

std::optional<ArtifactError> ArtifactStore::write(Incoming& in, std::string_view bytes) {
  if (in.fd_ < 0) return refuse(ArtifactRefusal::io, "the upload is over");
  if (in.written_ + bytes.size() > in.declared_) {
    return refuse(ArtifactRefusal::size_mismatch,
                  "more than the declared " + std::to_string(in.declared_) + " bytes");
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(in.fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : ENOSPC;
      return refuse(e == ENOSPC || e == EDQUOT ? ArtifactRefusal::store_full : ArtifactRefusal::io,
                    "writing the artifact: " + errno_text(e));
    }
    in.written_ += static_cast<std::uint64_t>(n);
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return std::nullopt;
}

ArtifactResult<ArtifactInfo> ArtifactStore::commit(Incoming& in, std::string_view computed_sha256) {
  if (in.fd_ < 0) return refuse(ArtifactRefusal::io, "the upload is over");
  if (in.written_ != in.declared_) {
    return refuse(ArtifactRefusal::size_mismatch, "the body had " + std::to_string(in.written_) +
                                                      " bytes, the upload declared " + std::to_string(in.declared_));
  }
  if (computed_sha256 != in.info_.sha256) {
    return refuse(ArtifactRefusal::digest_mismatch,
                  "the bytes' sha256 is " + std::string(computed_sha256) + ", the upload declared " + in.info_.sha256);
  }
  if (::close(std::exchange(in.fd_, -1)) != 0) {
    return refuse(ArtifactRefusal::store_full, "closing the artifact: " + errno_text(errno));
  }
  const fs::path dir = fs::path(root_) / in.info_.cmd_id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return refuse(ArtifactRefusal::io, "artifact directory " + dir.string() + ": " + ec.message());
  const std::uint64_t replaced = [&] {
    auto old = find(in.info_.cmd_id, in.info_.name);
    return old && old->s3_key.empty() ? old->size : 0;
  }();
  // The bytes first, then what lists them: a crash in between leaves a file
  // that nothing lists (removed with its directory at retention), never a
  // listing without its bytes.
  fs::rename(in.tmp_, dir / in.info_.name, ec);
  if (ec) return refuse(ArtifactRefusal::io, "storing the artifact: " + ec.message());
  in.tmp_.clear();
  ArtifactInfo info = in.info_;
  info.size = in.written_;
  if (!write_meta(dir / meta_name(info.name), info)) {
    fs::remove(dir / info.name, ec);
    return refuse(ArtifactRefusal::store_full, "writing the artifact's metadata failed (disk full?)");
  }
  total_bytes_ = total_bytes_ - std::min(total_bytes_, replaced) + info.size;
  if (in_progress_ > 0) --in_progress_;
  in.store_ = nullptr;
  return info;
}

ArtifactResult<ArtifactInfo> ArtifactStore::record_remote(ArtifactInfo info) {
  if (info.s3_key.empty()) return refuse(ArtifactRefusal::io, "no S3 key to record");
  if (auto no = check(info.cmd_id, info.name, info.size, /*here=*/false)) return *no;
  const fs::path dir = fs::path(root_) / info.cmd_id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return refuse(ArtifactRefusal::io, "artifact directory " + dir.string() + ": " + ec.message());
  // A local artifact of the same name (an earlier upload to the broker) is replaced.
  const auto old = find(info.cmd_id, info.name);
  if (!write_meta(dir / meta_name(info.name), info))
    return refuse(ArtifactRefusal::store_full, "writing the artifact's record failed (disk full?)");
  if (old && old->s3_key.empty()) {
    fs::remove(dir / info.name, ec);
    total_bytes_ -= std::min(total_bytes_, old->size);
  }
  return info;
}

std::vector<ArtifactInfo> ArtifactStore::list(std::string_view cmd_id) const {
  std::vector<ArtifactInfo> out;
  if (!valid_cmd_dir(cmd_id)) return out;
  std::error_code ec;
  const fs::path dir = fs::path(root_) / std::string(cmd_id);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (file.size() < 7 || file.front() != '.' || !file.ends_with(".json")) continue;
    auto a = read_meta(e.path());
    if (a && a->cmd_id == cmd_id && (!a->s3_key.empty() || fs::exists(dir / a->name, ec))) out.push_back(std::move(*a));
  }
  std::sort(out.begin(), out.end(), [](const ArtifactInfo& a, const ArtifactInfo& b) { return a.name < b.name; });
  return out;
}

std::optional<ArtifactInfo> ArtifactStore::find(std::string_view cmd_id, std::string_view name) const {
  if (!valid_cmd_dir(cmd_id) || !valid_artifact_name(name)) return std::nullopt;
  const fs::path dir = fs::path(root_) / std::string(cmd_id);
  auto a = read_meta(dir / meta_name(name));
  std::error_code ec;
  if (!a || a->cmd_id != cmd_id || a->name != name || (a->s3_key.empty() && !fs::exists(dir / a->name, ec)))
    return std::nullopt;
  return a;
}

std::string ArtifactStore::path_of(std::string_view cmd_id, std::string_view name) const {
  const auto a = find(cmd_id, name);
  if (!a || !a->s3_key.empty()) return {};
  return (fs::path(root_) / std::string(cmd_id) / std::string(name)).string();
}

std::size_t ArtifactStore::prune(std::uint64_t now_ms) {
  struct Command {
    std::string cmd_id;
    std::uint64_t newest_ms = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Command> commands;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(root_, ec)) {
    const std::string id = dir.path().filename().string();
    if (!dir.is_directory(ec) || !valid_cmd_dir(id)) continue;
    Command c{id, 0, 0};
    for (const auto& a : list(id)) {
      c.newest_ms = std::max(c.newest_ms, a.stored_at_ms);
      if (a.s3_key.empty()) c.bytes += a.size;  // an S3 object's record is pruned, its bytes are the bucket's
    }
    commands.push_back(std::move(c));
  }
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) { return a.newest_ms < b.newest_ms; });
  std::uint64_t total = 0;
  for (const auto& c : commands) total += c.bytes;
  std::size_t removed = 0;
  for (const auto& c : commands) {
    const bool old = c.newest_ms + limits_.max_age_ms < now_ms;
    if (!old && total <= limits_.max_total_bytes) break;  // oldest first: the rest are newer
    const auto n = fs::remove_all(fs::path(root_) / c.cmd_id, ec);
    if (ec) continue;
    removed += static_cast<std::size_t>(n);
    total -= c.bytes;
  }
  total_bytes_ = total;
  return removed;
}

}  // namespace fleetlink::broker
