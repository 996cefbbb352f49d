#pragma once
// Attaches a hiredis async context to a libuv loop, as hiredis' own
// adapters/libuv.h does, with one difference: a poll error (libuv reports
// POLLERR as a status < 0 and stops the poll, e.g. when Redis closes a
// connection that has writes pending) is handed to hiredis as a read, so it
// sees the failure and disconnects. hiredis 0.14's adapter returns on any
// status: the connection then stays dead and silent forever, no disconnect
// callback comes, and the broker never reconnects.
#include <uv.h>

struct redisAsyncContext;

namespace fleetlink::broker::redis {

// REDIS_OK / REDIS_ERR, as redisLibuvAttach.
int attach_to_loop(redisAsyncContext* ac, uv_loop_t* loop);

}  // namespace fleetlink::broker::redis
