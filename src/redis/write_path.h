// The Redis store's writes: what an allowed request sends, from the application thread
// that decided it.
#pragma once

#include <array>
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
#include "redis/resp.h"
#include "redis/status.h"
#include "redis/topology.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

// How one command of a write ended.
enum class CommandEnd { kPending, kAnswered, kSkipped, kFailed };

// One command on its way: the node it goes to, which command of the call's RESP it is
// (RespWriter::command_bytes), and what it was made of, so that it can be made again
// with its script's text after a NOSCRIPT reply. The blocking and the asynchronous paths
// send the same bytes and route the replies alike (WritePath::route).
struct CommandState {
  RedisNode* node = nullptr;
  std::uint32_t command = 0;     // in the call's RespWriter
  std::uint32_t write = 0;       // the write (or give-back) it belongs to
  std::uint8_t index = 0;        // among that write's commands
  std::uint8_t sends = 0;        // times sent (a redirection sends it again)
  bool asking = false;           // send ASKING first (an ASK redirection)
  bool give_back = false;        // a give-back's command, not a write's
  CommandEnd end = CommandEnd::kPending;
};

// What one write learned from the final replies to its commands. A ring's window read
// back is decoded into the write's counts as it arrives (nothing is copied).
struct WriteReplies {
  Status refused;                          // the first error reply, or an unexpected one
  std::array<std::int64_t, 8> bitfield{};  // the BITFIELD's integers (nil: 0, absent)
  std::array<bool, 8> present{};
  std::size_t bitfield_size = 0;
  bool window_read = false;  // the window was read back (and decoded)
  // e's slot in the window read back: its tag and count.
  std::pair<std::uint16_t, std::uint32_t> slot{};
  // A token bucket's or a log's reply: its integers (one, or a log's four).
  std::array<long long, 4> script{};
  std::size_t script_size = 0;
  bool script_read = false;

  // The final reply to the write's command `i` (a write of cost 0 only reads); a ring's
  // window is decoded into `counts`.
  void take(const StoreWrite& write, std::size_t i, const redisReply& r,
            std::span<std::uint64_t> counts);
};

// For tests only (tests/redis/exact_test.cpp), never set in a program: when set, the
// commands of a ring write that counts are not sent together. The blocking path sends
// the BITFIELD that counts it alone and reads its reply, calls the hook, then sends the
// rest (the window read back, the change set); the asynchronous path writes the BITFIELD
// to the socket, calls the hook on the loop's thread, then queues the rest. So a test
// can have other clients' commands run between the two, as Redis does whenever a
// pipeline reaches it in two reads. Unset, it costs one relaxed load per call.
inline std::atomic<void (*)()> split_write_hook{nullptr};

// One round trip per admitted request, of native commands (see StoreLayout): the cost
// added to the shared count of its epoch and the whole shared window read back, from
// which the engine decides (the write itself is unconditional). A first write of this
// node to the window in an epoch also claims the epoch's slot of the ring and records the
// write in the epoch's change set. The rare corrections (a slot whose tag wrapped or whose
// key was made again, a count given back to a slot that moved on) take one more round
// trip on the same connection, within the same deadline; a correction that cannot be
// made leaves a count that errs high.
//
// A call's commands are written once, in RESP, into a buffer the thread keeps; each runs
// on a pooled blocking connection of the node that serves its slot (the window's, and, if
// another node serves its change set's, that one too, in parallel: still one round trip).
// A MOVED reply moves the slot in the map and the command is sent again to the node it
// names; an ASK sends it there once, after ASKING. The whole call, waiting for connections
// included, is bounded by the command timeout (plus the connect timeout when it has to
// open a connection). A failure whose status says so (Status::opens_circuit) opens that
// node's circuit; while it is open, calls for its slots fail at once. An admitted write in
// steady state allocates nothing.
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
  // Appends a write's commands to `out` and their states to `states` (through `add`,
  // called with each), for the node that serves each; false (counted as skipped) while
  // its node's circuit is open.
  template <class AddState>
  bool plan(const StoreWrite& write, std::uint32_t index, RespWriter& out, AddState&& add);
  // How many commands a write has at most (what plan() may add).
  static constexpr std::size_t kMostCommands = 4;
  // What to do after `reply` to `state`'s command: kAnswered (its final reply), kPending
  // (send it again: redirected, in `state.node`, or made again with its script's text in
  // `out`, at `state.command`), or kFailed (`failure` says why; the node's circuit is
  // opened when it says so). `writes` are what the commands were made of.
  CommandEnd route(const redisReply& reply, CommandState& state, RespWriter& out,
                   std::span<const StoreWrite> writes, Status& failure);
  // What a write's replies say: true (and `counts` filled) if it was written. `ends` is
  // how each of its commands ended, `failure` the first failure. When a correction is due
  // (see the class comment), it is appended to `repair` (for the write's home node).
  bool conclude(const StoreWrite& write, const WriteReplies& replies,
                std::span<const CommandEnd> ends, const Status& failure,
                std::span<std::uint64_t> counts, std::int64_t started, RespWriter& repair);
  // After a give-back's first reply ([the slot's tag, its count after the decrement]):
  // appends to `repair` the commands that put the count back where the slot had moved
  // on, if it had; false when nothing is due.
  bool give_back_repair(const StoreWrite& give_back, const redisReply& reply,
                        RespWriter& repair);

 private:
  struct Exchange;
  // conclude() for a token bucket's or a log's write, whose one command ended as `end`.
  bool conclude_script(const StoreWrite& write, const WriteReplies& replies, CommandEnd end,
                       const Status& failure, std::span<std::uint64_t> counts,
                       std::int64_t started);

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

template <class AddState>
bool WritePath::plan(const StoreWrite& w, std::uint32_t index, RespWriter& out, AddState&& add) {
  RedisNode& home = topology_.node_for_resource(w.key.resource);
  if (!home.circuit().available()) {
    if (w.cost != 0) writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const std::size_t first = out.commands();
  layout_.append_write(w, out);
  // A ring's first write records itself in a change set (its last two commands), whose
  // slot may be another node's.
  RedisNode* sets = &home;
  if (out.commands() - first > 2) {
    sets = &topology_.node_for_slot(
        StoreLayout::change_set_slot(StoreLayout::change_set_shard(w.key.resource)));
  }
  for (std::size_t i = first; i < out.commands(); ++i) {
    CommandState state;
    state.node = i - first < 2 ? &home : sets;
    state.command = static_cast<std::uint32_t>(i);
    state.write = index;
    state.index = static_cast<std::uint8_t>(i - first);
    add(state);
  }
  return true;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
