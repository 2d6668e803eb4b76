// One limiter as the registry stores it: a 48-byte header followed by its N buckets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/mix.h"
#include "core/seqlock_field.h"
#include "core/sliding_log.h"
#include "core/token_bucket.h"
#include "core/window.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// Identity of a limiter: a counter under one window geometry. The counter is the
// caller's resource in the limit's scope (Limit::scope): limits of one scope and
// geometry share a limiter, any other limit has its own. The counter names the limiter
// everywhere (registry, Redis keys), the same in every process.
struct LimiterKey {
  std::uint64_t resource = 0;  // the counter: counter_of(the caller's resource, scope)
  std::uint32_t resolution_ms = 0;
  std::uint32_t subintervals = 0;

  // For one scope, a bijection of resources, so that no two resources share a counter.
  static std::uint64_t counter_of(std::uint64_t resource, std::uint64_t scope) noexcept {
    return resource ^ fmix64(scope);
  }
  // The limiter of `resource` under `limit`. A sliding log's counter also says its
  // interval: logs of one scope and interval share one log in the store (each decides by
  // its own max), and no other log touches it (a shorter one would drop entries a longer
  // one still counts). Here a log's record is sized by its max, so a log whose max
  // changes starts this engine's copy afresh (the store's log still decides).
  static LimiterKey of(std::uint64_t resource, const Limit& limit) noexcept {
    return counted(resource ^ counter_mix(limit), limit);
  }
  // What of() mixes into a resource to make its counter: a function of the limit alone
  // (its scope, and a log's interval), so that a caller deciding many resources under one
  // limit can compute it once.
  static std::uint64_t counter_mix(const Limit& limit) noexcept {
    std::uint64_t mix = counter_of(0, limit.scope());
    if (limit.algorithm() == Algorithm::sliding_log) {
      mix ^= fmix64(static_cast<std::uint64_t>(limit.interval().count()) ^
                    0x736c6964696e67ULL);  // "sliding"
    }
    return mix;
  }
  // The limiter of a counter (a record's or the store's) under `limit`'s geometry.
  // The geometries of what is not a ring have resolution 0 (no ring has it): a token
  // bucket's has one subinterval (a record with 0 is one being evicted), so token buckets
  // of one scope share their TAT whatever their rates; a sliding log's, two per unit of
  // its max (its entries are 8 bytes).
  static LimiterKey counted(std::uint64_t counter, const Limit& limit) noexcept {
    if (limit.algorithm() == Algorithm::token_bucket) return {counter, 0, 1};
    if (limit.algorithm() == Algorithm::sliding_log)
      return {counter, 0, static_cast<std::uint32_t>(2 * limit.max())};
    return {counter, static_cast<std::uint32_t>(limit.resolution().count()), limit.subintervals()};
  }
  // A ring's (the window algorithms'), counted by subinterval and read at boundaries.
  bool ring() const noexcept { return resolution_ms != 0; }
  // A token bucket's.
  bool bucket() const noexcept { return resolution_ms == 0 && subintervals == 1; }
  // A sliding log's, and the most entries it holds.
  bool log() const noexcept { return resolution_ms == 0 && subintervals > 1; }
  std::uint32_t log_capacity() const noexcept { return subintervals / 2; }
  // How many counts the store's reply to a write of this limiter fills (Store::add): a
  // ring's RingReply (N + 2), a bucket's BucketReply (2), a log's LogReply (4).
  std::size_t counts_size() const noexcept {
    return log() ? 4 : bucket() ? 2 : std::size_t{subintervals} + 2;
  }
  friend bool operator==(const LimiterKey&, const LimiterKey&) = default;

  std::int64_t resolution_ns() const noexcept {
    return static_cast<std::int64_t>(resolution_ms) * 1'000'000;
  }

  // A well-mixed 64-bit hash: the registry takes the shard from its low bits, the home
  // slot from its high bits and a tag from bits 16..31.
  std::uint64_t hash() const noexcept {
    const std::uint64_t geometry = (std::uint64_t{resolution_ms} << 16) ^ subintervals;
    return fmix64(resource ^ (geometry * 0x9e3779b97f4a7c15ULL));
  }
};

// The resource of the overflow limiters: new keys share the one of their geometry while
// the registry is full of limiters that still count (EngineCore::decide).
inline constexpr std::uint64_t kOverflowResource = 0x776f6c667265766fULL;  // "overflow"

// A shared count read back for one epoch of a limiter.
struct EpochCount {
  std::int64_t epoch;
  std::uint64_t count;
};

// A limiter used in an epoch: its first use, or its first use in a new epoch.
struct Activity {
  LimiterKey key;
  std::int64_t epoch;
};

// Words a record may carry after its buckets (Registry): the store mark with a shared
// store (kMarkWords), and whatever else the engine keeps per limiter, up to kMaxWords.
inline constexpr std::uint32_t kMarkWords = 1;
inline constexpr std::uint32_t kMaxWords = 4;

