// The Redis store's writes: what an allowed request sends, from the application thread
// that decided it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/store.h"
#include "redis/circuit.h"
#include "redis/latency_histogram.h"
#include "redis/layout.h"
#include "redis/reporter.h"
#include "redis/topology.h"

struct redisReply;

namespace ratewin::inline v1::detail {

// How one command of a write ended.
enum class CommandEnd { kPending, kAnswered, kSkipped, kFailed };

// A write's commands, as StoreLayout makes them, and the nodes that serve them: the
// window's (its first two) to the node of its slot, the change set's (a first write's
// last two) to the node of the change set's slot.
struct WritePlan {
  std::vector<Command> commands;
  RedisNode* home = nullptr;
  RedisNode* sets = nullptr;
  RedisNode& node(std::size_t i) const noexcept { return i < 2 ? *home : *sets; }
};

// What one write learned from the final replies to its commands.
struct WriteReplies {
  bool unavailable = false;                // Redis said it cannot serve (READONLY, LOADING, ...)
  std::string refused;                     // another error reply
  std::array<std::int64_t, 4> bitfield{};  // the BITFIELD's integers (nil: 0, absent)
  std::array<bool, 4> present{};
  std::size_t bitfield_size = 0;
  std::string window;  // the window string read back (empty: no key)
  bool window_read = false;
  // A token bucket's or a log's reply (StoreLayout::script_command): its integers (one,
  // or a log's four).
  std::array<long long, 4> script{};
  std::size_t script_size = 0;
  bool script_read = false;

  // The final reply to the write's command `i` (a write of cost 0 only reads).
  void take(const StoreWrite& write, std::size_t i, const redisReply& r);
};

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
  void remove(const StoreWrite& give_back);
  // Store::reset: deletes the limiter's window key.
  bool reset(const LimiterKey& key);
  void add_stats(Stats& stats) const;
  // Corrections made so far (second round trips; see the class comment).
  std::uint64_t repairs() const noexcept { return repairs_.load(std::memory_order_relaxed); }

  // The parts shared with AsyncWritePath, which sends the same commands from an event
  // loop and reads the same replies.
  //
  // A write's commands and nodes; false (counted as skipped) while its node's circuit is
  // open.
  bool plan(const StoreWrite& write, WritePlan& out);
  // What a write's replies say: true (and `counts` filled) if it was written. `ends` is
  // how each of its commands ended, `error` the first failure. When a correction is due
  // (see the class comment), `repair` gets its commands, for the write's home node.
  bool conclude(const StoreWrite& write, const WriteReplies& replies,
                std::span<const CommandEnd> ends, const std::string& error,
                std::span<std::uint64_t> counts, std::int64_t started,
                std::vector<Command>& repair);
  // conclude() for a token bucket's or a log's write, whose one command ended as `end`.
  bool conclude_script(const StoreWrite& write, const WriteReplies& replies, CommandEnd end,
                       const std::string& error, std::span<std::uint64_t> counts,
                       std::int64_t started);
  // After a give-back's replies ([the slot's tag, its count after the decrement]): the
  // commands that put the count back where the slot had moved on, if it had.
  std::vector<Command> give_back_repair(const LimiterKey& key, std::int64_t epoch,
                                        std::uint64_t cost, const redisReply& reply);

 private:
  struct Exchange;
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
