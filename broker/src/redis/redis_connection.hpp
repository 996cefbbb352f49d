#pragma once
// One connection to Redis on the broker's own libuv loop (hiredis' async API
// and its libuv adapter): no call here ever blocks the loop. Commands are
// pipelined on the connection and answered in order, each through its
// callback, on the loop. When the connection drops, every command in flight
// is answered with an Error, up() turns false, and the connection is made
// again after retry_min doubling to retry_max; commands sent meanwhile are
// answered with an Error at once (before command() returns). on_up is called
// each time the connection is (re)established: a registry re-registers its
// rigs there.
//
// Called from the loop's thread only. The object must outlive nothing it
// gave to libuv: the destructor frees the hiredis context (answering what is
// in flight with an Error only if answer_on_close), and the handles it owns
// are closed on the loop, which must run once more to free them.
#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fleetlink/expected.hpp"

struct redisAsyncContext;
struct redisReply;

namespace fleetlink::broker::redis {

// A reply, copied out of hiredis'.
struct Reply {
  enum class Type : std::uint8_t { string, status, integer, nil, array, error };
  Type type = Type::nil;
  std::string str;  // string, status, error
  long long integer = 0;
  std::vector<Reply> elements;
  bool is_error() const noexcept { return type == Type::error; }
};

// hiredis' reply, copied (for the synchronous connections too).
Reply copy_reply(const redisReply* r);

struct ConnectionOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::chrono::milliseconds retry_min{100};
  std::chrono::milliseconds retry_max{5000};
  std::chrono::milliseconds connect_timeout{1000};
};

class RedisConnection {
 public:
  using ReplyCallback = std::function<void(Expected<Reply>)>;

  RedisConnection(uv_loop_t* loop, ConnectionOptions options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Starts connecting (and keeps reconnecting until destroyed).
  void start();
  bool up() const noexcept { return up_; }
  void set_on_up(std::function<void()> on_up) { on_up_ = std::move(on_up); }
  // Runs after each reply's callback (the application wakes what the callback scheduled).
  void set_after_reply(std::function<void()> after) { after_reply_ = std::move(after); }
  const std::string& endpoint() const noexcept { return endpoint_; }
  std::uint64_t connects() const noexcept { return connects_; }

  void command(const std::vector<std::string>& argv, ReplyCallback done);

  // Makes this a listening connection (pub/sub): it SUBSCRIBEs to `channels` on
  // every (re)connect, and each message on them calls on_message(channel,
  // payload) on the loop. Call before start(); such a connection sends nothing else.
  using MessageCallback = std::function<void(std::string_view channel, std::string_view payload)>;
  void listen(std::vector<std::string> channels, MessageCallback on_message);

 private:
  static void on_connect(const redisAsyncContext* ctx, int status);
  static void on_disconnect(const redisAsyncContext* ctx, int status);
  static void on_reply(redisAsyncContext* ctx, void* reply, void* privdata);
  static void on_message(redisAsyncContext* ctx, void* reply, void* privdata);
  void subscribe();
  void connect();
  void lost(const char* why);
  void schedule_retry();
  void connect_timed_out();

  uv_loop_t* loop_;
  ConnectionOptions options_;
  std::string endpoint_;
  redisAsyncContext* ctx_ = nullptr;
  uv_timer_t* retry_timer_ = nullptr;  // heap: closed on the loop after this object is gone
  std::chrono::milliseconds backoff_{0};
  bool up_ = false;
  bool closing_ = false;
  std::uint64_t connects_ = 0;
  std::function<void()> on_up_;
  std::function<void()> after_reply_;
  std::vector<std::string> channels_;  // listen(): subscribed on every connect
  MessageCallback on_message_;
};

}  // namespace fleetlink::broker::redis
