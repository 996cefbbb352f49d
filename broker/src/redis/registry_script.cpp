#include "redis/registry_script.hpp"

namespace fleetlink::broker::redis {

const char* const kRegistryScript = R"lua(
local key, op, boot, broker = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local ttl = tonumber(ARGV[4])
local mine = boot .. '|' .. broker
local cur = redis.call('GET', key)
if op == 'hello' then
  if not cur then
    redis.call('SET', key, mine, 'PX', ttl)
    return 'won|'
  end
  if cur == mine then
    redis.call('PEXPIRE', key, ttl)
    return 'won|'
  end
  local sep = string.find(cur, '|', 1, true)
  local cur_boot = sep and string.sub(cur, 1, sep - 1) or ''
  if ARGV[5] == '1' or boot > cur_boot then
    redis.call('SET', key, mine, 'PX', ttl)
    return 'superseded|' .. cur
  end
  return 'lost|' .. cur
elseif op == 'refresh' then
  if cur == mine then
    redis.call('PEXPIRE', key, ttl)
    return 'extended|'
  end
  if not cur then
    redis.call('SET', key, mine, 'PX', ttl)
    return 'restored|'
  end
  return 'superseded|' .. cur
elseif op == 'release' then
  if cur == mine then
    redis.call('DEL', key)
    return 'released|'
  end
  return 'kept|' .. (cur or '')
end
return redis.error_reply('fleetlink registry script: unknown op ' .. tostring(op))
)lua";

std::optional<RegistryEntry> parse_entry(std::string_view value) {
  const std::size_t sep = value.find('|');
  if (sep == std::string_view::npos) return std::nullopt;
  return RegistryEntry{std::string(value.substr(0, sep)), std::string(value.substr(sep + 1))};
}

std::string entry_value(std::string_view boot_id, std::string_view broker_id) {
  std::string v;
  v.reserve(boot_id.size() + 1 + broker_id.size());
  v.append(boot_id).append(1, '|').append(broker_id);
  return v;
}

namespace {

struct Split {
  std::string_view outcome, rest;
};

Expected<Split> split(std::string_view reply) {
  const std::size_t sep = reply.find('|');
  if (sep == std::string_view::npos)
    return make_error(Errc::malformed, "registry script answered '" + std::string(reply.substr(0, 64)) + "'");
  return Split{reply.substr(0, sep), reply.substr(sep + 1)};
}

Error unexpected(std::string_view reply) {
  return make_error(Errc::malformed, "registry script answered '" + std::string(reply.substr(0, 64)) + "'");
}

}  // namespace

Expected<ClaimReply> parse_claim_reply(std::string_view reply) {
  auto s = split(reply);
  if (!s) return s.error();
  ClaimReply r;
  if (s->outcome == "won") {
    r.outcome = ClaimOutcome::won;
    return r;
  }
  if (s->outcome == "superseded") r.outcome = ClaimOutcome::superseded;
  else if (s->outcome == "lost") r.outcome = ClaimOutcome::lost;
  else return unexpected(reply);
  r.before = parse_entry(s->rest);
  if (!r.before) return unexpected(reply);
  return r;
}

Expected<RefreshReply> parse_refresh_reply(std::string_view reply) {
  auto s = split(reply);
  if (!s) return s.error();
  RefreshReply r;
  if (s->outcome == "extended") {
    r.outcome = RefreshOutcome::extended;
  } else if (s->outcome == "restored") {
    r.outcome = RefreshOutcome::restored;
  } else if (s->outcome == "superseded") {
    r.outcome = RefreshOutcome::superseded;
    r.owner = parse_entry(s->rest);
    if (!r.owner) return unexpected(reply);
  } else {
    return unexpected(reply);
  }
  return r;
}

Expected<bool> parse_release_reply(std::string_view reply) {
  auto s = split(reply);
  if (!s) return s.error();
  if (s->outcome == "released") return true;
  if (s->outcome == "kept") return false;
  return unexpected(reply);
}

}  // namespace fleetlink::broker::redis
