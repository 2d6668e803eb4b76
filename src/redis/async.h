// An asynchronous Redis connection on a libuv loop, with deadlines and reconnection.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "redis/connection.h"
#include "redis/endpoint.h"

struct redisAsyncContext;
struct redisReply;

namespace ratewin::inline v1::detail {

// hiredis' async API on the given loop, through its libuv adapter. It connects, logs in
// (AUTH, SELECT, PING), and keeps trying to be connected: after a failure it waits an
// exponential backoff with jitter (from 50 ms up to 2 s) and connects again. Deadlines
// are libuv timers (hiredis 0.14 has none): connecting and logging in must finish within
// their timeouts, and a connection with commands in flight that receives no reply for
// command_timeout is dropped (so a paused or unreachable server is noticed; a long
// pipelined batch that keeps receiving replies is not cut short).
//
// Everything runs on the loop thread. Callbacks run exactly once each, on the loop.
class AsyncRedis {
 public:
  struct Events {
    std::function<void()> ready;  // connected and logged in
    // An attempt failed, or the connection was lost. `dropped`: an established
    // connection was closed or reset by the other side (an idle timeout, a restart), as
    // opposed to a failed attempt or a server that stopped answering; the next attempt
    // follows at once (and reports again if it fails).
    std::function<void(const std::string& error, bool dropped)> lost;
  };
  // reply is null when the command failed; then `error` says why.
  using ReplyFn = std::function<void(const redisReply* reply, const std::string& error)>;

  AsyncRedis(uv_loop_t* loop, RedisEndpoint endpoint, std::chrono::milliseconds connect_timeout,
             std::chrono::milliseconds command_timeout, Events events);
  ~AsyncRedis();  // close() must have run and the loop must have closed its handles
  AsyncRedis(const AsyncRedis&) = delete;
  AsyncRedis& operator=(const AsyncRedis&) = delete;

  void start();
  bool ready() const noexcept { return state_ == State::kReady; }
  // Sends a command; `done` gets its reply, or an error if not connected or the
  // connection is lost before the reply.
  void command(const RedisConnection::Argv& argv, ReplyFn done);
  // For large batches: a command already in RESP, answered through one plain handler
  // set beforehand, so that nothing of ours is allocated per command.
  // `raw_handler(reply or null, context)` runs exactly once per command, unless
  // command_formatted returns false (not connected; then it never runs).
  using RawFn = void (*)(const redisReply* reply, void* context);
  void set_raw_handler(RawFn handler) noexcept { raw_handler_ = handler; }
  bool command_formatted(std::string_view resp, void* context);
  // Writes what is queued to the socket now (as far as it takes it without blocking),
  // instead of on the next turn of the loop: while a large batch is still being queued,
  // Redis can already work on its beginning.
  void flush();
  // Stops reconnecting, fails what is in flight, and closes the handles; the loop can
  // then end.
  void close();


 private:
  enum class State { kIdle, kConnecting, kLoggingIn, kReady, kBackoff, kClosed };
  enum class TimerAction { kNone, kConnectDeadline, kLoginDeadline, kReconnect };
  struct Pending;
  class ReplyPool;  // reply objects for this connection's reader

  static void on_connect(const redisAsyncContext* ac, int status);
  static void on_disconnect(const redisAsyncContext* ac, int status);
  static void on_reply(redisAsyncContext* ac, void* reply, void* privdata);
  static void on_raw_reply(redisAsyncContext* ac, void* reply, void* privdata);
  static void on_timer(uv_timer_t* timer);
  static void on_watchdog(uv_timer_t* timer);

  void connect_now();
  void log_in();
  void send(const RedisConnection::Argv& argv, ReplyFn done);
  // Frees the context from outside hiredis' callbacks; in-flight commands fail.
  void abort(const std::string& reason);
  // Records a failure and schedules the next attempt.
  void lose(const std::string& reason, bool dropped = false);
  void arm(TimerAction action, std::chrono::milliseconds delay);
  // Real time, not the loop's cached time: a long callback (a large batch being queued)
  // must count as progress when it ends.
  static std::uint64_t now_ms() noexcept { return uv_hrtime() / 1'000'000; }

  uv_loop_t* loop_;
  const RedisEndpoint endpoint_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds command_timeout_;
  Events events_;
  State state_ = State::kIdle;
  redisAsyncContext* context_ = nullptr;
  uv_timer_t timer_{};
  uv_timer_t watchdog_{};
  TimerAction timer_action_ = TimerAction::kNone;
  std::string fail_reason_;  // what in-flight callbacks report when the context is freed
  std::string last_error_;
  std::uint64_t in_flight_ = 0;
  std::uint64_t last_progress_ms_ = 0;
  std::uint64_t ready_since_ms_ = 0;
  std::chrono::milliseconds backoff_;
  bool login_failed_ = false;
  RawFn raw_handler_ = nullptr;
  std::minstd_rand jitter_;
  std::unique_ptr<ReplyPool> replies_;  // outlives every context (which may hold a reply)
};

}  // namespace ratewin::inline v1::detail
