#pragma once
// Which connection is each rig's, on this broker (rig id -> session), and the
// fleet-wide claim behind it (RegistryBackend: the embedded registry, or Redis
// for several brokers). A session is registered once its HELLO is accepted, and
// forgotten when it closes or is superseded. Also interns what rigs share (agent
// versions, kind sets, label sets), reference-counted so a rig that reconnects
// with ever new values cannot grow them without bound. Pure.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/rig_session.hpp"
#include "fleet/string_hash.hpp"
#include "fleetlink/messages.hpp"
#include "store/registry_backend.hpp"

namespace fleetlink::broker {

class RigRegistry {
 public:
  RigRegistry(RegistryBackend& backend, std::string broker_id)
      : backend_(backend), broker_id_(std::move(broker_id)) {}

  RigSession* find(std::string_view rig_id) const;
  std::size_t size() const noexcept { return rigs_.size(); }
  bool backend_up() const { return backend_.up(); }
  // Other brokers share the registry: a rig not here may be connected to one of them.
  bool shared() const noexcept { return backend_.shared(); }
  RegistryBackend& backend() noexcept { return backend_; }
  std::string_view backend_name() const noexcept { return backend_.name(); }
  const std::string& broker_id() const noexcept { return broker_id_; }
  // Every registered session, in no particular order.
  void for_each(const std::function<void(const RigSession&)>& visit) const;

  // The fleet-wide claim for a HELLO; `force` when this broker already decided to
  // supersede its own stale connection for the rig.
  // The answer may come later (Redis): the session may be gone by then.
  void claim(const msg::Hello& hello, bool force, std::uint64_t now_ms, RegistryBackend::ClaimDone done);
  // Registers s as the rig's connection with the HELLO's facts (moved from).
  void add(RigSession& s, msg::Hello&& hello);
  // Forgets s if it is registered, releasing its fleet-wide claim. False if it was not.
  bool remove(RigSession& s);
  // Extends the fleet-wide claim of a registered session.
  void refresh(const RigSession& s, std::uint64_t now_ms, RegistryBackend::RefreshDone done);
  // Who owns the rig fleet-wide (this broker, another, or nobody).
  void lookup(std::string_view rig_id, std::uint64_t now_ms, RegistryBackend::LookupDone done);
  // Drops a fleet-wide entry this broker owns without a session for it (a stale
  // one: another broker asked to probe a connection this broker does not have).
  void release_stale(std::string_view rig_id, std::string_view boot_id);
  // Drops s's references to interned values (when the session is destroyed).
  void release_interned(RigSession& s);

 private:
  RegistryBackend& backend_;
  std::string broker_id_;
  // The key views the session's own rig_id (erased before the session goes).
  // TransparentStringHash is noexcept and not std::hash, so the nodes do not
  // cache the hash: 32 bytes a rig instead of 40 (a 48-byte malloc size class).
  std::unordered_map<std::string_view, RigSession*, TransparentStringHash, std::equal_to<>> rigs_;
  std::map<std::string, std::uint32_t> versions_;
  std::map<std::vector<std::string>, std::uint32_t> kind_sets_;
  std::map<LabelList, std::uint32_t> label_sets_;
};

}  // namespace fleetlink::broker
