#include "executor_registry.hpp"

namespace fleetlink::agent {

bool ExecutorRegistry::add(std::shared_ptr<Executor> executor) {
  if (!executor) return false;
  std::string kind(executor->kind());
  if (kind.empty() || by_kind_.contains(kind)) return false;
  by_kind_.emplace(std::move(kind), std::move(executor));
  return true;
}

Executor* ExecutorRegistry::find(std::string_view kind) const {
  auto it = by_kind_.find(kind);
  return it == by_kind_.end() ? nullptr : it->second.get();
}

KindSet ExecutorRegistry::kinds() const {
  KindSet out;
  for (const auto& [k, _] : by_kind_) out.insert(k);
  return out;
}

}  // namespace fleetlink::agent
