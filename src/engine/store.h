// The seam between the engine and the shared store that makes counts global.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/record.h"
#include "ratewin/engine.h"

struct uv_loop_s;  // libuv's uv_loop_t

namespace ratewin {
inline namespace v1 {
namespace detail {

// A limiter's shared counts, read back from the store.
struct SharedCounts {
  LimiterKey key;
  std::span<const EpochCount> counts;
};

// What a store needs from the engine for its background synchronisation. Called from
// the store's own thread.
class SyncTarget {
 public:
  virtual ~SyncTarget() = default;
  // Appends the limiters used in a new epoch since the last call.
  virtual void take_activity(std::vector<Activity>& out) = 0;
  // Raises each limiter's counts to the shared ones (if the engine still holds it). A
  // boundary read hands over its windows in batches, whose lookups then overlap.
  virtual void merge(std::span<const SharedCounts> windows) = 0;
};

// One write to the shared store, as the engine asks for it.
//
// A token bucket's or a sliding log's write (!key.ring()) is a decision the store makes,
// atomically: it counts `cost` at time `epoch` only if it fits the shared bucket, whose
// refill is `emission` per unit and `tolerance` for the whole burst, or the shared log,
// of `max` entries, as `cost` entries that leave it at `expiry`.
struct StoreWrite {
  LimiterKey key;
  // The subinterval the cost counts in, on the store's clock; a token bucket's or a
  // log's: the time of the decision (ns, on the store's clock).
  std::int64_t epoch = 0;
  std::uint64_t cost = 0;  // 0: a question, which only reads
  // This engine's first write to the limiter in `epoch`: the store does its
  // once-per-subinterval bookkeeping with it. (A ring's only.)
  bool first = false;
  std::int64_t emission = 0;   // a token bucket's: ns per unit
  std::int64_t tolerance = 0;  // a token bucket's: ns for the whole burst
  std::int64_t expiry = 0;     // a log's: when its entries leave (ns, on the store's clock)
  std::uint64_t max = 0;       // a log's: the most entries it holds
};

// The write of `cost` that an engine counted at `counted` for `limit` (a ring's
// subinterval, a log's expiry; a bucket's, its time), decided at `now`: an admission's, or
// the give-back of one (Store::remove).
StoreWrite store_write(const LimiterKey& key, std::int64_t counted, std::int64_t now,
                       std::uint64_t cost, bool first, const Limit& limit) noexcept;

// What a ring's write fills in its counts (N + 2 of them): the shared counts of epochs
// epoch, epoch - 1, ..., epoch - N, each its own (window()), then the count of epoch + 1
// if some node has begun it, its clock a little ahead at a boundary (ahead()). A decision
// counts that one as epoch's, so that a node a moment behind never admits past it (it
// errs high, by what was written in the moment the two disagreed). The local window does
// not learn it as epoch's: it would count it twice once it reaches epoch + 1, for as long
// as epoch stays in the window.
struct RingReply {
  template <class T>
  static std::span<T> window(std::span<T> counts) noexcept {
    return counts.first(counts.size() - 1);
  }
  static std::uint64_t ahead(std::span<const std::uint64_t> counts) noexcept {
    return counts.back();
  }
};

// What a token bucket's write fills in its counts (two of them).
struct BucketReply {
  static constexpr std::size_t kAdmitted = 0;  // 1: counted; 0: it did not fit
  static constexpr std::size_t kBacklog = 1;   // the shared TAT after it, minus `epoch` (>= 0)
};

// What a sliding log's write fills in its counts (four of them).
struct LogReply {
  static constexpr std::size_t kAdmitted = 0;  // 1: counted; 0: it did not fit
  static constexpr std::size_t kCount = 1;     // the entries of the shared log after it
  static constexpr std::size_t kHolds = 2;     // ns after `epoch` before any of them leaves
  static constexpr std::size_t kFits = 3;      // a refusal's: ns after `epoch` until it fits
};

// A store's writes from one event loop (Store::async_writer): they go out without
// blocking the loop, on connections of the loop's own, pipelined, and complete on the
// loop's thread. Every call is made on that thread.
class AsyncWriter {
 public:
  virtual ~AsyncWriter() = default;
  // As Store::add_all, but returns at once; `done` runs on the loop thread once every
  // write has its reply, or failed (within the store's deadline). The spans must stay
  // valid until then. A writer may call `done` before returning (a write it could not
  // send from the loop, made synchronously).
  virtual void add_all(std::span<const StoreWrite> writes,
                       std::span<const std::span<std::uint64_t>> counts, std::span<bool> written,
                       std::function<void()> done) = 0;
  // As Store::remove, without waiting for the reply.
  virtual void remove(const StoreWrite& give_back) = 0;
  // Fails what is in flight (their `done` run now) and closes the connections; the loop
  // then ends their handles, after which the writer may be destroyed. Idempotent.
  virtual void close() = 0;
};

// A store shared by every node enforcing the same limits (Redis in distributed mode).
// Local mode has no store: the engine then decides from its own counts alone.
//
// The store only counts; the engine decides, with its own arithmetic, from the shared
// counts the store returns (so the admission rule exists once, in core/window.h).
//
// The synchronous calls are made concurrently from application threads, never with an
// engine lock held, and return within the store's deadline.
class Store {
 public:
  virtual ~Store() = default;

  // An allowed request's write, one round trip: adds `cost` to the shared count of
  // `epoch` (unconditionally: the engine decides from the reply whether the request
  // still fits, and gives the cost back with remove() if not), and fills `counts`
  // (LimiterKey::counts_size()) as RingReply says: the shared counts of epochs epoch,
  // epoch - 1, ..., epoch - N, so the caller can take in the whole shared window, and the
  // count of epoch + 1. Those of epoch - 1, epoch and epoch + 1 (the epochs nodes write to
  // around a boundary) are as of this write, in the store's order of every node's writes:
  // with this one and those before it, never one after it, so that a write that fits is
  // not refused for one that came after it (two writes that took the last unit would
  // both refuse). cost 0 only reads. False when the store could not be reached in time or
  // refused (a write that timed out may still land later: the shared counts then err
  // high).
  //
  // A token bucket's write counts only what fits (see StoreWrite) and fills counts[0..1]
  // as BucketReply says; cost 0 only reads its TAT. A log's likewise, with LogReply.
  virtual bool add(const StoreWrite& write, std::span<std::uint64_t> counts) = 0;
  // Several writes at once (try_acquire_all), as add() each: written[i] and counts[i] are
  // what add(writes[i], counts[i]) would give. A store may send them in one round trip.
  virtual void add_all(std::span<const StoreWrite> writes,
                       std::span<const std::span<std::uint64_t>> counts, std::span<bool> written) {
    for (std::size_t i = 0; i < writes.size(); ++i) written[i] = add(writes[i], counts[i]);
  }
  // Takes back `cost` that add() counted at `epoch` (never below 0), best effort: a
  // failure (the store unreachable included) is noted in Stats::last_error, not reported;
  // the shared count then errs high until its subinterval leaves the window. A token
  // bucket's takes back cost x emission from its TAT (never before `epoch`, the time of
  // the give-back). A log's takes back up to `cost` of this engine's entries that leave at
  // `expiry`.
  virtual void remove(const StoreWrite& give_back) = 0;
  // The name of what holds the limiter's shared counts in the store (Engine::store_key).
  virtual std::string counts_key(const LimiterKey& key) const = 0;
  // Deletes the limiter's shared counts (Engine::reset). False when the store could not
  // be reached in time or refused (noted in Stats::last_error as well).
  virtual bool reset(const LimiterKey& key) = 0;
  // False while the part of the store that holds `resource`'s counts is known to be
  // unreachable (its circuit is open: one Redis, or the Cluster primary of its slot):
  // callers then skip it at once instead of each waiting for a deadline.
  virtual bool available(std::uint64_t resource) const noexcept = 0;
  // The engines on this key prefix that heartbeat to the store, this one included, as
  // last read (0: never read). FailurePolicy::partitioned splits a limit by it.
  virtual std::uint32_t live_nodes() const noexcept { return 0; }
  // Nanoseconds since the part of the store that holds `resource`'s counts came back from
  // its last outage (INT64_MAX: it never had one). What nodes admitted on their own
  // meanwhile is not in its counts.
  virtual std::int64_t back_for(std::uint64_t /*resource*/) const noexcept { return INT64_MAX; }
  // Nanoseconds to add to the engine's clock to read the store's clock.
  virtual std::int64_t clock_offset() const noexcept = 0;
  // When the store might be back: what a request rejected because of it should wait.
  virtual std::chrono::nanoseconds retry_hint() const noexcept = 0;
  virtual void add_stats(Stats& stats) const = 0;
  // A writer for the libuv loop `loop`, whose thread alone then uses it. By default, one
  // that writes synchronously on the calling thread (a store without connections of its
  // own, as the tests' ones).
  virtual std::unique_ptr<AsyncWriter> async_writer(uv_loop_s* loop);
  // Writes for callers without a loop of their own (Engine::try_acquire_all_async): as
  // AsyncWriter::add_all on a loop of the store's own, so the caller does not wait; `done`
  // runs on that loop's thread once every write has its reply or failed, with the writer
  // to give counts back through. The spans must stay valid until then. By default, the
  // writes are made synchronously on the calling thread.
  virtual void write_async(std::span<const StoreWrite> writes,
                           std::span<const std::span<std::uint64_t>> counts,
                           std::span<bool> written, std::function<void(AsyncWriter&)> done);
  // Ends background work; no SyncTarget call happens after it returns. Idempotent.
  virtual void shutdown() = 0;
};

// The store an engine's options ask for (Options::redis), or nullptr for local mode.
// Throws std::invalid_argument for options it cannot serve. `target` is the engine, which
// the store's background work calls back. Declared here, defined by the store target the
// program links: redis/store_factory.cpp in ratewin_cxx, engine/local_store_factory.cpp
// in ratewin_local (no store: local mode only).
std::unique_ptr<Store> make_store(const Options& options, std::shared_ptr<const Clock> clock,
                                  SyncTarget& target);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
