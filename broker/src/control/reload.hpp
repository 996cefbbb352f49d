#pragma once
// POST /v1/admin/reload's port to the application: app/broker_app.cpp re-reads
// the rig listener's CA bundle, CRLs, certificate and key and the operators file
// (SIGHUP does the same), and says how it went. A reload that fails changes
// nothing (docs/OPERATIONS.md 2.1).
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fleetlink::broker {

struct ReloadOutcome {
  bool ok = false;
  std::string detail;                 // failed: why, naming the file
  std::vector<std::string> changes;   // ok: what changed, one line each (empty: nothing did)
  std::vector<std::string> warnings;  // ok: what holds but deserves a look (a CA without a CRL)
  std::size_t rigs_to_check = 0;      // ok: connections whose certificate is checked again now
};

class Reloader {
 public:
  virtual ~Reloader() = default;
  // `trigger` names who asked, for the log: "SIGHUP", "POST /v1/admin/reload by alice".
  virtual ReloadOutcome reload(std::string_view trigger) = 0;
};

}  // namespace fleetlink::broker
