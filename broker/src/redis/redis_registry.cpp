#include "redis/redis_registry.hpp"

#include <utility>

namespace fleetlink::broker::redis {
namespace {

Error reply_error(const Reply& r, const char* what) {
  return make_error(Errc::io, std::string("redis ") + what + ": " + r.str);
}

bool is_noscript(const Reply& r) { return r.is_error() && r.str.rfind("NOSCRIPT", 0) == 0; }

}  // namespace

RedisRegistry::RedisRegistry(RedisConnection& connection, RegistryOptions options)
    : connection_(connection), options_(std::move(options)) {}

std::string RedisRegistry::key_of(std::string_view rig_id) const {
  std::string k = options_.key_prefix;
  k.append(rig_id);
  return k;
}

std::string RedisRegistry::job_key_of(std::string_view job_id) const {
  std::string k = options_.job_key_prefix;
  k.append(job_id);
  return k;
}

void RedisRegistry::run(std::string key, std::string_view op, std::string_view boot_id,
                        std::string_view broker_id, bool force, TextCallback done) {
  // EVALSHA <sha> 1 <key> op boot broker ttl force; the sha goes in when known.
  std::vector<std::string> argv{"EVALSHA", "", "1", std::move(key), std::string(op), std::string(boot_id),
                                std::string(broker_id), std::to_string(options_.ttl.count()), force ? "1" : "0"};
  if (sha_.empty()) {
    load_then(std::move(argv), std::move(done));
    return;
  }
  evalsha(std::move(argv), true, std::move(done));
}

void RedisRegistry::load_then(std::vector<std::string> argv, TextCallback done) {
  connection_.command({"SCRIPT", "LOAD", kRegistryScript},
                      [this, argv = std::move(argv), done = std::move(done)](Expected<Reply> r) mutable {
                        if (!r) return done(r.error());
                        if (r->is_error() || r->type != Reply::Type::string)
                          return done(reply_error(*r, "SCRIPT LOAD"));
                        sha_ = r->str;
                        ++loads_;
                        evalsha(std::move(argv), false, std::move(done));
                      });
}

void RedisRegistry::evalsha(std::vector<std::string> argv, bool may_reload, TextCallback done) {
  argv[1] = sha_;
  auto retry_argv = may_reload ? argv : std::vector<std::string>{};
  connection_.command(argv, [this, retry_argv = std::move(retry_argv), may_reload,
                             done = std::move(done)](Expected<Reply> r) mutable {
    if (!r) return done(r.error());
    if (may_reload && is_noscript(*r)) {  // Redis lost its scripts: load it again, once
      sha_.clear();
      return load_then(std::move(retry_argv), std::move(done));
    }
    if (r->is_error()) return done(reply_error(*r, "registry script"));
    if (r->type != Reply::Type::string && r->type != Reply::Type::status)
      return done(make_error(Errc::malformed, "redis registry script: the answer is not text"));
    done(std::move(r->str));
  });
}

void RedisRegistry::claim(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id, bool force,
                          std::uint64_t /*now_ms*/, ClaimDone done) {
  run(key_of(rig_id), "hello", boot_id, broker_id, force, [done = std::move(done)](Expected<std::string> text) {
    if (!text) return done(text.error());
    done(parse_claim_reply(*text));
  });
}

void RedisRegistry::refresh(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                            std::uint64_t /*now_ms*/, RefreshDone done) {
  run(key_of(rig_id), "refresh", boot_id, broker_id, false, [done = std::move(done)](Expected<std::string> text) {
    if (!text) return done(text.error());
    done(parse_refresh_reply(*text));
  });
}

void RedisRegistry::release(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id) {
  release_then(rig_id, boot_id, broker_id, [](Expected<bool>) {});
}

void RedisRegistry::release_then(std::string_view rig_id, std::string_view boot_id, std::string_view broker_id,
                                 std::function<void(Expected<bool>)> done) {
  run(key_of(rig_id), "release", boot_id, broker_id, false, [done = std::move(done)](Expected<std::string> text) {
    if (!text) return done(text.error());
    done(parse_release_reply(*text));
  });
}

namespace {
constexpr std::string_view kJobBoot = "job";  // a job's holder has no boot: only the broker differs
}  // namespace

void RedisRegistry::claim_job(std::string_view job_id, std::string_view broker_id, bool force,
                              std::uint64_t /*now_ms*/, ClaimDone done) {
  run(job_key_of(job_id), "hello", kJobBoot, broker_id, force, [done = std::move(done)](Expected<std::string> text) {
    if (!text) return done(text.error());
    done(parse_claim_reply(*text));
  });
}

void RedisRegistry::refresh_job(std::string_view job_id, std::string_view broker_id, std::uint64_t /*now_ms*/,
                                RefreshDone done) {
  run(job_key_of(job_id), "refresh", kJobBoot, broker_id, false, [done = std::move(done)](Expected<std::string> text) {
    if (!text) return done(text.error());
    done(parse_refresh_reply(*text));
  });
}

void RedisRegistry::lookup(std::string_view rig_id, std::uint64_t /*now_ms*/, LookupDone done) {
  connection_.command({"GET", key_of(rig_id)}, [done = std::move(done)](Expected<Reply> r) {
    if (!r) return done(r.error());
    if (r->type == Reply::Type::nil) return done(std::optional<RegistryEntry>{});
    if (r->type != Reply::Type::string) return done(reply_error(*r, "GET"));
    std::optional<RegistryEntry> e = parse_entry(r->str);
    if (!e) return done(make_error(Errc::malformed, "redis: a rig key holds '" + r->str.substr(0, 64) + "'"));
    done(std::move(e));
  });
}

}  // namespace fleetlink::broker::redis