// Fields a lock-free reader reads are SeqlockFields; pins and the LRU links are touched only
// under the shard's lock.
struct Record {
  SeqlockField<std::uint64_t> resource;
  WindowState window;
  SeqlockField<std::uint32_t> resolution_ms;
  SeqlockField<std::uint16_t> subintervals;
  std::uint16_t pins;       // LimiterHandles holding it; a pinned record is not in the LRU list
  std::uint32_t lru_older;  // neighbours in the shard's LRU list (kNoRecord at the ends);
  std::uint32_t lru_newer;  // while the record is free, lru_older links the pool's free list

  // The bytes of a record with `subintervals` buckets and `words` 4-byte words after
  // them (none in local mode; the store mark with a shared store, first; up to kMaxWords).
  static std::size_t bytes_for(std::uint32_t subintervals, std::uint32_t words = 0) noexcept {
    return (sizeof(Record) + sizeof(Bucket) * (subintervals + words) + 7) & ~std::size_t{7};
  }
  Bucket* buckets() noexcept { return reinterpret_cast<Bucket*>(this + 1); }
  // With a shared store, the word after the buckets says in which epoch this engine last
  // wrote the limiter to the store (mark_of(epoch); 0: never), so that the store's
  // once-per-subinterval bookkeeping is done once. Only in records of a registry made
  // with marks; read and written under the shard's lock only.
  std::uint32_t& store_mark() noexcept {
    return *reinterpret_cast<std::uint32_t*>(buckets() + subintervals);
  }
  // Word `i` after the buckets, for a record with `n` of them (the registry was made
  // with more than `i` words; word 0 is the store mark). Written under the lock in a
  // write section; lock-free readers pass `n` from the record's key, as they must not
  // trust the stored geometry.
  Bucket& word(std::uint32_t n, std::uint32_t i) noexcept { return buckets()[n + i]; }
  static std::uint32_t mark_of(std::int64_t epoch) noexcept {
    const std::int64_t r = epoch % 0xffffffffLL;
    return static_cast<std::uint32_t>(r < 0 ? r + 0xffffffffLL : r) + 1;
  }
  LimiterKey key() const noexcept { return {resource, resolution_ms, subintervals}; }
  bool matches(const LimiterKey& k) const noexcept {
    return resource == k.resource && resolution_ms == k.resolution_ms &&
           subintervals == k.subintervals;
  }
  std::int64_t resolution_ns() const noexcept {
    return static_cast<std::int64_t>(resolution_ms) * 1'000'000;
  }
  // The window, with its geometry as stored (use under the lock).
  SlidingWindow view() noexcept {
    return SlidingWindow(window, buckets(), subintervals, resolution_ns());
  }
  // The window, with the geometry of `key` (the record matched it): for lock-free
  // readers, which must not trust a second read of the stored geometry.
  SlidingWindow view(const LimiterKey& key) noexcept {
    return SlidingWindow(window, buckets(), key.subintervals, key.resolution_ns());
  }
  // A token bucket's record (LimiterKey::bucket): its TAT, in the window's state.
  bool is_bucket() const noexcept { return key().bucket(); }
  TokenBucket bucket() noexcept { return TokenBucket(window); }
  // A sliding log's record (LimiterKey::log): its entries where a ring's buckets are.
  bool is_log() const noexcept { return key().log(); }
  SlidingLog log() noexcept { return log(key()); }
  // The same with the geometry of `key` (the record matched it), for lock-free readers.
  SlidingLog log(const LimiterKey& key) noexcept {
    return SlidingLog(window, reinterpret_cast<LogEntry*>(this + 1), key.log_capacity());
  }

  // A ring's (LimiterKey::ring).
  bool is_ring() const noexcept { return key().ring(); }

  // Takes back `cost` it counted (under the lock): a ring's in subinterval `counted`, a
  // log's entries that leave at `counted`, a bucket's from its TAT as of `now`.
  void take_back(std::int64_t counted, std::int64_t now, std::uint64_t cost,
                 const BucketRule& rule) noexcept {
    if (is_bucket()) {
      bucket().remove(now, cost, rule);
    } else if (is_log()) {
      log().remove(counted, cost);
    } else {
      view().remove(counted, cost);
    }
  }

  // What the registry asks of any kind (under the lock). Empty, as new: for a ring
  // positioned at t's epoch.
  void clear(std::int64_t t) noexcept {
    if (is_bucket()) {
      bucket().reset();
    } else if (is_log()) {
      log().reset();
    } else {
      view().reset(t);
    }
  }
  // First used at t since it last moved on: a ring whose window must move to a new
  // epoch, a bucket that is full again, a log that is empty again. (The LRU order is kept
  // at that grain.)
  bool moved_on(std::int64_t t) noexcept {
    if (is_bucket()) return bucket().tat() <= t;
    if (is_log()) return log().empty_from() <= t;
    return !view().current_at(t);
  }
  // The time from which it holds nothing if nothing more is counted.
  std::int64_t empty_from() noexcept {
    if (is_bucket()) return bucket().empty_from();
    if (is_log()) return log().empty_from();
    return view().empty_from();
  }
};
static_assert(sizeof(Record) == 48, "the per-limiter memory target depends on this header");
static_assert(alignof(Record) == 8);
inline constexpr std::size_t kRecordFreeLinkOffset = offsetof(Record, lru_older);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
