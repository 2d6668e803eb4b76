// Boundary reads: the counts other nodes made, brought into this engine's limiters.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/store.h"
#include "redis/clock_sync.h"
#include "redis/layout.h"
#include "redis/reporter.h"
#include "redis/status.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

class AsyncRedis;

// Where a boundary read sends each command: the RedisStore, which knows which node serves
// a slot. Loop thread.
class ReadRouter {
 public:
  virtual ~ReadRouter() = default;
  // The connection to the node serving `slot`, if it is ready (ok). Otherwise: closed,
  // when that node is known to be down (its circuit is open), so its keys are left out
  // (its limiters are read whole when it is back); connect, when it is not connected now
  // (the read is tried again later).
  virtual Status route(std::uint16_t slot, AsyncRedis*& connection) = 0;
  // Whether every node that serves slots is connected.
  virtual bool all_ready() const = 0;
  // Whether one command may name keys of different slots (not on a Cluster).
  virtual bool cross_slot() const = 0;
  // A reply said that a slot moved (MOVED, ASK, TRYAGAIN, CLUSTERDOWN).
  virtual void moved() = 0;
};

// Shortly after each subinterval boundary (the settle delay lets writes still in flight
// land), reads what other nodes counted in the subinterval that just closed, for the
// limiters this engine is active on (used within their window), and merges it. It reads
// what changed, not everything: first the change sets of that epoch (only the shards
// where it has active limiters), then only the windows that another node wrote, asked
// for (MGET) as each change set arrives, and merged a reply at a time (closed epochs
// only). A node that wrote alone reads no window at all. Everything is pipelined, on the
// background connection of each node (a Cluster's primaries all at once).
//
// A read that fails is retried with the next boundary (its epochs stay unread). A read
// that comes too late for its change sets (they expire with epoch + 2), and the first
// read after an outage (resync_all), read every active limiter's whole window instead.
//
// Threads: the loop thread only, after construction; the statistics are atomics that
// add_stats() reads from any thread.
class BoundarySync {
 public:
  BoundarySync(const Options& options, const StoreLayout& layout, const ClockSync& clock,
               SyncTarget& target, Reporter& reporter);
  ~BoundarySync();
  BoundarySync(const BoundarySync&) = delete;
  BoundarySync& operator=(const BoundarySync&) = delete;

  // Where to read (nullptr: nowhere now). Every connection's raw handler must be on_reply.
  void attach(ReadRouter* router) noexcept { router_ = router; }
  static void on_reply(const redisReply* reply, void* context);

  // Takes in the limiters the engine used lately and starts the reads that are due
  // (none while Redis is not `available`).
  void tick(bool available);
  // Nanoseconds from `now` (Redis' time) to the next boundary read, at most `cap`.
  std::int64_t next_due(std::int64_t now, std::int64_t cap) const;
  // After an outage: read every active limiter's whole window at the next chance.
  void resync_all();
  // Reads every active limiter's whole window now (for tests and the benchmarks, where
  // time is driven by hand); done(ok) once merged.
  void read_all(std::function<void(bool)> done);
  void add_stats(Stats& stats) const;
  // The live nodes of this prefix at the last heartbeat's reply (0: none yet). Any thread.
  std::uint32_t live_nodes() const noexcept { return live_nodes_.load(std::memory_order_relaxed); }
  // How often this engine heartbeats (while the store is available), and how long a node
  // stays live after its last heartbeat.
  static constexpr std::int64_t kHeartbeatNs = 1'000'000'000;
  static constexpr std::int64_t kLiveMs = 3'000;

 private:
  struct Geometry;
  struct Batch;

  void absorb_activity(std::int64_t now);
  // Scores this node live and reads the live count, on the connection of the nodes' key.
  void heartbeat(std::int64_t now);
  // A heartbeat's live count.
  void take_live_count(std::uint32_t seen);
  // Reads `epochs` of a geometry: what their change sets name, or (`whole`) every active
  // limiter's window.
  void read(Geometry& g, std::vector<std::int64_t> epochs, bool whole,
            std::function<void(bool)> done);
  std::int64_t settle_ns(const Geometry& g) const noexcept;

  const Options& options_;
  const StoreLayout& layout_;
  const ClockSync& clock_;
  SyncTarget& target_;
  Reporter& reporter_;
  ReadRouter* router_ = nullptr;

  std::map<std::pair<std::uint32_t, std::uint32_t>, Geometry> geometries_;
  std::vector<Activity> activity_;  // scratch

  std::atomic<std::uint64_t> rounds_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> last_keys_{0};
  std::atomic<std::uint64_t> last_change_sets_{0};
  std::atomic<std::int64_t> last_ns_{0};
  std::atomic<std::int64_t> max_ns_{0};
  std::atomic<std::uint64_t> active_{0};
  std::int64_t next_heartbeat_ = 0;  // steady_ns()
  bool heartbeat_in_flight_ = false;
  std::int64_t fewer_since_ = INT64_MIN;  // steady_ns(): since when counts were lower
  std::atomic<std::uint32_t> live_nodes_{0};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
