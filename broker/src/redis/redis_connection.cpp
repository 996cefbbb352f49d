#include "redis/redis_connection.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <new>

#include "common/log.hpp"
#include "redis/uv_attach.hpp"

namespace fleetlink::broker::redis {
namespace {

struct PendingCommand {
  RedisConnection::ReplyCallback done;
  const bool* closing;
};

}  // namespace

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
  if (attach_to_loop(ctx, loop_) != REDIS_OK) {
    FL_WARN("redis %s: cannot attach to the loop", endpoint_.c_str());
    redisAsyncFree(ctx);
    schedule_retry();
    return;
  }
  redisAsyncSetConnectCallback(ctx, &RedisConnection::on_connect);
  redisAsyncSetDisconnectCallback(ctx, &RedisConnection::on_disconnect);
  ctx_ = ctx;
  // A connect not done by then is given up (a Redis host that drops SYNs).
  uv_timer_start(
      retry_timer_, [](uv_timer_t* t) { static_cast<RedisConnection*>(t->data)->connect_timed_out(); },
      static_cast<std::uint64_t>(options_.connect_timeout.count()), 0);
}

void RedisConnection::connect_timed_out() {
  if (closing_ || up_ || ctx_ == nullptr) return;
  redisAsyncContext* ctx = ctx_;
  ctx_ = nullptr;
  ctx->data = nullptr;  // its callbacks, if any come while it is freed, find nobody
  redisAsyncFree(ctx);
  lost("connect timed out or refused");
}

void RedisConnection::on_connect(const redisAsyncContext* ctx, int status) {
  auto* self = static_cast<RedisConnection*>(ctx->data);
  if (self == nullptr) return;
  if (self->retry_timer_ != nullptr) uv_timer_stop(self->retry_timer_);
  if (status != REDIS_OK) {
    // hiredis frees the context after this callback.
    self->ctx_ = nullptr;
    self->lost(ctx->errstr);
    return;
  }
  self->up_ = true;
  self->backoff_ = std::chrono::milliseconds(0);
  ++self->connects_;
  FL_INFO("redis %s: connected%s", self->endpoint_.c_str(), self->channels_.empty() ? "" : " (listening)");
  if (!self->channels_.empty()) self->subscribe();
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

void RedisConnection::listen(std::vector<std::string> channels, MessageCallback on_message) {
  channels_ = std::move(channels);
  on_message_ = std::move(on_message);
}

void RedisConnection::subscribe() {
  std::vector<const char*> args{"SUBSCRIBE"};
  std::vector<std::size_t> lens{9};
  for (const std::string& c : channels_) {
    args.push_back(c.data());
    lens.push_back(c.size());
  }
  // hiredis keeps this callback for every message of the subscription; its
  // privdata is this connection, which outlives the context (the destructor frees it).
  if (redisAsyncCommandArgv(ctx_, &RedisConnection::on_message, this, static_cast<int>(args.size()), args.data(),
                            lens.data()) != REDIS_OK)
    FL_WARN("redis %s: cannot subscribe", endpoint_.c_str());
}

void RedisConnection::on_message(redisAsyncContext* ctx, void* reply, void* /*privdata*/) {
  auto* self = static_cast<RedisConnection*>(ctx->data);
  if (self == nullptr || self->closing_ || reply == nullptr || !self->on_message_) return;
  const auto* r = static_cast<const redisReply*>(reply);
  // ["message", channel, payload]; the "subscribe" confirmations are not messages.
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
  const redisReply* what = r->element[0];
  if (what->type != REDIS_REPLY_STRING || std::string_view(what->str, what->len) != "message") return;
  const redisReply* channel = r->element[1];
  const redisReply* payload = r->element[2];
  if (channel->type != REDIS_REPLY_STRING || payload->type != REDIS_REPLY_STRING) return;
  try {
    self->on_message_(std::string_view(channel->str, channel->len), std::string_view(payload->str, payload->len));
  } catch (const std::exception& e) {
    FL_ERROR("redis: a message's callback failed: %s", e.what());
  }
}

void RedisConnection::on_reply(redisAsyncContext* ctx, void* reply, void* privdata) {
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
  if (auto* self = static_cast<RedisConnection*>(ctx->data); self != nullptr && self->after_reply_) self->after_reply_();
}

}  // namespace fleetlink::broker::redis
