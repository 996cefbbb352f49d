#pragma once
// The command kinds this agent can run: kind -> Executor. Built once at start
// (built-ins, the suite executor, plugins) and read-only afterwards.
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "admission.hpp"
#include "fleetlink/executor.hpp"

namespace fleetlink::agent {

class ExecutorRegistry {
 public:
  // False (and nothing changes) if the kind is already taken or the executor is null.
  bool add(std::shared_ptr<Executor> executor);
  Executor* find(std::string_view kind) const;
  KindSet kinds() const;
  std::size_t size() const noexcept { return by_kind_.size(); }

 private:
  std::map<std::string, std::shared_ptr<Executor>, std::less<>> by_kind_;
};

}  // namespace fleetlink::agent
