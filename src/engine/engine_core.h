// What an Engine is made of; shared with the LimiterHandles it hands out.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/counters.h"
#include "core/registry.h"
#include "engine/last_read.h"
#include "engine/outage_ledger.h"
#include "engine/store.h"
#include "ratewin/engine.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class AcquireAll;
class Admission;
class Batcher;

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

  // Engine::flush: batched write mode's flush (Batcher::flush); true at once in sync mode.
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
  friend class Batcher;
  // Where an admission was counted, so that it can be given back.
  struct Counted {
    std::int64_t epoch = 0;
    bool local = false;    // in the limiter's window, at `epoch`
    bool store = false;    // in the shared store, at `epoch`
    bool pending = false;  // batched: in the Batcher's pending counts, or flushed since
  };

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
  // Takes `write` back from the store: through `async` when given, without waiting.
  void remove(const StoreWrite& write, AsyncWriter* async) {
    if (async != nullptr) {
      async->remove(write);
    } else {
      store_->remove(write);
    }
  }
  // Takes back what an admission counted (try_acquire_all, when a later limit refuses).
  // With `async`, the store's part goes through it, without waiting.
  void give_back(const LimiterKey& key, std::uint64_t hash, const Limit& limit, std::uint64_t cost,
                 const Counted& counted, AsyncWriter* async = nullptr);
  // What `limit` answers a request of `cost` now, counting nothing: the decision of a
  // limit that try_acquire_all did not decide because another refused the request (see
  // Engine::try_acquire_all). From this engine's counts only, as a rejection is: no store
  // call (a limiter it holds no counts of is described as empty, and a cold one as far as
  // it knows), no change to any limiter, no lock unless writers keep interfering with the
  // lock-free read, and the thread's LastRead left alone; not counted in the stats. With
  // the store unreachable (`degraded`), the failure policy answers as decide() would
  // (closed refuses, open allows; partitioned as local, with the whole limit). A limit in
  // shadow that would refuse is allowed with would_reject, as count() makes it.
  Decision describe(const LimiterKey& key, std::uint64_t hash, std::int64_t now, const Limit& limit,
                    std::uint64_t cost, bool degraded);
  // describe()'s read of the limiter at `now`: `asked` for `cost`, `idle` for cost 0 (what
  // it holds as it stands). Under the shard's lock when `locked`; otherwise a seqlock read,
  // false when a writer interfered.
  bool read_uncounted(Shard& shard, const LimiterKey& key, std::uint64_t hash, std::int64_t now,
                      const Limit& limit, std::uint64_t cost, bool locked, Decision& asked,
                      Decision& idle);
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
  // Batched write mode's (Options::write_mode), none in sync or local mode. Before the
  // store: the store's thread calls back into it.
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<Store> store_;  // last: its thread calls back into the members above
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
