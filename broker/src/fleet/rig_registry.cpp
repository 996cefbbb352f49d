#include "fleet/rig_registry.hpp"

#include <algorithm>
#include <iterator>

namespace fleetlink::broker {

namespace {

template <typename Map, typename Key>
const typename Map::key_type* intern(Map& map, Key&& key) {
  auto it = map.try_emplace(std::forward<Key>(key), 0).first;
  ++it->second;
  return &it->first;
}

template <typename Map, typename Value>
void release(Map& map, const Value*& value) {
  if (!value) return;
  auto it = map.find(*value);
  if (it != map.end() && --it->second == 0) map.erase(it);
  value = nullptr;
}

}  // namespace

RigSession* RigRegistry::find(std::string_view rig_id) const {
  const auto it = rigs_.find(rig_id);
  return it == rigs_.end() ? nullptr : it->second;
}

void RigRegistry::for_each(const std::function<void(const RigSession&)>& visit) const {
  for (const auto& [id, s] : rigs_) visit(*s);
}

void RigRegistry::claim(const msg::Hello& hello, bool force, std::uint64_t now_ms, RegistryBackend::ClaimDone done) {
  backend_.claim(hello.rig_id, hello.boot_id, broker_id_, force, now_ms, std::move(done));
}

void RigRegistry::lookup(std::string_view rig_id, std::uint64_t now_ms, RegistryBackend::LookupDone done) {
  backend_.lookup(rig_id, now_ms, std::move(done));
}

void RigRegistry::release_stale(std::string_view rig_id, std::string_view boot_id) {
  backend_.release(rig_id, boot_id, broker_id_);
}

void RigRegistry::add(RigSession& s, msg::Hello&& hello) {
  s.rig_id = std::move(hello.rig_id);
  s.boot_id = parse_uuid(hello.boot_id).value_or(Uuid{});  // validated by hello_problem
  s.agent_version = intern(versions_, std::move(hello.agent_version));
  std::sort(hello.kinds.begin(), hello.kinds.end());
  s.kinds = intern(kind_sets_, std::move(hello.kinds));
  s.labels = intern(label_sets_, LabelList(std::make_move_iterator(hello.labels.begin()),
                                           std::make_move_iterator(hello.labels.end())));
  s.registered = true;
  rigs_.erase(std::string_view(s.rig_id));
  rigs_.emplace(std::string_view(s.rig_id), &s);
}

bool RigRegistry::remove(RigSession& s) {
  if (!s.registered) return false;
  s.registered = false;
  const auto it = rigs_.find(s.rig_id);
  if (it != rigs_.end() && it->second == &s) {
    rigs_.erase(it);
    backend_.release(s.rig_id, s.boot_id.to_string(), broker_id_);
  }
  return true;
}

void RigRegistry::refresh(const RigSession& s, std::uint64_t now_ms, RegistryBackend::RefreshDone done) {
  if (s.registered) backend_.refresh(s.rig_id, s.boot_id.to_string(), broker_id_, now_ms, std::move(done));
}

void RigRegistry::release_interned(RigSession& s) {
  release(versions_, s.agent_version);
  release(kind_sets_, s.kinds);
  release(label_sets_, s.labels);
}

}  // namespace fleetlink::broker
