#include "engine/admission.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "engine/scratch.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

Decision Admission::run(RecordRef known, RecordRef read_ref, std::uint64_t version,
                        const Decision& read) {
  if (!begin(known, read_ref, version, read)) return overflowed_ ? d_ : conclude();
  Scratch<std::uint64_t, 34> scratch(key_.counts_size());  // (N <= 32 in place)
  const std::span<std::uint64_t> counts = scratch.span();
  const bool written = engine_.store_->add(write(), counts);
  return finish(written, counts);
}

bool Admission::begin(RecordRef known, RecordRef read_ref, std::uint64_t version,
                      const Decision& read) {
  d_ = read;
  decide_locked(known, read_ref, version);
  if (overflowed_) return false;
  d_.degraded = degraded_;
  if (fits_ && d_.allowed && cost_ != 0) counted_ = {epoch_, true, false, batched_.batched};
  // An admission is written to the store (while it is unreachable, add() fails at once
  // and counts a skipped write), unless batched. A question (cost 0) about a cold limiter
  // reads it.
  return engine_.store_ != nullptr && !batched_.batched && fits_ && d_.allowed &&
         (cost_ != 0 || cold_);
}

Decision Admission::finish(bool written, std::span<std::uint64_t> counts, AsyncWriter* async) {
  share(written, counts, async);
  return conclude();
}

void Admission::decide_locked(RecordRef known, RecordRef read_ref, std::uint64_t version) {
  Store* const store = engine_.store_.get();
  std::lock_guard lock(shard_.mutex);
  Shard::WriteSection section(shard_, Shard::WriteSection::Deferred{});
  // If no writer came in between, the lock-free read still holds: count its decision.
  const bool unchanged =
      (version & 1) == 0 && shard_.version.load(std::memory_order_relaxed) == version;
  ref_ = unchanged ? read_ref : known ? known : engine_.insert(shard_, key_, hash_, now_, section);
  if (!ref_) {
    overflowed_ = true;
    return;
  }
  if (!key_.ring()) return decide_scripted(unchanged, section);
  SlidingWindow window = ref_.record->view();
  if (!unchanged) {
    const std::int64_t now_epoch = SlidingWindow::epoch_of(now_, key_.resolution_ns());
    // A limiter whose shared counts this engine may have missed (new, idle, or the
    // store was away: its window has not reached the previous epoch, which boundary
    // reads would have merged) is cold: its local counts may be below the shared
    // ones. Its first write brings back the whole window: a warm start in the same
    // round trip, and the admission stands only if the shared counts allow it.
    cold_ = store != nullptr && now_epoch - window.epoch() > 1;
    if (!window.current_at(now_)) {
      section.open();
      window.advance(now_);
      if (store != nullptr) shard_.activity.push_back({key_, now_epoch});
    }
    window.evaluate(now_, limit_.max(), cost_, trailing_of(limit_.algorithm()),
                    d_);  // cannot fail: at now's epoch
  }
  fits_ = d_.allowed;  // what the counts say
  // The store could not inform this decision: the limit's failure policy rules
  // (EngineCore::decide has answered for `closed` already, without the lock).
  if (degraded_ && limit_.failure_policy() == FailurePolicy::open && !d_.allowed) {
    d_.allowed = true;  // not counted: it did not fit
    d_.retry_after = std::chrono::nanoseconds(0);
  }
  // (Batched: this engine's budget decides too.)
  if (engine_.batcher_ != nullptr) {
    batched_ = engine_.batcher_->decide(shard_, *ref_.record, key_, limit_, now_, cost_, degraded_,
                                        cold_, window.epoch(), fits_, d_, section);
  }
  if (fits_ && d_.allowed && cost_ != 0) {
    section.open();
    window.add(cost_);
  }
  epoch_ = window.epoch();
  if (store != nullptr && cost_ != 0) {
    first_ = ref_.record->store_mark() != Record::mark_of(epoch_);
  }
}

void Admission::decide_scripted(bool unchanged, Shard::WriteSection& section) {
  Record& record = *ref_.record;
  const bool bucket = key_.bucket();
  if (!bucket) {
    // A log is exact: it decides at a time read under the lock, so that the order of its
    // entries is the order of its admissions. With the time read before it, a call that
    // waited for the lock would count its request from then, and it would leave the log
    // that much early: one more than max could be admitted within a window.
    const std::int64_t locked = engine_.now_ns();
    if (locked > now_) {
      now_ = locked;
      unchanged = false;
    }
  }
  // A question always reads the shared state: nothing else brings this engine other
  // nodes' counts (buckets and logs have no boundary reads).
  cold_ = engine_.store_ != nullptr;
  if (!unchanged) {
    if (bucket) {
      record.bucket().evaluate(now_, rule_, cost_, d_);
    } else {
      record.log().evaluate(now_, log_rule_, cost_, d_);
    }
  }
  fits_ = d_.allowed;
  if (degraded_ && limit_.failure_policy() == FailurePolicy::open && !d_.allowed) {
    d_.allowed = true;  // not counted: it did not fit
    d_.retry_after = std::chrono::nanoseconds(0);
  }
  epoch_ = now_;
  if (fits_ && d_.allowed && cost_ != 0) {
    section.open();
    if (bucket) {
      record.bucket().add(now_, cost_, rule_);
    } else {
      epoch_ = record.log().add(now_, cost_, log_rule_);
    }
  }
}

