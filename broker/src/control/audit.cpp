#include "control/audit.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "control/control_json.hpp"

namespace fleetlink::broker {

std::string audit_value(std::string_view v) {
  if (v.empty()) return "-";
  bool plain = true;
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '\\' || c == '=') {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(v);
  std::string out = "\"";
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string audit_peer(std::string_view p) {
  constexpr std::string_view kMapped = "::ffff:";
  if (p.size() > kMapped.size() && p.substr(0, kMapped.size()) == kMapped &&
      p.find('.', kMapped.size()) != std::string_view::npos)
    p.remove_prefix(kMapped.size());
  return std::string(p);
}

std::string audit_line(const AuditEntry& e) {
  const bool known = e.caller != nullptr && e.caller->authenticated;
  std::string line = "time=" + iso8601_utc_ms(e.at_ms);
  line += " operator=" + (known ? audit_value(e.caller->name) : std::string("-"));
  line += " role=" + std::string(known ? to_string(e.caller->role) : "-");
  line += " peer=" + audit_value(e.peer);
  line += " request=" + audit_value(e.request);
  line += " target=" + audit_value(e.target);
  line += " status=" + audit_value(e.status);
  line += " result=" + audit_value(e.result);
  return line;
}

std::string audit_result_of_body(std::string_view body) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return "-";
  for (const char* key : {"error", "cmd_id", "job_id", "batch_id"}) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
      return std::string(std::strcmp(key, "error") == 0 ? "error:" : std::string(key) + ":") +
             it->get<std::string>();
  }
  return "-";
}

Expected<std::unique_ptr<AuditLog>> AuditLog::open_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return make_error(Errc::io, "cannot open the audit log '" + path + "': " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "a");
  if (f == nullptr) {
    ::close(fd);
    return make_error(Errc::io, "cannot open the audit log '" + path + "': " + std::strerror(errno));
  }
  auto log = std::make_unique<AuditLog>();
  log->file_ = f;
  log->path_ = path;
  return log;
}

AuditLog::~AuditLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void AuditLog::write(const AuditEntry& e) {
  std::string line = audit_line(e);
  if (file_ == nullptr) {
    FL_INFO("audit: %s", line.c_str());
    return;
  }
  line += '\n';
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  if (!ok && !failed_) {
    failed_ = true;
    FL_ERROR("audit log %s: write failed (%s); its lines go to this log until it works again", path_.c_str(),
             std::strerror(errno));
  }
  if (!ok) {
    std::clearerr(file_);
    line.pop_back();
    FL_INFO("audit: %s", line.c_str());
  } else {
    failed_ = false;
  }
}

}  // namespace fleetlink::broker
