// The Redis store: counts shared by every node, in Redis.
#pragma once

#include <uv.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/store.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"
#include "redis/async.h"
#include "redis/boundary_sync.h"
#include "redis/circuit.h"
#include "redis/clock_sync.h"
#include "redis/endpoint.h"
#include "redis/layout.h"
#include "redis/loop_thread.h"
#include "redis/pool.h"
#include "redis/reporter.h"
#include "redis/write_path.h"

namespace ratewin::inline v1::detail {

// Store on Redis, made of parts with one job each:
// - StoreLayout: the keys and commands (redis/layout.h);
// - WritePath: an allowed request's write, from the application thread that decided it,
//   on a pooled blocking connection (RedisPool);
// - CircuitBreaker: whether writes go to Redis at all;
// - BoundarySync: the reads at subinterval boundaries, on a libuv loop of its own
//   (LoopThread) with an asynchronous connection (AsyncRedis);
// - ClockSync: the offset to Redis' clock, measured on connecting and then on the loop.
// This class wires them: it connects, runs the loop's timers (boundary ticks, clock
// probes), probes while the circuit is open (ROLE every 200 ms: a master closes it) and,
// on recovery, has every active limiter's window read again.
//
// Threads: the Store calls from any thread; everything that touches the asynchronous
// connection or the boundary reads' state runs on the loop thread.
class RedisStore final : public Store {
 public:
  // Connects to options.redis (trying once, for up to the connect timeout, before
  // returning) with the options' key prefix, deadlines, pool size, settle delay, clock
  // synchronisation and logger. `clock` is the engine's own clock. Throws
  // std::invalid_argument for an address it cannot parse.
  RedisStore(const Options& options, std::shared_ptr<const Clock> clock, SyncTarget& target);
  ~RedisStore() override;

  bool add(const StoreWrite& write, std::span<std::uint64_t> counts) override {
    return writes_.add(write, counts);
  }
  void remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) override {
    writes_.remove(key, epoch, cost);
  }
  bool available() const noexcept override { return circuit_.available(); }
  std::int64_t clock_offset() const noexcept override { return clock_sync_.offset(); }
  std::chrono::nanoseconds retry_hint() const noexcept override { return circuit_.retry_hint(); }
  void add_stats(Stats& stats) const override;
  void shutdown() override;

  // Reads the whole window of every active limiter now, merges it, and waits. For tests
  // and the benchmarks, where time is driven by hand. False if it could not.
  bool sync_now();
  // uv_loop_close's result at shutdown: 0 when every handle was closed.
  int loop_close_result() const noexcept { return loop_close_result_; }
  const StoreLayout& layout() const noexcept { return layout_; }

 private:
  // Synchronous start: connect, measure the clock. False if Redis is not reachable now
  // (the background connection keeps trying).
  bool connect_now();

  // Loop thread.
  void on_ready();
  void on_lost(const std::string& error, bool dropped);
  void recover();
  // A ROLE on the background connection; recover() if a master answers.
  void probe();
  void tick();
  void schedule_tick();
  static void on_tick(uv_timer_t* timer);
  static void on_clock_timer(uv_timer_t* timer);

  const Options options_;
  const RedisEndpoint endpoint_;
  Reporter reporter_;
  const StoreLayout layout_;
  ClockSync clock_sync_;
  CircuitBreaker circuit_;
  RedisPool pool_;
  WritePath writes_;
  BoundarySync boundary_;

  std::atomic<std::uint64_t> connections_{0};

  // Loop thread only (after construction).
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
