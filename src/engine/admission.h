// One request that may count, from the local decision through the shared write to the
// merge.
#pragma once

#include <cstdint>
#include <span>

#include "core/registry.h"
#include "engine/batched.h"
#include "engine/engine_core.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// An admission: what EngineCore::decide hands over once the lock-free read could not
// settle the request as a rejection. It lives for one call, on the caller's stack:
//
//  1. decide_locked(): under the shard's lock, finds or makes the limiter, moves its
//     window to now, decides, and counts the cost locally. The lock-free read's decision
//     (and the record it found) is reused when no writer came in between; otherwise the
//     limiter is looked up again and evaluated again.
//  2. share(): with no lock held, one round trip to the shared store (the cost added,
//     the whole shared window read back). Skipped in local mode, for what counted
//     nothing, and in batched write mode (Batcher::applies), where step 1 also keeps
//     to this engine's budget and adds the cost to the limiter's pending counts, which
//     the engine's next flush writes (unless the limiter is cold: its first admission is
//     a warm start, as in sync mode, whose merge grants its first budget).
//  3. Under the lock again, merges the shared window into the limiter (the same record,
//     unless it was evicted meanwhile: an evicted record no longer matches its key; one
//     made again for the same key in the same memory is taken for it, which is rare and
//     only misplaces this request's own count). The write's own shared counts (the
//     window as Redis returned it, every node's writes in Redis' order) decide whether
//     the admission stands; the merged window says what is left. If the shared counts
//     leave no room after all, the local count is taken back, and then (no lock) the
//     shared one.
//
// So an admitted request takes the shard's lock once in local mode and twice in store
// mode, where it also borrows a pooled connection (the pool's mutex, to take it and to
// give it back). It finds the limiter once, by the lock-free read, unless a writer came
// in between (then once more, under the lock).
class Admission {
 public:
  using Counted = EngineCore::Counted;

  Admission(EngineCore& engine, Shard& shard, const LimiterKey& key, std::uint64_t hash,
            std::int64_t now, const Limit& limit, std::uint64_t cost, bool degraded) noexcept
      : engine_(engine),
        shard_(shard),
        key_(key),
        hash_(hash),
        now_(now),
        limit_(limit),
        cost_(cost),
        degraded_(degraded),
        rule_(BucketRule::of(limit)),
        log_rule_(LogRule::of(limit)) {}

  // `known`: the record the caller holds pinned, if any. `read_ref`, `version` and
  // `read`: what the lock-free read established (version odd: nothing).
  Decision run(RecordRef known, RecordRef read_ref, std::uint64_t version, const Decision& read);
  const Counted& counted() const noexcept { return counted_; }
  // The limiter did not exist and there was no room to make it (the registry is full
  // of live limiters): nothing was decided or counted; the caller asks the overflow
  // limiter instead (EngineCore::decide).
  bool overflowed() const noexcept { return overflowed_; }

  // run() in parts, so that a caller can make several admissions' shared writes in one
  // round trip (try_acquire_all): begin() is step 1, and says whether a shared write is
  // due; if so, write() is that write, and finish() takes its result (the window read
  // back) through step 3; if not, conclude() ends it.
  bool begin(RecordRef known, RecordRef read_ref, std::uint64_t version, const Decision& read);
  StoreWrite write() const noexcept {
    return store_write(key_, epoch_, now_, cost_, first_, limit_);
  }
  // A give-back it makes goes through `async` when given, without waiting.
  Decision finish(bool written, std::span<std::uint64_t> counts, AsyncWriter* async = nullptr);
  Decision conclude() noexcept {
    engine_.count(d_, limit_);
    return d_;
  }

 private:
  void decide_locked(RecordRef known, RecordRef read_ref, std::uint64_t version);
  // decide_locked()'s decision and count on a token bucket or a log (under the lock).
  void decide_scripted(bool unchanged, Shard::WriteSection& section);
  // share() for a token bucket's write that was made (the store decided it).
  void share_bucket(std::span<const std::uint64_t> counts);
  // share() for a log's write that was made (the store decided it).
  void share_log(std::span<const std::uint64_t> counts);
  // Steps 2 and 3 after the write: `written` and the counts it read back.
  void share(bool written, std::span<std::uint64_t> counts, AsyncWriter* async);
  // The limiter's record if it still holds this key (under the lock).
  RecordRef live() const noexcept {
    return ref_ && ref_.record->matches(key_) ? ref_ : RecordRef{};
  }

  EngineCore& engine_;
  Shard& shard_;
  const LimiterKey& key_;
  const std::uint64_t hash_;
  // (A log's is read again under the lock: see decide_scripted.)
  std::int64_t now_;
  const Limit limit_;  // a copy: a partitioned limit's share is made for the call
  const std::uint64_t cost_;
  const bool degraded_;    // the store was known to be unreachable when the call began
  const BucketRule rule_;  // a token bucket's (key_.bucket())
  const LogRule log_rule_;  // a log's (key_.log())

  Decision d_;
  RecordRef ref_;
  // Where the cost was counted: a ring's epoch, a log's expiry of its entries (a bucket's:
  // now_).
  std::int64_t epoch_ = 0;
  bool fits_ = false;       // what the local counts said
  bool cold_ = false;       // the limiter's window may lack shared counts: its write warms it
  // How batched write mode decided it (Batcher::decide; nothing in sync mode).
  Batcher::Ticket batched_;
  bool first_ = false;      // this engine's first write to the limiter in epoch_
  bool overflowed_ = false;
  Counted counted_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
