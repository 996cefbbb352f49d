#include "redis/redis_connection.hpp"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <new>

#include "common/log.hpp"

namespace fleetlink::broker::redis {
namespace {

Reply copy_reply(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = Reply::Type::string; break;
    case REDIS_REPLY_STATUS: out.type = Reply::Type::status; break;
    case REDIS_REPLY_ERROR: out.type = Reply::Type::error; break;
    case REDIS_REPLY_INTEGER: out.type = Reply::Type::integer; break;
    case REDIS_REPLY_ARRAY: out.type = Reply::Type::array; break;
    default: out.type = Reply::Type::nil; break;
  }
  if (r->str != nullptr) out.str.assign(r->str, r->len);
  out.integer = r->integer;
  for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
  return out;
}

struct PendingCommand {
  RedisConnection::ReplyCallback done;
  const bool* closing;
};

}  // namespace

RedisConnection::RedisConnection(uv_loop_t* loop, ConnectionOptions options)
    : loop_(loop), options_(std::move(options)),
      endpoint_(options_.host + ":" + std::to_string(options_.port)) {}

RedisConnection::~RedisConnection() {
  closing_ = true;
  if (ctx_ != nullptr) {
    redisAsyncContext* ctx = ctx_;
    ctx_ = nullptr;
    ctx->data = nullptr;
    redisAsyncFree(ctx);  // answers what is in flight (closing_: nobody is called)
  }
  if (retry_timer_ != nullptr) {
    uv_timer_stop(retry_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(retry_timer_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    retry_timer_ = nullptr;
  }
}

void RedisConnection::start() {
  if (retry_timer_ == nullptr) {
    retry_timer_ = new uv_timer_t;
    uv_timer_init(loop_, retry_timer_);
    retry_timer_->data = this;
  }
  connect();
}

void RedisConnection::connect() {
  if (closing_ || ctx_ != nullptr) return;
  redisAsyncContext* ctx = redisAsyncConnect(options_.host.c_str(), options_.port);
  if (ctx == nullptr || ctx->err != 0) {
    FL_WARN("redis %s: cannot connect: %s", endpoint_.c_str(), ctx ? ctx->errstr : "out of memory");
    if (ctx != nullptr) redisAsyncFree(ctx);
    schedule_retry();
    return;
  }
  ctx->data = this;
  if (redisLibuvAttach(ctx, loop_) != REDIS_OK) {
    FL_WARN("redis %s: cannot attach to the loop", endpoint_.c_str());
    redisAsyncFree(ctx);
    schedule_retry();
    return;
  }
  redisAsyncSetConnectCallback(ctx, &RedisConnection::on_connect);
  redisAsyncSetDisconnectCallback(ctx, &RedisConnection::on_disconnect);
  ctx_ = ctx;
}

void RedisConnection::on_connect(const redisAsyncContext* ctx, int status) {
  auto* self = static_cast<RedisConnection*>(ctx->data);
  if (self == nullptr) return;
  if (status != REDIS_OK) {
    // hiredis frees the context after this callback.
    self->ctx_ = nullptr;
    self->lost(ctx->errstr);
    return;
  }
  self->up_ = true;
  self->backoff_ = std::chrono::milliseconds(0);
  ++self->connects_;
  FL_INFO("redis %s: connected", self->endpoint_.c_str());
  if (self->on_up_) self->on_up_();
}

void RedisConnection::on_disconnect(const redisAsyncContext* ctx, int status) {
  auto* self = static_cast<RedisConnection*>(ctx->data);
  if (self == nullptr) return;
  self->ctx_ = nullptr;  // freed by hiredis after this callback
  self->lost(status == REDIS_OK ? "closed" : ctx->errstr);
}

void RedisConnection::lost(const char* why) {
  const bool was_up = up_;
  up_ = false;
  if (closing_) return;
  if (was_up) FL_WARN("redis %s: connection lost: %s", endpoint_.c_str(), why);
  else FL_DEBUG("redis %s: cannot connect: %s", endpoint_.c_str(), why);
  schedule_retry();
}

void RedisConnection::schedule_retry() {
  if (closing_ || retry_timer_ == nullptr) return;
  backoff_ = backoff_.count() == 0 ? options_.retry_min : std::min(backoff_ * 2, options_.retry_max);
  uv_timer_start(
      retry_timer_, [](uv_timer_t* t) { static_cast<RedisConnection*>(t->data)->connect(); },
      static_cast<std::uint64_t>(backoff_.count()), 0);
}

void RedisConnection::command(const std::vector<std::string>& argv, ReplyCallback done) {
  if (!up_ || ctx_ == nullptr) {
    done(make_error(Errc::io, "redis " + endpoint_ + " is not connected"));
    return;
  }
  std::vector<const char*> args;
  std::vector<std::size_t> lens;
  args.reserve(argv.size());
  lens.reserve(argv.size());
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* pending = new (std::nothrow) PendingCommand{std::move(done), &closing_};
  if (pending == nullptr) return;
  if (redisAsyncCommandArgv(ctx_, &RedisConnection::on_reply, pending, static_cast<int>(args.size()), args.data(),
                            lens.data()) != REDIS_OK) {
    ReplyCallback cb = std::move(pending->done);
    delete pending;
    cb(make_error(Errc::io, "redis " + endpoint_ + ": the command could not be queued"));
  }
}

void RedisConnection::on_reply(redisAsyncContext* ctx, void* reply, void* privdata) {
  (void)ctx;
  auto* pending = static_cast<PendingCommand*>(privdata);
  ReplyCallback done = std::move(pending->done);
  const bool closing = *pending->closing;
  delete pending;
  if (closing || !done) return;
  try {
    if (reply == nullptr) {
      done(make_error(Errc::io, "redis: the connection ended before the reply"));
      return;
    }
    done(copy_reply(static_cast<const redisReply*>(reply)));
  } catch (const std::exception& e) {
    FL_ERROR("redis: a reply's callback failed: %s", e.what());
  }
}

}  // namespace fleetlink::broker::redis
