// Batched write mode (Options::write_mode = WriteMode::batched): what an engine in that
// mode keeps and does beside the decisions of sync mode (docs/design/batched-mode.md).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/record.h"
#include "core/registry.h"
#include "core/seqlock_field.h"
#include "engine/store.h"
#include "ratewin/decision.h"
#include "ratewin/limit.h"
#include "ratewin/stats.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class EngineCore;

// Counts admitted here and not yet written to the store, summed per limiter and epoch
// until the engine's next flush (Batcher::flush). `starved`: a request was refused for
// want of budget, so the flush reads the limiter back (and renews its budget) even with
// nothing to write.
struct PendingWrite {
  LimiterKey key;
  std::int64_t epoch = 0;
  std::uint64_t delta = 0;
  std::uint64_t max = 0;  // the limit's, and how it trails, for the budget after the merge
  Trailing trailing = Trailing::interpolated;
  bool first = false;  // this engine's first write to the limiter in `epoch` (StoreWrite)
  bool starved = false;
  std::uint8_t throughs = 0;  // requests over the budget written through this round
  std::uint32_t through = 0;  // what they admitted in `epoch` (in the store already)
};

// An engine's batched write mode. An admission of a batched limiter is decided and
// counted under the shard's lock, within the limiter's budget, and its cost added to the
// shard's pending counts (one entry per limiter and epoch in a flush round, found again
// through the record's pending index and round). Past the budget, one request a round is
// written through as in sync mode (up to kThroughs while budgets round to nothing).
// Every flush interval the flusher thread (or Engine::flush) takes every shard's entries,
// which starts a new round, writes each as one StoreWrite of the summed cost, all in one
// batch, and merges each window read back into its limiter, granting its next budget.
// The engine calls in from its decision path only where it holds a Batcher (none in sync
// or local mode); the calls made under a shard's lock say so.
class Batcher {
 public:
  // The words a batched engine's records carry after their buckets: the store mark, then
  // the units this engine may still admit before its next flush's merge renews them
  // (kNoBudget: none granted yet, the next admission is written as in sync mode, and its
  // reply grants one), and where the limiter's pending counts are in its shard's list:
  // index + 1 (0: nowhere), in the list of which round. Written under the lock in a
  // write section, read by lock-free readers too. With `n` the subintervals of the
  // record's key, as lock-free readers must not trust the stored geometry.
  static constexpr std::uint32_t kNoBudget = 0xffffffffU;
  static constexpr std::uint32_t kWords = kMarkWords + 3;
  static constexpr std::array<std::uint32_t, kMaxWords> kInitial{0, kNoBudget, 0, 0};
  static_assert(kWords <= kMaxWords);
  static Bucket& budget(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords);
  }
  static Bucket& pending_index(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords + 1);
  }
  static Bucket& pending_round(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords + 2);
  }
  // Requests over the budget a round may write through while budgets round to nothing.
  static constexpr std::uint8_t kThroughs = 3;

  // How an admission was decided (decide()), for the reply of its write (learn()).
  struct Ticket {
    bool batched = false;     // counted and queued: no shared write
    bool grant = false;       // a limiter without a budget: its write's reply grants one
    bool through = false;     // this round's write through
    std::uint32_t round = 0;  // the shard's pending round it was made in
  };
  // What a limiter admitted here and has not flushed, in its newest epoch.
  struct Pending {
    std::int64_t epoch = 0;
    std::uint64_t delta = 0;
    std::uint64_t at(std::int64_t e) const noexcept { return e == epoch ? delta : 0; }
  };

  // For `engine`'s registry and store (the store may be made after: nothing here uses it
  // before start() or a decision).
  explicit Batcher(EngineCore& engine);
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;
  ~Batcher();

  // Starts the flusher thread (not with a ManualClock, whose time stands still: tests
  // flush when they choose); stop() ends it.
  void start();
  void stop() noexcept;

  // Whether `key` under `limit` is decided in batched mode: a limit whose local decision
  // it keeps sound (a ring's, but strict_window's, which promises never more than max in
  // any window), and the number of engines sharing the store known (their budgets are
  // shares of it: until the first heartbeat's reply, admissions are written as in sync
  // mode).
  bool applies(const LimiterKey& key, const Limit& limit) const noexcept;

  // EngineCore::read_without_lock's part, once the counts allow `cost` (`out`): false if
  // the request must be decided under the lock (this engine's budget may not allow it,
  // and the round's first refusal notes the limiter for the next flush); else `out`
  // stands, a refusal for want of budget if it did not fit it.
  [[gnu::noinline]] bool read(const Shard& shard, Record& record, const LimiterKey& key,
                              const Limit& limit, std::uint64_t cost, std::int64_t now,
                              Decision& out) const noexcept;
  // Admission::decide_locked's part, under the lock, once the window is at `epoch` and
  // has decided (`fits`, `d`): a `cold` limiter's budget is dropped; within its budget a
  // batched admission is counted in the budget and queued, past it written through
  // (once a round) or refused until the next flush (`fits` and `d` changed).
  [[gnu::noinline]] Ticket decide(Shard& shard, Record& record, const LimiterKey& key,
                                  const Limit& limit, std::int64_t now, std::uint64_t cost,
                                  bool degraded, bool cold, std::int64_t epoch, bool& fits,
                                  Decision& d, Shard::WriteSection& section);
  // Admission::share's part, under the lock in a write section, once `window` (the
  // record's) has learned the write's shared counts (`counts`, `ahead`: RingReply) of
  // `epoch`: what this engine admitted and has not flushed is in neither count, so
  // `own` (the write's own counts) and `window` learn it too; then a limiter without a
  // budget gets its first, a write through's reply may renew the round's, and what it
  // admitted counts as this engine's part.
  [[gnu::noinline]] void learn(Shard& shard, Record& record, const LimiterKey& key,
                               const Limit& limit, const Ticket& ticket, std::int64_t epoch,
                               std::int64_t now, std::uint64_t cost,
                               std::span<const std::uint64_t> counts, std::uint64_t ahead,
                               SlidingWindow& own, SlidingWindow& window);
  // EngineCore::give_back for an admission counted as pending (at `epoch`): taken from
  // the pending counts, the local count and the budget; what a flush has taken meanwhile,
  // from the store (through `async` when given).
  void give_back(const LimiterKey& key, std::uint64_t hash, const Limit& limit,
                 std::uint64_t cost, std::int64_t epoch, AsyncWriter* async);
  // EngineCore::reset's part, under the lock in a write section: the pending counts are
  // dropped, and the next admission is written and grants a budget.
  void reset(Shard& shard, Record& record, const LimiterKey& key) noexcept;
  // EngineCore::refund's part, under the lock: of `count` taken back at `epoch`, what is
  // still pending, taken from there (the store does not have it).
  std::uint64_t take_pending(Shard& shard, Record& record, const LimiterKey& key,
                             std::int64_t epoch, std::uint64_t count) noexcept;
  // Under the lock: the limiter's pending counts of this round.
  Pending pending(const Shard& shard, Record& record, const LimiterKey& key) const noexcept;
  // Under the shard's lock, in a write section: `units` given back to the budget.
  static void add_budget(Record& record, const LimiterKey& key, std::uint64_t units) noexcept;

  // Engine::flush: from the flusher thread or any caller, one at a time.
  bool flush();
  void add_stats(Stats& s) const noexcept;

 private:
  // A shard's pending counts and its round (a record's pending index names an entry of
  // the list of its pending round; read by lock-free readers, to know whether a budget
  // refusal was noted this round). Its own cache line.
  struct alignas(64) Lane {
    std::vector<PendingWrite> pending;
    SeqlockField<std::uint32_t> round{1};
  };
  Lane& lane(const Shard& shard) const noexcept;

  // The flush interval of `key`'s geometry (Options::flush_interval).
  std::int64_t flush_ns(const LimiterKey& key) const noexcept;
  // How long a request refused for want of budget at `now` should wait: until the next
  // flush has renewed the budget (the flusher wakes on multiples of its period, on the
  // store's clock), and a fifth of the period for its round trip.
  std::chrono::nanoseconds until_flush(std::int64_t now) const noexcept {
    const std::int64_t p = flush_period_ns_.load(std::memory_order_relaxed);
    return std::chrono::nanoseconds(p - now % p + p / 5);
  }
  // Under the shard's lock, in an open write section: adds `delta` admitted at `epoch` to
  // the limiter's pending counts, or (`starved`) notes that it refused for want of budget.
  void queue(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
             std::int64_t epoch, std::uint64_t delta, bool starved);
  // Under the shard's lock, in an open write section: appends `entry` to this round's
  // pending counts as the limiter's own.
  void note(Lane& lane, Record& record, const LimiterKey& key, const PendingWrite& entry);
  // Under the shard's lock: the limiter's pending entry of this round, if it has one.
  PendingWrite* pending_of(Lane& lane, Record& record, const LimiterKey& key) const noexcept;
  // Whether the limiter has an entry in this round's pending counts, and whether a
  // request over its budget was written through this round (read lock-free too).
  static bool noted(const Lane& lane, Record& record, const LimiterKey& key) noexcept {
    return (pending_index(record, key.subintervals).load() & kPendingIndex) != 0 &&
           pending_round(record, key.subintervals).load() == lane.round.load();
  }
  static bool spilled(const Lane& lane, Record& record, const LimiterKey& key) noexcept {
    return noted(lane, record, key) &&
           (pending_index(record, key.subintervals).load() & kSpilled) != 0;
  }
  // Under the shard's lock, in an open write section: marks this round's write through
  // in the record's pending index (`on`), or reopens the round for another.
  static void mark_spilled(Record& record, const LimiterKey& key, bool on) noexcept {
    Bucket& index = pending_index(record, key.subintervals);
    index = on ? index.load() | kSpilled : index.load() & ~kSpilled;
  }
  static constexpr std::uint32_t kPendingIndex = 0x7fffffffU;
  static constexpr std::uint32_t kSpilled = 0x80000000U;
  // Under the shard's lock, in an open write section: whether a request over the
  // limiter's budget may be written through (as in sync mode): the first this round, or
  // the next once a write through's reply has reopened the round (learn(), up to
  // kThroughs a round); either way the limiter is noted for the next flush.
  bool spill(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
             std::int64_t epoch);
  // Whether a grant from a window with `left` units left could admit `cost`: a request
  // too large for any budget is written as in sync mode (else it would never pass).
  bool grantable(std::uint64_t cost, std::uint64_t left) const noexcept;
  // The units this engine may admit until its next merge, from what the window has left
  // (`left`, as just merged): its share of what the live engines may admit together in
  // one flush interval (budget_share), with `carry` (the fraction a limiter's earlier
  // grants left over) added and updated. The share is weighted by `weight`, this
  // engine's part of the limiter's recent counts (0 to 1; negative: not known, an even
  // share among the live engines).
  std::uint32_t grant(std::uint64_t left, double& carry, double weight = -1) const noexcept;
  // flush()'s parts: the merge of one written entry, and an entry whose write failed put
  // back (while its epoch is still in the window).
  void merge_flushed(const PendingWrite& entry, std::span<const std::uint64_t> reply,
                     std::int64_t now);
  void requeue(const PendingWrite& entry, std::int64_t now);
  // The flusher thread.
  void flusher_loop();

  EngineCore& engine_;
  std::unique_ptr<Lane[]> lanes_;              // one per shard of the engine's registry
  std::atomic<std::int64_t> flush_period_ns_;  // the shortest flush interval queued yet
  std::mutex flush_mutex_;                     // one flush at a time; guards what follows
  struct Carry {
    double carry = 0;
    std::uint64_t round = 0;  // the flush that last granted it
    // What this engine flushed and wrote through of the limiter, per epoch, for the
    // epochs still in its window (oldest first): its part of the shared counts weights
    // its share.
    std::vector<std::pair<std::int64_t, std::uint64_t>> own;
  };
  struct KeyHash {
    std::size_t operator()(const LimiterKey& key) const noexcept { return key.hash(); }
  };
  std::unordered_map<LimiterKey, Carry, KeyHash> carries_;
  std::uint64_t flush_round_ = 0;
  std::atomic<std::uint64_t> flushes_{0};
  std::atomic<std::uint64_t> flush_failures_{0};
  std::atomic<std::uint64_t> flushed_units_{0};
  std::mutex flusher_mutex_;  // the flusher thread's stop flag
  std::condition_variable flusher_wake_;
  bool flusher_stop_ = false;
  std::thread flusher_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
