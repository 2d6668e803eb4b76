// An asynchronous Redis connection on a libuv loop, with deadlines and reconnection.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "redis/endpoint.h"
#include "redis/resp.h"
#include "redis/status.h"
#include "redis/transport.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

// A connection on the given loop, over the same transport as the blocking connections
// (redis/transport.h) and the same RESP (commands written once, replies parsed into
// recycled objects), waiting on a libuv poll handle instead of blocking. It connects, logs
// in (AUTH, SELECT, PING), and keeps trying to be connected: after a failure it waits an
// exponential backoff with jitter (from 50 ms up to 2 s) and connects again. Connecting
// and logging in must finish within their timeouts, and a connection with commands in
// flight that receives no reply for command_timeout is dropped (so a paused or
// unreachable server is noticed; a long pipelined batch that keeps receiving replies is
// not cut short). Commands queued in one turn of the loop go out together.
//
// Everything runs on the loop thread. Callbacks run exactly once each, on the loop; they
// may queue further commands, and close the connection, but not destroy it.
class AsyncRedis {
 public:
  struct Events {
    std::function<void()> ready;  // connected and logged in
    // An attempt failed, or the connection was lost. `dropped`: an established
    // connection was closed or reset by the other side (an idle timeout, a restart), as
    // opposed to a failed attempt or a server that stopped answering; the next attempt
    // follows at once (and reports again if it fails). The failure's code says what
    // kind it was (auth: Redis refused this client's credentials, a password missing or
    // wrong, or revoked since).
    std::function<void(const Status& failure, bool dropped)> lost;
  };
  // reply is null when the command failed; then `failure` says why (ok otherwise).
  using ReplyFn = std::function<void(const redisReply* reply, const Status& failure)>;

  AsyncRedis(uv_loop_t* loop, RedisEndpoint endpoint, std::chrono::milliseconds connect_timeout,
             std::chrono::milliseconds command_timeout, Events events);
  ~AsyncRedis();  // close() must have run and the loop must have closed its handles
  AsyncRedis(const AsyncRedis&) = delete;
  AsyncRedis& operator=(const AsyncRedis&) = delete;

  void start();
  bool ready() const noexcept { return state_ == State::kReady; }
  // Sends a command; `done` gets its reply, or an error if not connected or the
  // connection is lost before the reply.
  void command(std::initializer_list<std::string_view> args, ReplyFn done);
  // The same for a command already in RESP (one of a RespWriter's); `done` may be empty.
  void command_resp(std::string_view resp, ReplyFn done);
  // For writes and large batches: a command already in RESP (one of a RespWriter's),
  // answered through one plain handler set beforehand, so that nothing of ours is
  // allocated per command. `raw_handler(reply or null, context)` runs exactly once per
  // command, unless command_formatted returns false (not connected; then it never runs).
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
  // A command waiting for its reply: a raw one (handler and context) or one with its own
  // callback.
  struct Pending {
    void* context = nullptr;
    ReplyFn done;
    bool raw = false;
    bool counted = false;  // a caller's command (counted in in_flight_), not logging in
  };

  static void on_poll(uv_poll_t* handle, int status, int events);
  static void on_timer(uv_timer_t* timer);
  static void on_watchdog(uv_timer_t* timer);

  void connect_now();
  // Moves the connection forward: the handshake, then writes and reads as the socket
  // allows. `events`: what the poll handle reported.
  void pump(int events);
  void log_in();
  // Queues a command's callback (the command's bytes are in out_ already).
  void expect(Pending pending);
  // Watches the socket for what the connection waits for now.
  void watch();
  // Writes out_ as far as the socket takes it; false on a failure (then lost).
  bool write_out();
  // Reads what the socket holds and hands every complete reply to its callback; false on
  // a failure (then lost).
  bool read_in();
  // What to add to the message of a connection that broke while logging in (see
  // login_failure_hint).
  std::string hint(const Status& failure) const;
  // Ends the connection (transport and poll handle) and fails what is in flight with
  // `failure`; then reports it and schedules the next attempt (lose).
  void abort(const Status& failure, bool dropped = false);
  // Fails every command in flight with `failure`.
  void fail_pending(const Status& failure);
  // Records a failure and schedules the next attempt.
  void lose(const Status& failure, bool dropped = false);
  void arm(TimerAction action, std::chrono::milliseconds delay);
  void close_transport();
  // Real time, not the loop's cached time: a long callback (a large batch being queued)
  // must count as progress when it ends.
  static std::uint64_t now_ms() noexcept { return uv_hrtime() / 1'000'000; }

  uv_loop_t* loop_;
  const RedisEndpoint endpoint_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds command_timeout_;
  Events events_;
  State state_ = State::kIdle;
  std::unique_ptr<Transport> transport_;
  uv_poll_t* poll_ = nullptr;  // on transport_'s socket; freed in its close callback
  int polled_fd_ = -1;
  int watching_ = 0;  // the events poll_ watches
  Io::Result wants_ = Io::Result::done;  // what the transport waits for, if anything
  RespWriter out_;
  std::size_t written_ = 0;  // of out_
  RespReader in_;
  std::vector<Pending> queue_;  // in flight, oldest from queue_head_
  std::size_t queue_head_ = 0;
  std::uint64_t generation_ = 0;  // changes when the connection ends
  uv_timer_t timer_{};
  uv_timer_t watchdog_{};
  TimerAction timer_action_ = TimerAction::kNone;
  Status last_failure_;  // the latest attempt's (or, while logging in, the refusal)
  std::uint64_t in_flight_ = 0;
  std::uint64_t last_progress_ms_ = 0;
  std::uint64_t ready_since_ms_ = 0;
  std::chrono::milliseconds backoff_;
  bool login_failed_ = false;
  RawFn raw_handler_ = nullptr;
  std::minstd_rand jitter_;
  std::unique_ptr<char[]> chunk_;  // read buffer
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
