#pragma once
// The audit log: one line per mutating call of the control API (every POST,
// answered or refused, and every command a control stream sends), saying who,
// from where, what, on what, and how it ended (docs/OPERATIONS.md, "The audit log"):
//
//   time=2025-06-01T12:00:00.123Z operator=alice role=operator peer=127.0.0.1
//     request="POST /v1/rigs/rig-1/commands" target=rig:rig-1 status=202 result=cmd_id:0190...
//
// (one line; key=value separated by spaces, a value quoted when it holds a space,
// a quote, '=' or a control character, or is empty). With a file, each line is
// appended with one buffered write and a flush: a local file costs microseconds,
// but a file on a stalled disk would stall the loop as long (say so in docs).
// Without one, each line goes to the broker's log at info level, after "audit: ".
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "control/access.hpp"
#include "fleetlink/expected.hpp"

namespace fleetlink::broker {

struct AuditEntry {
  std::uint64_t at_ms = 0;
  const Caller* caller = nullptr;  // null or unauthenticated: operator=- role=-
  std::string_view peer;           // "-" when unknown
  std::string_view request;        // "POST /v1/jobs", "stream send"
  std::string_view target;         // "rig:rig-1", "cmd:<id>", "job:<id>", "-"
  std::string_view status;         // "202", "403"; the stream's "queued" or "refused"
  std::string_view result;         // "cmd_id:<id>", "job_id:<id>", "error:forbidden", "-"
};

// The line, without its '\n'.
std::string audit_line(const AuditEntry& e);
// A value as the line writes it: as is, "-" when empty, or quoted ("\"a b\"", with
// \" \\ and \xNN escapes) when it holds a space, a quote, a backslash, '=' or a control byte.
std::string audit_value(std::string_view v);

// A peer as lws gives it, an IPv4 client of a dual-stack socket as plain IPv4
// ("::ffff:127.0.0.1" -> "127.0.0.1").
std::string audit_peer(std::string_view lws_peer);

// result= of an HTTP answer: its JSON body's "error", else its "cmd_id", "job_id"
// or "batch_id", else "-".
std::string audit_result_of_body(std::string_view body);

class AuditLog {
 public:
  // Lines to the broker's log (info, "audit: ").
  AuditLog() = default;
  // Lines appended to `path` (made 0640 if missing); an error if it cannot be opened.
  static Expected<std::unique_ptr<AuditLog>> open_file(const std::string& path);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  void write(const AuditEntry& e);
  const std::string& path() const noexcept { return path_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  bool failed_ = false;  // a write failed: said once in the broker's log
};

}  // namespace fleetlink::broker
