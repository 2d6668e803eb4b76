// What an Engine is made of; shared with the LimiterHandles it hands out.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/counters.h"
#include "core/registry.h"
#include "engine/batched.h"
#include "engine/last_read.h"
#include "engine/outage_ledger.h"
#include "engine/store.h"
#include "ratewin/engine.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class AcquireAll;
class Admission;

// The engine: the registry of limiters, the clock, the decision counters and the shared
// store (if any). Decisions run on the calling threads; a rejection is decided from a
// lock-free read of the limiter, and anything that may count goes through an Admission
// (engine/admission.h). The store's background thread calls back through SyncTarget.
class EngineCore final : public SyncTarget {
 public:
  // `store`, if given, is the shared store (tests inject one); otherwise the engine makes
  // the one its options ask for with make_store() (none: local mode).
  EngineCore(Options options, std::unique_ptr<Store> store);
  ~EngineCore() override;

  // (Inline: a rejection that this thread's last read of the same resource and limit still
  // holds is answered here, in a few dozen instructions.)
  Decision try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
    const std::int64_t now = now_ns();
    Decision d;
    if (cost == 1 && reject_again(resource, limit, now, d)) {
      count(d, limit);
      return d;
    }
    return try_acquire_at(resource, limit, cost, now);
  }
  // For a record pinned by a handle: no registry lookup.
  Decision try_acquire(Shard& shard, RecordRef ref, const Limit& limit, std::uint64_t cost);
  // Engine::try_acquire_all.
  std::size_t try_acquire_all(std::span<const Acquisition> items, std::span<Decision> out);

  // Engine::try_acquire_all_async.
  std::size_t try_acquire_all_async(std::span<const Acquisition> items, std::span<Decision> out,
                                    Engine::AsyncDone done);

  // Engine::reset and Engine::refund.
  bool reset(std::uint64_t resource, const Limit& limit);
  std::uint64_t refund(std::uint64_t resource, const Limit& limit, std::uint64_t cost);

  // Finds or creates the limiter and pins it; unpin() releases it.
  std::pair<Shard*, RecordRef> pin(std::uint64_t resource, const Limit& limit);
  static void unpin(Shard& shard, RecordRef ref) noexcept;

  // Engine::flush: batched write mode's flush (engine/flush.cpp), from the engine's
  // flusher thread or any caller, one at a time.
  bool flush();

  Stats stats() const;
  // Engine::store_key.
  std::string store_key(std::uint64_t resource, const Limit& limit) const {
    return store_ != nullptr ? store_->counts_key(LimiterKey::of(resource, limit)) : std::string();
  }
  const Options& options() const noexcept { return options_; }
  // (A limit's records have its key's geometry: a log's holds its entries.)
  std::size_t capacity(const Limit& limit) const noexcept {
    return registry_.capacity_for(LimiterKey::counted(0, limit).subintervals);
  }
  std::size_t limiter_bytes(const Limit& limit) const noexcept {
    return registry_.record_bytes(LimiterKey::counted(0, limit).subintervals);
  }
  Store* store() const noexcept { return store_.get(); }

  // SyncTarget, called from the store's thread.
  void take_activity(std::vector<Activity>& out) override;
  void merge(std::span<const SharedCounts> windows) override;

 private:
  friend class AcquireAll;
  friend class Admission;
  // Where an admission was counted, so that it can be given back.
  struct Counted {
    std::int64_t epoch = 0;
    bool local = false;    // in the limiter's window, at `epoch`
    bool store = false;    // in the shared store, at `epoch`
    bool pending = false;  // batched: in the shard's pending counts, or flushed since
  };

  // ---- Batched write mode (Options::write_mode; engine/flush.cpp).
  // Whether `key` under `limit` is decided in batched mode: an engine with a store in
  // that mode, a limit whose local decision it keeps sound (a ring's, but strict_window's,
  // which promises never more than max in any window), and the number of engines sharing
  // the store known (their budgets are shares of it: until the first heartbeat's reply,
  // admissions are written as in sync mode).
  bool batched(const LimiterKey& key, const Limit& limit) const noexcept {
    return batched_ && key.ring() && limit.algorithm() != Algorithm::strict_window &&
           store_->live_nodes() != 0;
  }
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
  static void note(Shard& shard, Record& record, const LimiterKey& key, const PendingWrite& entry);
  // Under the shard's lock: the limiter's pending entry of this round, if it has one.
  static PendingWrite* pending_of(Shard& shard, Record& record, const LimiterKey& key) noexcept;
  // Whether the limiter has an entry in this round's pending counts, and whether a
  // request over its budget was written through this round (read lock-free too).
  static bool noted(const Shard& shard, Record& record, const LimiterKey& key) noexcept {
    return (Batcher::pending_index(record, key.subintervals).load() & kPendingIndex) != 0 &&
           Batcher::pending_round(record, key.subintervals).load() == shard.pending_round.load();
  }
  static bool spilled(const Shard& shard, Record& record, const LimiterKey& key) noexcept {
    return noted(shard, record, key) &&
           (Batcher::pending_index(record, key.subintervals).load() & kSpilled) != 0;
  }
  // Under the shard's lock, in an open write section: marks this round's write through
  // in the record's pending index (`on`), or reopens the round for another.
  static void mark_spilled(Record& record, const LimiterKey& key, bool on) noexcept {
    Bucket& index = Batcher::pending_index(record, key.subintervals);
    index = on ? index.load() | kSpilled : index.load() & ~kSpilled;
  }
  static constexpr std::uint32_t kPendingIndex = 0x7fffffffU;
  static constexpr std::uint32_t kSpilled = 0x80000000U;
  static constexpr std::uint8_t kThroughs = 3;
  // Under the shard's lock, in an open write section: whether a request over the
  // limiter's budget may be written through (as in sync mode): the first this round, or
  // the next once a write through's reply has reopened the round (Admission::share, up to
  // kThroughs a round); either way the limiter is noted for the next flush.
  bool spill(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
             std::int64_t epoch);
  // Under the shard's lock, in a write section: `units` given back to the budget.
  static void add_budget(Record& record, const LimiterKey& key, std::uint64_t units) noexcept {
    Bucket& budget = Batcher::budget(record, key.subintervals);
    if (budget.load() == Batcher::kNoBudget) return;
    budget = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::uint64_t{budget.load()} + units, Batcher::kNoBudget - 1));
  }
  // Whether a grant from a window with `left` units left could admit `cost`: a request
  // too large for any budget is written as in sync mode (else it would never pass).
  bool grantable(std::uint64_t cost, std::uint64_t left) const noexcept;
  // The units this engine may admit until its next merge, from what the window has left
  // (`left`, as just merged): its share of what the live engines may admit together in
  // one flush interval (engine/flush.cpp, budget_share), with `carry` (the fraction a
  // limiter's earlier grants left over) added and updated. The share is weighted by
  // `weight`, this engine's part of the limiter's recent counts (0 to 1; negative: not
  // known, an even share among the live engines).
  std::uint32_t grant(std::uint64_t left, double& carry, double weight = -1) const noexcept;
  // flush()'s parts: the merge of one written entry, and an entry whose write failed put
  // back (while its epoch is still in the window).
  void merge_flushed(const PendingWrite& entry, std::span<const std::uint64_t> reply,
                     std::int64_t now);
  void requeue(const PendingWrite& entry, std::int64_t now);
  // The flusher thread (batched mode; not with a ManualClock, whose time stands still).
  void flusher_loop();

  // try_acquire by resource past reject_again(), at `now` (out of line: the rejection
  // path stays small).
  [[gnu::noinline]] Decision try_acquire_at(std::uint64_t resource, const Limit& limit,
                                            std::uint64_t cost, std::int64_t now);
  // The engine's time: its clock, moved onto the store's clock when there is one.
  std::int64_t now_ns() const noexcept {
    const std::int64_t local = system_clock_ ? SystemClock::read() : clock_->now().count();
    return store_ != nullptr ? local + store_->clock_offset() : local;
  }
  // The record of `key`, made if needed (see Shard::find_or_insert), cold when new in
  // store mode; an empty ref if there is no room (never for an overflow limiter).
  RecordRef insert(Shard& shard, const LimiterKey& key, std::uint64_t hash, std::int64_t now,
                   Shard::WriteSection& section);
  // The decision path of both try_acquire overloads and of try_acquire_all. `known` is
  // the record when the caller holds it pinned; otherwise it is looked up. `counted`, if
  // given, is told where an admission was counted. Rejections on local counts return
  // from here; anything else is an Admission (admit()).
  // With `defer`, an admission whose shared write is due is left there, begun (see
  // Admission::begin), for the caller to write and finish.
  // A new limiter that finds no room (the registry is full of live limiters) is counted
  // against the overflow limiter of its geometry instead: `key` and `hash` are then
  // changed to that limiter's (a deferred admission refers to them).
  // `caller`, if given, is the resource `key` was made of by LastLimit::key_of (see
  // LastRead).
  Decision decide(Shard& shard, LimiterKey& key, std::uint64_t& hash, RecordRef known,
                  std::int64_t now, const Limit& limit, std::uint64_t cost,
                  Counted* counted = nullptr, std::optional<Admission>* defer = nullptr,
                  const std::uint64_t* caller = nullptr);
  // decide() once the failure policy that applies is known: `policy` (the limit's, or what
  // a partitioned limit decides as), with the store unreachable when `degraded`.
  Decision decide_as(Shard& shard, LimiterKey& key, std::uint64_t& hash, RecordRef known,
                     std::int64_t now, const Limit& limit, FailurePolicy policy, std::uint64_t cost,
                     Counted* counted, std::optional<Admission>* defer, bool degraded,
                     const std::uint64_t* caller);
  // decide() for a partitioned limit while the store is unreachable, or for a window after
  // an outage in which this engine admitted on its own (out of line: rarely taken).
  [[gnu::noinline]] Decision decide_partitioned(Shard& shard, LimiterKey& key,
                                                std::uint64_t& hash, RecordRef known,
                                                std::int64_t now, const Limit& limit,
                                                std::uint64_t cost, Counted* counted,
                                                std::optional<Admission>* defer, bool degraded);
  // While the store is unreachable, how a partitioned limit decides: as local with its
  // share of the limit (in `split`), or, before the live-node count was ever read, as
  // Options::partitioned_unknown says.
  FailurePolicy partition(const Limit& limit, std::optional<Limit>& split);
  // How long after the store is back the other nodes may still be without it (their
  // reconnection backs off up to 2 s, with jitter, and a probe follows).
  static constexpr std::int64_t kRejoinNs = 3'000'000'000;
  // A partitioned limit's decision for a window (and kRejoinNs) after the store came back
  // from an outage in which this engine admitted without it: the store lacks those
  // admissions (and other nodes may still be without it), so this engine keeps to its
  // share as well, counting what it admits in the ledger.
  Decision after_outage(Shard& shard, LimiterKey& key, std::uint64_t& hash, RecordRef known,
                        std::int64_t now, const Limit& limit, std::uint64_t cost,
                        Counted* counted, std::optional<Admission>* defer);
  // decide() for a new limiter that found no room: on its geometry's overflow limiter
  // (made even over the bounds). Out of line: the only recursion of decide().
  [[gnu::noinline]] Decision overflow(LimiterKey& key, std::uint64_t& hash, std::int64_t now,
                                      const Limit& limit, std::uint64_t cost, Counted* counted,
                                      std::optional<Admission>* defer);
  // Takes back what an admission counted (try_acquire_all, when a later limit refuses).
  // With `async`, the store's part goes through it, without waiting.
  void give_back(const LimiterKey& key, std::uint64_t hash, const Limit& limit, std::uint64_t cost,
                 const Counted& counted, AsyncWriter* async = nullptr);
  // refund() for a token bucket.
  std::uint64_t refund_bucket(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                              const Limit& limit, std::uint64_t cost);
  // Counts a decision of `limit` in the stats. A limit in shadow never refuses: its
  // refusal becomes an admission that counted nothing, marked would_reject.
  [[gnu::always_inline]] void count(Decision& d, const Limit& limit) noexcept {
    if (!d.allowed && limit.mode() == Mode::shadow) {
      d.allowed = true;
      d.would_reject = true;
      counters_.add(DecisionCounters::kWouldReject);
    }
    counters_.add(d.allowed ? DecisionCounters::kAllowed : DecisionCounters::kRejected);
    if (d.degraded) counters_.add(DecisionCounters::kDegraded);
  }
  // Reads the limiter and decides without the lock or any shared write. Returns the
  // shard version at which `out` was decided from a consistent state of `ref`, or an
  // odd value when the limiter does not exist, must first move to a new epoch, or a
  // writer interfered. `ref` comes in set when the caller holds the record pinned;
  // otherwise it is found from this thread's last read (valid while the shard's version
  // has not changed since) or in the table. It becomes this thread's LastRead, made for
  // `caller` when given.
  std::uint64_t read_without_lock(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                                  RecordRef& ref, std::int64_t now, const Limit& limit,
                                  std::uint64_t cost, Decision& out,
                                  const std::uint64_t* caller) noexcept;
  // try_acquire by resource, when this thread's last lock-free read was made for the same
  // resource and limit and its rejection still holds: that rejection in `out`, without
  // making the key or looking the limiter up. False when it does not apply.
  bool reject_again(std::uint64_t resource, const Limit& limit, std::int64_t now,
                    Decision& out) const noexcept {
    const LastRead& last = last_read;
    if (!last.caller_known || last.caller != resource || last.engine != id_ ||
        now >= last.rejects_until || !last.limit.same(limit))
      return false;
    // What decide() does before its lock-free read: a store that cannot be used, or a
    // partitioned limit after an outage, decide otherwise.
    if (store_ != nullptr &&
        (!store_->available(last.key.resource) ||
         (limit.failure_policy() == FailurePolicy::partitioned && !ledger_.empty())))
      return false;
    if (!last.shard->read_valid(last.version)) return false;
    last.rejection(now, limit, out);
    return true;
  }

  const std::uint64_t id_;  // unique per engine in the process, never reused
  Options options_;
  std::shared_ptr<const Clock> clock_;
  bool system_clock_;  // clock_ is a SystemClock: read it without a virtual call
  mutable Registry registry_;
  DecisionCounters counters_;
  std::atomic<std::uint64_t> warm_starts_{0};
  std::atomic<std::uint64_t> warm_start_failures_{0};
  std::atomic<std::uint64_t> overflowed_{0};
  std::atomic<bool> partition_unknown_logged_{false};
  OutageLedger ledger_;  // partitioned admissions made without the store
  // Batched write mode.
  const bool batched_;
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
  std::unique_ptr<Store> store_;  // last: its thread calls back into the members above
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
