#pragma once
// The broker's built-in artifact store: files rigs upload for their commands
// (a suite's full log, a junit XML, a core dump), kept beside the command
// record and never sent over the command channel (docs/OPERATIONS.md §12).
//
// Layout under the root (default <state-dir>/artifacts):
//   <cmd_id>/<name>          the bytes, exactly as uploaded
//   <cmd_id>/.<name>.json    what is known of them: size, sha256, rig, time
//                            (and s3_key for one kept in an S3-compatible
//                            store: then only this record is here)
//   .incoming/<random>       uploads in progress; renamed into place only once
//                            complete and checked, so nothing half-stored is
//                            ever listed. Leftovers of a crash are removed at open.
// Names cannot start with '.' (fleetlink/artifacts.hpp), so the metadata files
// can never collide with an artifact.
//
// Pure: files and directories only; the digest is computed by the caller (net/).
// Every call runs on the broker's loop; a large upload is written in the pieces
// the socket delivers, so the loop is never held for long. The files are not
// fsynced: a power cut can lose the artifacts of the last seconds (their RESULT
// still names them, with the digest an operator can check against).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fleetlink::broker {

struct ArtifactLimits {
  std::uint64_t max_artifact_bytes = 1ull << 30;       // one file: 1 GiB
  std::uint64_t max_command_bytes = 4ull << 30;        // all files of one command: 4 GiB
  std::uint64_t max_total_bytes = 20ull << 30;         // the whole store: 20 GiB (oldest pruned first)
  std::uint64_t max_age_ms = 7ull * 24 * 3600 * 1000;  // a command's artifacts: 7 days
  std::uint32_t max_uploads = 64;                      // uploads in progress at once
};

struct ArtifactInfo {
  std::string cmd_id;
  std::string name;
  std::uint64_t size = 0;
  std::string sha256;
  std::string rig_id;
  std::uint64_t stored_at_ms = 0;  // Unix ms
  // Where the bytes are when not here: the object's key in the S3-compatible
  // store (--artifact-s3-*; only the record is kept under the root). "" : here.
  std::string s3_key;
};

// Why an upload cannot start or finish; each has its HTTP answer (net/artifact_endpoint.cpp).
enum class ArtifactRefusal : std::uint8_t {
  bad_name,         // 400
  too_large,        // 413: over the per-artifact or per-command limit
  store_full,       // 507: over the store's total (after pruning) or the disk is full
  busy,             // 503: too many uploads in progress
  size_mismatch,    // 400: the body's length is not the declared one
  digest_mismatch,  // 422: the bytes are not the declared sha256
  io,               // 500
};

struct ArtifactError {
  ArtifactRefusal why = ArtifactRefusal::io;
  std::string detail;
};

// A value or the refusal (errors are values at this boundary).
template <typename T>
using ArtifactResult = std::variant<T, ArtifactError>;

class ArtifactStore {
 public:
  // Opens (creates) the root, removes what a crash left in .incoming and counts
  // what is stored.
  // Uploads in progress point at their store: it stays where it was made.
  static ArtifactResult<std::unique_ptr<ArtifactStore>> open(std::string root, ArtifactLimits limits);
  ArtifactStore(const ArtifactStore&) = delete;
  ArtifactStore& operator=(const ArtifactStore&) = delete;

  // One upload in progress: written piece by piece, then committed or aborted.
  // Destroying it without commit aborts it (its temporary file is removed).
  class Incoming {
   public:
    Incoming(Incoming&&) noexcept;
    Incoming& operator=(Incoming&&) noexcept;
    ~Incoming();
    const ArtifactInfo& info() const noexcept { return info_; }
    std::uint64_t written() const noexcept { return written_; }

   private:
    friend class ArtifactStore;
    Incoming(ArtifactStore* store, ArtifactInfo info, std::uint64_t declared, int fd, std::string tmp);
    void discard() noexcept;
    ArtifactStore* store_ = nullptr;
    ArtifactInfo info_;
    std::uint64_t declared_ = 0;
    std::uint64_t written_ = 0;
    int fd_ = -1;
    std::string tmp_;
  };

  // Checks the name and every limit against the declared size (an artifact of
  // the same name is replaced: a restarted upload), then opens the temporary file.
  // here=false: the bytes go to the S3 store; the limits of one artifact and of
  // the command hold, the store's total and its uploads in progress are not ours.
  std::optional<ArtifactError> check(std::string_view cmd_id, std::string_view name, std::uint64_t declared,
                                     bool here = true) const;
  ArtifactResult<Incoming> begin(ArtifactInfo info, std::uint64_t declared);
  std::optional<ArtifactError> write(Incoming& in, std::string_view bytes);
  // The body is complete: its length must be the declared one and its digest
  // (the caller's, lower-case hex) the declared sha256. Then it is in place.
  ArtifactResult<ArtifactInfo> commit(Incoming& in, std::string_view computed_sha256);

  // An artifact the rig put into the S3 store (info.s3_key set), once the broker
  // has seen the object: the limits are checked again, then it is listed.
  ArtifactResult<ArtifactInfo> record_remote(ArtifactInfo info);

  std::vector<ArtifactInfo> list(std::string_view cmd_id) const;
  std::optional<ArtifactInfo> find(std::string_view cmd_id, std::string_view name) const;
  // The file to read the bytes from ("" when unknown or kept in the S3 store).
  std::string path_of(std::string_view cmd_id, std::string_view name) const;

  // Retention: every command whose artifacts are older than max_age_ms, then the
  // oldest commands' until the total fits max_total_bytes. Returns the files removed.
  std::size_t prune(std::uint64_t now_ms);

  std::uint64_t total_bytes() const noexcept { return total_bytes_; }
  std::uint32_t uploads_in_progress() const noexcept { return in_progress_; }
  const ArtifactLimits& limits() const noexcept { return limits_; }
  const std::string& root() const noexcept { return root_; }

 private:
  ArtifactStore(std::string root, ArtifactLimits limits) : root_(std::move(root)), limits_(limits) {}
  std::uint64_t command_bytes(std::string_view cmd_id, std::string_view except_name) const;
  void recount();

  std::string root_;
  ArtifactLimits limits_;
  std::uint64_t total_bytes_ = 0;
  std::uint32_t in_progress_ = 0;
  std::uint64_t next_tmp_ = 0;
};

const char* to_string(ArtifactRefusal why) noexcept;

}  // namespace fleetlink::broker
