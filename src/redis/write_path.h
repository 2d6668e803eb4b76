// The Redis store's writes: what an allowed request sends, from the application thread
// that decided it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "engine/store.h"
#include "redis/circuit.h"
#include "redis/latency_histogram.h"
#include "redis/layout.h"
#include "redis/reporter.h"
#include "redis/topology.h"

struct redisReply;

namespace ratewin::inline v1::detail {

// One round trip per admitted request, of native commands (see StoreLayout): the cost
// added to the shared count of its epoch and the whole shared window read back, from
// which the engine decides (the write itself is unconditional). A first write of this
// node to the window in an epoch also claims the epoch's slot of the ring and records the
// write in the epoch's change set. The rare corrections (a slot whose tag wrapped or whose
// key was made again, a count given back to a slot that moved on) take one more round
// trip on the same connection, within the same deadline; a correction that cannot be
// made leaves a count that errs high.
//
// Each call runs on pooled blocking connections of its own, to the node that serves the
// window's slot (and, if another node serves its change set's, to that one too, in
// parallel: still one round trip). A MOVED reply moves the slot in the map and the
// command is sent again to the node it names; an ASK sends it there once, after ASKING.
// The whole call, waiting for connections included, is bounded by the command timeout
// (plus the connect timeout when it has to open a connection). A network failure or
// timeout, or a server that says it cannot serve, opens that node's circuit; while it is
// open, calls for its slots fail at once.
//
// Threads: any number of application threads at once; it holds no lock across I/O.
class WritePath {
 public:
  WritePath(const Options& options, const StoreLayout& layout, Topology& topology,
            Reporter& reporter)
      : options_(options), layout_(layout), topology_(topology), reporter_(reporter) {}

  // Store::add.
  bool add(const StoreWrite& write, std::span<std::uint64_t> counts);
  // Store::add_all: every write's commands in one parallel round trip.
  void add_all(std::span<const StoreWrite> writes, std::span<const std::span<std::uint64_t>> counts,
               std::span<bool> written);
  // Store::remove.
  void remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost);
  void add_stats(Stats& stats) const;
  // Corrections made so far (second round trips; see the class comment).
  std::uint64_t repairs() const noexcept { return repairs_.load(std::memory_order_relaxed); }

 private:
  struct Call;
  struct Exchange;
  // What one write's replies (its commands are x's items first .. first + size) say:
  // counts (and a repair) if it was written.
  bool conclude(const StoreWrite& write, const Call& call, const Exchange& x, std::size_t first,
                std::size_t size, std::span<std::uint64_t> counts, std::int64_t started);
  const Options& options_;
  const StoreLayout& layout_;
  Topology& topology_;
  Reporter& reporter_;

  std::atomic<std::uint64_t> writes_ok_{0};
  std::atomic<std::uint64_t> writes_failed_{0};
  std::atomic<std::uint64_t> writes_skipped_{0};
  std::atomic<std::uint64_t> repairs_{0};
  LatencyHistogram latency_;
};

}  // namespace ratewin::inline v1::detail
