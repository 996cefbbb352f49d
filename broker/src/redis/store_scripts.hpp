#pragma once
// The one Lua script of the Redis command store (redis/redis_store.hpp has the
// key layout). Every call is `EVALSHA <sha> 0 <op> <prefix> ...`: the keys are
// made in the script from the prefix, so the store is for a standalone Redis
// (or one primary), not Redis Cluster.
//
// Ops and their arguments (after op and prefix), and what they answer:
//   write   ncmd nrig njob, then 14 fields per command (cmd_id rig state job
//           key enqueued attempts sent acked running finished body has_result
//           result; '' for an unset time), 4 per rig (rig_id first last body),
//           4 per job (job_id created finished(0|1) body)
//           -> {writes counter, idempotency key conflicts}
//   get     cmd_id...                 -> {row or nil, ...}
//   bykey   key                       -> {row or nil}
//   openof  rig limit, extra cmd_id... -> {{row...}, {row or nil per extra}}
//   list    rig state job since_key since_ms before limit budget, extra cmd_id...
//                                     -> {{row...}, {row or nil per extra}}
//   getjobs head(0|1) job_id...       -> {job or nil, ...}
//   listjobs finished(''|0|1) since_ms before limit head budget, extra job_id...
//                                     -> {{job...}, {job or nil per extra}}
//   prune   age_key age_ms max_commands max_per_call -> {deleted, writes counter}
// A row is {cmd_id, s, r, j, k, e, a, st, ak, rn, f, b, res} (nil for a field
// not set); a job {job_id, created, finished, body}.
namespace fleetlink::broker::redis {

extern const char* const kStoreScript;

}  // namespace fleetlink::broker::redis
