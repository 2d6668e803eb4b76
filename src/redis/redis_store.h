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
#include "redis/async_write_path.h"
#include "redis/boundary_sync.h"
#include "redis/clock_sync.h"
#include "redis/endpoint.h"
#include "redis/layout.h"
#include "redis/loop_thread.h"
#include "redis/reporter.h"
#include "redis/sentinel.h"
#include "redis/topology.h"
#include "redis/write_path.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// Store on Redis, made of parts with one job each:
// - StoreLayout: the keys and commands (redis/layout.h);
// - Topology: the nodes (one Redis, or a Cluster's primaries), which node serves which
//   slot, and each node's pool of blocking connections (RedisPool) and circuit breaker;
// - WritePath: an allowed request's write, from the application thread that decided it,
//   to the node of its slot;
// - BoundarySync: the reads at subinterval boundaries, on a libuv loop of its own
//   (LoopThread) with an asynchronous connection (AsyncRedis) to each node;
// - ClockSync: the offset to Redis' clock, measured on connecting and then on the loop,
//   on one node (another when that one fails).
// This class wires them: it connects, runs the loop's timers (boundary ticks, clock
// probes), probes each node whose circuit is open (ROLE every 200 ms: a master closes
// it) and, on recovery, has every active limiter's window read again. On a Cluster it
// reads the slot map (CLUSTER SLOTS) on starting, when a node says a slot moved or
// cannot serve, while a node is down (every 250 ms to 2 s, backing off), and every 10 s.
// Under Sentinel, a SentinelWatch finds the primary and follows its failovers; the store
// asks it again when the primary is lost or says it cannot serve (READONLY).
//
// Threads: the Store calls from any thread; everything that touches the asynchronous
// connections or the boundary reads' state runs on the loop thread.
class RedisStore final : public Store, private ReadRouter {
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
  void add_all(std::span<const StoreWrite> writes, std::span<const std::span<std::uint64_t>> counts,
               std::span<bool> written) override {
    writes_.add_all(writes, counts, written);
  }
  void remove(const StoreWrite& give_back) override {
    writes_.remove(give_back);
  }
  bool reset(const LimiterKey& key) override { return writes_.reset(key); }
  std::string counts_key(const LimiterKey& key) const override { return layout_.window_key(key); }
  bool available(std::uint64_t resource) const noexcept override {
    return topology_.all_available() ||
           topology_.node_for_resource(resource).circuit().available();
  }
  std::int64_t clock_offset() const noexcept override { return clock_sync_.offset(); }
  std::uint32_t live_nodes() const noexcept override { return boundary_.live_nodes(); }
  std::int64_t back_for(std::uint64_t resource) const noexcept override {
    return topology_.node_for_resource(resource).circuit().back_for();
  }
  std::chrono::nanoseconds retry_hint() const noexcept override {
    return topology_.all_available() ? std::chrono::nanoseconds(0) : std::chrono::seconds(1);
  }
  void add_stats(Stats& stats) const override;
  // An AsyncWritePath on `loop`.
  std::unique_ptr<AsyncWriter> async_writer(uv_loop_s* loop) override;
  // On the store's loop thread, through a writer of that loop's own.
  void write_async(std::span<const StoreWrite> writes,
                   std::span<const std::span<std::uint64_t>> counts, std::span<bool> written,
                   std::function<void(AsyncWriter&)> done) override;
  void shutdown() override;

  // Reads the whole window of every active limiter now, merges it, and waits. For tests
  // and the benchmarks, where time is driven by hand. False if it could not.
  bool sync_now();
  // uv_loop_close's result at shutdown: 0 when every handle was closed.
  int loop_close_result() const noexcept { return loop_close_result_; }
  const StoreLayout& layout() const noexcept { return layout_; }

 private:
  // Synchronous start: connect, read the slot map (Cluster), measure the clock. False if
  // Redis is not reachable now (the background connections keep trying); then
  // start_failure_ says what failed last (auth: Redis refused the credentials).
  bool connect_now();
  // On a Cluster: CLUSTER SLOTS on a blocking connection to `node`.
  Status read_slot_map(RedisNode& node, RedisConnection& connection);
  // Whether this client may use the key prefix's keys: a read of the nodes' key is
  // refused (NOPERM) by an ACL whose key patterns leave the prefix out. The refusal names
  // the user (ACL WHOAMI) and its key patterns (ACL GETUSER, when the user may read them).
  Status key_access(RedisConnection& connection);

  // ReadRouter (loop thread).
  Status route(std::uint16_t slot, AsyncRedis*& connection) override;
  bool all_ready() const override;
  bool cross_slot() const override { return !topology_.cluster(); }
  void moved() override { topology_.want_refresh(); }

  // Loop thread.
  AsyncRedis& connection_for(RedisNode& node);
  void on_ready(RedisNode& node);
  void on_lost(RedisNode& node, const Status& failure, bool dropped);
  void recover(RedisNode& node);
  // A ROLE on the node's background connection; recover() if a master answers.
  void probe(RedisNode& node);
  // CLUSTER SLOTS on a background connection.
  void refresh_map();
  // Under Sentinel: every slot to the primary found.
  void follow(const SentinelWatch::Primary& primary);
  // A connected node for the clock and the slot map: the current one while it is up.
  AsyncRedis* some_ready_connection();
  void tick();
  void schedule_tick();
  static void on_tick(uv_timer_t* timer);
  static void on_clock_timer(uv_timer_t* timer);

  const Options options_;
  Reporter reporter_;
  const StoreLayout layout_;
  ClockSync clock_sync_;
  Topology topology_;
  WritePath writes_;
  BoundarySync boundary_;

  std::atomic<std::uint64_t> connections_{0};
  std::atomic<std::uint64_t> map_refreshes_{0};

  // Loop thread only (after construction).
  struct NodeState {
    std::unique_ptr<AsyncRedis> connection;
    bool probing = false;
    std::int64_t last_probe_ns = 0;
  };
  std::vector<NodeState> nodes_;  // by node index
  std::size_t clock_node_ = 0;
  bool refreshing_ = false;
  std::int64_t last_refresh_ns_ = 0;
  std::int64_t refresh_backoff_ns_ = 250'000'000;
  uv_timer_t tick_timer_{};
  uv_timer_t clock_timer_{};

  std::atomic<bool> shut_down_{false};
  int loop_close_result_ = 0;
  LoopThread loop_;
  std::unique_ptr<AsyncWriter> loop_writer_;  // write_async's, made on the loop thread
  Status start_failure_;                       // see connect_now()
  std::unique_ptr<SentinelWatch> sentinel_;  // last: its thread stops first
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
