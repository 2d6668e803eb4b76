// The Redis store: counts shared by every node, in Redis.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "redis/latency_histogram.h"
#include "redis/loop_thread.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"
#include "redis/async.h"
#include "redis/endpoint.h"
#include "redis/pool.h"
#include "engine/store.h"

namespace ratewin::inline v1::detail {

// Key layout. The counts of one resource under one window geometry live in one hash,
//
//     <prefix>:{<resource as 16 hex digits>}:<resolution in ms>x<N>
//
// with one field per epoch: the field is epoch mod M and the value is the count. The
// hash tag {...} keeps every key of a resource in one Redis Cluster slot; the geometry
// suffix keeps limits of other intervals or resolutions apart. Each write deletes the
// fields more than N + 1 epochs old, and the key expires (N + 3) * resolution after the
// last write, so no field lives more than 2N + 4 epochs; with M a power of two
// >= 2 * (2N + 5), field numbers are small (the hash stays a compact listpack) and
// never alias.
struct KeyLayout {
  std::string prefix;

  std::string key(const LimiterKey& k) const;
  // The parts around the resource's 16 hex digits: "<prefix>:{" and "}:<res>x<N>".
  std::string head() const { return prefix + ":{"; }
  static std::string tail(std::uint32_t resolution_ms, std::uint32_t subintervals);
  static void hex16(char* out, std::uint64_t resource) noexcept;
  static std::uint64_t modulus(std::uint32_t subintervals) noexcept;
  static std::uint64_t field(std::int64_t epoch, std::uint32_t subintervals) noexcept;
  static std::int64_t ttl_ms(const LimiterKey& k) noexcept;
};

// The write (see Store::add): reads the window's shared counts, admits the cost if the
// estimate over them allows it (then adds it, refreshes the expiry and drops fields
// that have left the window), and returns {admitted, counts of epochs e, e-1, .., e-N}.
// KEYS[1] = the hash; ARGV = current field, cost, ttl (ms), modulus M, N, max,
// trailing weight (in 2^-20).
extern const char* const kWriteScript;
// Takes back a count the write script added (KEYS[1], field ARGV[1], amount ARGV[2]),
// never below 0 (the field may have been recycled meanwhile).
extern const char* const kGiveBackScript;

// Store on Redis.
//
// Application threads: an allowed request's write is one round trip (EVALSHA of the
// write script) on a pooled blocking connection of its own, which also brings back the
// whole shared window (so a limiter new to this engine is warm after its first write).
// The whole call, waiting for a connection included, is bounded by the command timeout
// (plus the connect timeout when it must open a connection).
//
// Background (a libuv loop on its own thread, with an async connection): shortly after
// each subinterval boundary (sync_settle), the counts of the epoch that just closed are
// read for every limiter used within its window, pipelined (one HMGET per limiter, all
// sent at once), and merged into the engine. Epochs whose read failed are read again
// with the next. The same thread measures the offset to the Redis clock (TIME) and
// keeps reconnecting with backoff while Redis is away.
//
// Circuit breaker: a network failure or timeout (or a server that says it cannot serve:
// READONLY, LOADING, ...) opens it; while open, add() fails at once. It closes when the
// background connection is (re)established and answers a PING (probed every 200 ms
// while open), and then every active limiter's window is read again. A working
// background connection that Redis closes (its idle timeout) is made again at once and
// opens the circuit only if that fails.
class RedisStore final : public Store {
 public:
  // Connects to options.redis (trying once, for up to the connect timeout, before
  // returning) with the options' key prefix, deadlines, pool size, settle delay, clock
  // synchronisation and logger. `clock` is the engine's own clock.
  RedisStore(const Options& options, std::shared_ptr<const Clock> clock, SyncTarget& target);
  ~RedisStore() override;

  std::optional<bool> add(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost,
                          std::uint64_t max, std::uint32_t trailing_weight,
                          std::span<std::uint64_t> counts) override;
  bool available() const noexcept override { return available_.load(std::memory_order_acquire); }
  std::int64_t clock_offset() const noexcept override {
    return offset_ns_.load(std::memory_order_relaxed);
  }
  std::chrono::nanoseconds retry_hint() const noexcept override;
  void remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) override;
  void add_stats(Stats& stats) const override;
  void shutdown() override;

