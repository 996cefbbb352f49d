#include "app/stores.hpp"

#include "store/null_store.hpp"
#include "store/sqlite_store.hpp"

namespace fleetlink::broker {

Expected<std::unique_ptr<CommandStore>> open_command_store(const BrokerConfig& cfg) {
  if (cfg.store == "none") return std::unique_ptr<CommandStore>(std::make_unique<NullStore>());
  if (cfg.store == "redis") return std::unique_ptr<CommandStore>();  // the broker's Redis connection makes it (RedisFabric)
  auto sqlite = SqliteStore::open(cfg.state_dir);
  if (!sqlite) return sqlite.error();
  return std::unique_ptr<CommandStore>(std::move(*sqlite));
}

}  // namespace fleetlink::broker
