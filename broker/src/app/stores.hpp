#pragma once
// The command store the configuration names (--store, --state-dir).
#include <memory>

#include "app/config.hpp"
#include "fleetlink/expected.hpp"
#include "store/command_store.hpp"

namespace fleetlink::broker {

Expected<std::unique_ptr<CommandStore>> open_command_store(const BrokerConfig& cfg);

}  // namespace fleetlink::broker
