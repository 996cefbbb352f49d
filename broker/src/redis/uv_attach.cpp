#include "redis/uv_attach.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <new>

namespace fleetlink::broker::redis {
namespace {

struct Events {
  redisAsyncContext* context = nullptr;
  uv_poll_t handle{};
  int events = 0;
};

void on_poll(uv_poll_t* handle, int status, int events) {
  auto* p = static_cast<Events*>(handle->data);
  if (p->context == nullptr) return;
  if (status < 0) {
    // The socket failed: a read finds out how (EOF, ECONNRESET, a refused
    // connect) and makes hiredis disconnect, which frees p (cleanup below).
    redisAsyncHandleRead(p->context);
    // Still attached (nothing to read yet): libuv stopped the poll; watch again.
    if (p->context != nullptr && p->events != 0) uv_poll_start(&p->handle, p->events, on_poll);
    return;
  }
  if ((events & UV_READABLE) != 0) redisAsyncHandleRead(p->context);
  if (p->context != nullptr && (events & UV_WRITABLE) != 0) redisAsyncHandleWrite(p->context);
}

void update(Events* p, int events) {
  p->events = events;
  if (events != 0) uv_poll_start(&p->handle, events, on_poll);
  else uv_poll_stop(&p->handle);
}

void add_read(void* privdata) {
  auto* p = static_cast<Events*>(privdata);
  update(p, p->events | UV_READABLE);
}
void del_read(void* privdata) {
  auto* p = static_cast<Events*>(privdata);
  update(p, p->events & ~UV_READABLE);
}
void add_write(void* privdata) {
  auto* p = static_cast<Events*>(privdata);
  update(p, p->events | UV_WRITABLE);
}
void del_write(void* privdata) {
  auto* p = static_cast<Events*>(privdata);
  update(p, p->events & ~UV_WRITABLE);
}

void cleanup(void* privdata) {
  auto* p = static_cast<Events*>(privdata);
  p->context = nullptr;  // hiredis frees the context; the handle goes on the loop
  uv_close(reinterpret_cast<uv_handle_t*>(&p->handle), [](uv_handle_t* h) { delete static_cast<Events*>(h->data); });
}

}  // namespace

int attach_to_loop(redisAsyncContext* ac, uv_loop_t* loop) {
  if (ac->ev.data != nullptr) return REDIS_ERR;
  auto* p = new (std::nothrow) Events;
  if (p == nullptr) return REDIS_ERR;
  if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
    delete p;
    return REDIS_ERR;
  }
  p->handle.data = p;
  p->context = ac;
  ac->ev.addRead = add_read;
  ac->ev.delRead = del_read;
  ac->ev.addWrite = add_write;
  ac->ev.delWrite = del_write;
  ac->ev.cleanup = cleanup;
  ac->ev.data = p;
  return REDIS_OK;
}

}  // namespace fleetlink::broker::redis