void Admission::share_bucket(std::span<const std::uint64_t> counts) {
  // The store decided: the request counted there only if it fit the shared bucket, so
  // nothing is ever given back to it here.
  const bool admitted = counts[BucketReply::kAdmitted] != 0;
  const std::int64_t shared_tat = now_ + static_cast<std::int64_t>(counts[BucketReply::kBacklog]);
  std::lock_guard lock(shard_.mutex);
  Shard::WriteSection section(shard_);
  const RecordRef record = live();
  WindowState evicted;  // the shared bucket alone, if the limiter was evicted meanwhile
  TokenBucket bucket = record ? record.record->bucket() : TokenBucket(evicted);
  const bool degraded = d_.degraded;
  if (cost_ != 0 && !admitted) d_.allowed = false;  // the shared bucket was full
  bucket.assign(shared_tat);
  if (cost_ == 0 || !d_.allowed) {
    // A question, or a refusal: answered from the merged bucket.
    bucket.evaluate(now_, rule_, cost_, d_);
    d_.allowed = cost_ == 0 && d_.allowed;
    if (cost_ != 0 && d_.retry_after == std::chrono::nanoseconds(0))
      d_.retry_after = std::chrono::milliseconds(1);  // never "retry now" to a refusal
  } else {
    // Admitted: what is left, as the shared bucket after this request tells it.
    Decision after;
    TokenBucket::decide(shared_tat, now_, rule_, 0, after);
    d_.remaining = after.remaining;
    d_.reset_after = after.reset_after;
  }
  d_.degraded = degraded;
  counted_ = {epoch_, record && d_.allowed && cost_ != 0, d_.allowed && cost_ != 0};
}

void Admission::share_log(std::span<const std::uint64_t> counts) {
  // The store decided, as for a bucket: nothing is given back to it here.
  const bool admitted = counts[LogReply::kAdmitted] != 0;
  const std::uint64_t shared = counts[LogReply::kCount];
  std::lock_guard lock(shard_.mutex);
  Shard::WriteSection section(shard_);
  const RecordRef record = live();
  WindowState evicted;  // the shared log's count alone, if the limiter was evicted meanwhile
  SlidingLog log = record ? record.record->log() : SlidingLog(evicted, nullptr, 0);
  const bool degraded = d_.degraded;
  if (cost_ != 0 && !admitted && d_.allowed) {
    d_.allowed = false;  // the shared log was full: its entries here go
    log.remove(epoch_, cost_);
  }
  // The store's count holds until its oldest entry leaves, unless another engine takes
  // entries back (a give-back, a refund, a reset): trusted for a tenth of the interval at
  // most, as a ring's boundary reads refresh it, so such a change is seen that soon.
  const auto holds = static_cast<std::int64_t>(counts[LogReply::kHolds]);
  log.learn(now_ + holds, now_ + std::min(holds, log_rule_.window / 10), shared);
  const std::uint64_t left = shared >= log_rule_.max ? 0 : log_rule_.max - shared;
  if (cost_ == 0 || !d_.allowed) {
    // A question, or a refusal: answered from the merged log, and the store's time for
    // this cost to fit (exact: it holds every entry).
    log.evaluate(now_, log_rule_, cost_, d_);
    d_.allowed = cost_ == 0 && d_.allowed;
    if (cost_ != 0) {
      d_.retry_after = std::max(d_.retry_after,
                                std::chrono::nanoseconds(counts[LogReply::kFits]));
      if (d_.retry_after == std::chrono::nanoseconds(0))
        d_.retry_after = std::chrono::milliseconds(1);  // never "retry now" to a refusal
    }
  } else {
    // Admitted: what is left, as the shared log after this request tells it.
    d_.remaining = std::min(d_.remaining, left);
  }
  d_.degraded = degraded;
  counted_ = {epoch_, record && d_.allowed && cost_ != 0, d_.allowed && cost_ != 0};
}