  // Reads the whole window of every active limiter now, merges it, and waits. For tests
  // and the benchmarks, where time is driven by hand. False if it could not.
  bool sync_now();
  // uv_loop_close's result at shutdown: 0 when every handle was closed.
  int loop_close_result() const noexcept { return loop_close_result_; }

 private:
  struct Geometry {
    std::uint32_t resolution_ms = 0;
    std::uint32_t subintervals = 0;
    std::int64_t next_boundary = 0;  // epoch whose start is the next boundary
    std::set<std::int64_t> unread;   // closed epochs not read yet
    std::unordered_map<std::uint64_t, std::int64_t> active;  // resource -> last epoch used here
    bool reading = false;
    bool resync = false;  // read whole windows at the next chance (after recovery)
    std::int64_t resolution_ns() const noexcept { return std::int64_t{resolution_ms} * 1'000'000; }
  };
  struct Batch;

  std::int64_t aligned_now() const noexcept { return clock_->now().count() + clock_offset(); }
  void log(LogLevel level, const std::string& message) const;
  void note_error(const std::string& error);
  // A synchronous call failed: open the circuit on a network failure.
  void failed(const std::string& error, bool network);
  void open_circuit(const std::string& why);
  // Synchronous start: connect, load the script, measure the clock. False if Redis is
  // not reachable now (the background connection keeps trying).
  bool connect_now();
  std::optional<std::string> script_sha() const;
  // The server's clock from a TIME reply, in ns since the Unix epoch; nothing if the
  // reply is not a well-formed TIME (an error: TIME may be denied by an ACL or renamed).
  static std::optional<std::int64_t> server_time(const redisReply& reply);
  // TIME was refused: the clock offset stays as it is; warns once.
  void clock_refused(const std::string& reply);

  // Loop thread.
  void on_ready();
  void on_lost(const std::string& error, bool dropped);
  void recover();
  // A PING on the background connection; recover() if it answers.
  void probe();
  // Takes in the limiters the engine used since the last call.
  void absorb_activity(std::int64_t now);
  void tick();
  void schedule_tick();
  void read(Geometry& g, std::vector<std::int64_t> epochs, std::function<void(bool)> done);
  void probe_clock(int samples);
  void take_clock_sample(std::int64_t sent, std::int64_t received, std::int64_t server_ns);
  static void on_tick(uv_timer_t* timer);
  static void on_clock_timer(uv_timer_t* timer);

  const Options options_;
  const RedisEndpoint endpoint_;
  const std::shared_ptr<const Clock> clock_;
  const KeyLayout layout_;
  SyncTarget& target_;
  RedisPool pool_;

  std::atomic<bool> available_{false};
  std::atomic<std::int64_t> offset_ns_{0};
  std::atomic<std::int64_t> rtt_ns_{0};
  std::atomic<std::int64_t> down_since_ns_{0};  // steady clock, when the circuit opened

  mutable std::mutex mutex_;  // guards sha_ and last_error_
  std::string sha_;
  std::string last_error_;

  std::atomic<std::uint64_t> circuit_opens_{0};
  std::atomic<std::uint64_t> writes_ok_{0};
  std::atomic<std::uint64_t> writes_failed_{0};
  std::atomic<std::uint64_t> writes_skipped_{0};
  std::atomic<bool> clock_warned_{false};
  std::atomic<std::uint64_t> sync_rounds_{0};
  std::atomic<std::uint64_t> sync_failures_{0};
  std::atomic<std::uint64_t> sync_last_keys_{0};
  std::atomic<std::int64_t> sync_last_ns_{0};
  std::atomic<std::int64_t> sync_max_ns_{0};
  std::atomic<std::uint64_t> active_limiters_{0};
  std::atomic<std::uint64_t> connections_{0};
  LatencyHistogram write_latency_;

  // Loop thread only (after construction).
  std::vector<std::pair<std::int64_t, std::int64_t>> clock_samples_;  // (rtt, offset)
  std::map<std::pair<std::uint32_t, std::uint32_t>, Geometry> geometries_;
  std::vector<Activity> activity_;  // scratch
  bool probing_ = false;
  std::int64_t last_probe_ns_ = 0;
  uv_timer_t tick_timer_{};
  uv_timer_t clock_timer_{};

  std::atomic<bool> shut_down_{false};
  int loop_close_result_ = 0;
  std::unique_ptr<AsyncRedis> async_;  // created and used on the loop
  LoopThread loop_;                    // last: its thread stops first
};

}  // namespace ratewin::inline v1::detail