void Admission::share(bool written, std::span<std::uint64_t> counts, AsyncWriter* async) {
  const std::int64_t r = key_.resolution_ns();
  if (cold_) {
    (written ? engine_.warm_starts_ : engine_.warm_start_failures_)
        .fetch_add(1, std::memory_order_relaxed);
  }
  if (!written) {
    d_.degraded = true;
    if (limit_.failure_policy() == FailurePolicy::closed && cost_ != 0) {
      // Counted nowhere but here: take it back, and refuse.
      std::lock_guard lock(shard_.mutex);
      Shard::WriteSection section(shard_);
      if (const RecordRef record = live()) record.record->take_back(epoch_, now_, cost_, rule_);
      counted_.local = false;
      d_.allowed = false;
      d_.retry_after = std::max(engine_.store_->retry_hint(), std::chrono::nanoseconds(1));
    }
    return;
  }
  if (key_.bucket()) return share_bucket(counts);
  if (key_.log()) return share_log(counts);
  bool refused = false;
  const std::span<const std::uint64_t> shared_counts = RingReply::window(counts);
  // What a node ahead began in epoch_ + 1 (RingReply): epoch_'s in the decision only.
  const std::uint64_t ahead = RingReply::ahead(counts);
  {
    // What decides: this write's own shared counts, the whole window as of the write
    // (this request included), in the order Redis put every node's writes in. Not the
    // local window after the merge: other threads' replies may have raised it meanwhile
    // with writes that came after this one (which then refused themselves), so it can
    // hide that this write went over, or refuse one that did not.
    Scratch<Bucket, 64> own_buckets(key_.subintervals);
    WindowState own_state;
    SlidingWindow own(own_state, own_buckets.span().data(), key_.subintervals, r);
    own.reset(epoch_ * r);
    for (std::size_t k = 0; k < shared_counts.size(); ++k)
      own.merge(epoch_ - static_cast<std::int64_t>(k), shared_counts[k] + (k == 0 ? ahead : 0));

    std::lock_guard lock(shard_.mutex);
    Shard::WriteSection section(shard_);
    // The limiter may have been evicted while the lock was released: then the returned
    // counts are all there is.
    const RecordRef record = live();
    SlidingWindow window = record ? record.record->view() : own;  // (a view: `own` itself)
    // The first write of epoch_ is done (unless the window has moved on meanwhile: a mark
    // never goes back).
    if (record && first_ && window.epoch() == epoch_)
      record.record->store_mark() = Record::mark_of(epoch_);
    // The local window learns the shared counts, for the decisions to come: each epoch's
    // own (epoch_ + 1's only once the window has reached it: RingReply).
    if (record) {
      for (std::size_t k = 0; k < shared_counts.size(); ++k)
        window.merge(epoch_ - static_cast<std::int64_t>(k), shared_counts[k]);
      if (ahead != 0 && window.epoch() > epoch_) window.merge(epoch_ + 1, ahead);
      // (Batched: and what this engine has not flushed, with its budget.)
      if (engine_.batcher_ != nullptr)
        engine_.batcher_->learn(shard_, *record.record, key_, limit_, batched_, epoch_, now_,
                                cost_, shared_counts, ahead, own, window);
    }
    if (cost_ == 0) {
      // A question about a cold limiter: answered from the merged counts.
      const bool degraded = d_.degraded;
      window.evaluate(now_, limit_.max(), 0, trailing_of(limit_.algorithm()), d_);
      d_.degraded = degraded;
      return;
    }
    Decision shared;
    own.evaluate(now_, limit_.max(), 0, trailing_of(limit_.algorithm()),
                 shared);  // (counted in it already)
    Decision merged;
    if (shared.allowed) {
      // Admitted. What is left, as the merged window tells it (it may know of later
      // writes), never more than the write's own counts leave.
      window.evaluate(now_, limit_.max(), 0, trailing_of(limit_.algorithm()), merged);
      d_.remaining = std::min(shared.remaining, merged.allowed ? merged.remaining : 0);
      d_.reset_after = std::max(shared.reset_after, merged.reset_after);
    } else {
      refused = true;
      window.remove(epoch_, cost_);  // (the local count, or the write's own if evicted)
      window.evaluate(now_, limit_.max(), cost_, trailing_of(limit_.algorithm()), merged);
      d_.allowed = false;
      d_.remaining = merged.allowed ? 0 : merged.remaining;
      d_.reset_after = merged.reset_after;
      // (merged.allowed is rare: the merged window holds at least the write's own counts,
      // over the limit with this request, unless what tipped it was a node ahead's count
      // of epoch_ + 1 (RingReply); never answer "retry now" to a refusal.)
      d_.retry_after = merged.allowed ? std::chrono::milliseconds(1) : merged.retry_after;
    }
    counted_ = {epoch_, record && !refused, !refused};
  }
  // The shared count took this request although it does not fit: give it back.
  if (refused) engine_.remove(write(), async);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
