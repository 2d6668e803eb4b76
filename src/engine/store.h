// The seam between the engine and the shared store that makes counts global.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "ratewin/engine.h"
#include "core/record.h"

namespace ratewin::inline v1::detail {

// What a store needs from the engine for its background synchronisation. Called from
// the store's own thread.
class SyncTarget {
 public:
  virtual ~SyncTarget() = default;
  // Appends the limiters used in a new epoch since the last call.
  virtual void take_activity(std::vector<Activity>& out) = 0;
  // Raises the limiter's counts to the shared ones (if the engine still holds it).
  virtual void merge(const LimiterKey& key, std::span<const EpochCount> counts) = 0;
};

// A store shared by every node enforcing the same limits (Redis in distributed mode).
// Local mode has no store: the engine then decides from its own counts alone.
//
// The synchronous calls are made concurrently from application threads, never with an
// engine lock held, and return within the store's deadline.
class Store {
 public:
  virtual ~Store() = default;

  // The fixed-point scale of the trailing weight passed to add().
  static constexpr std::uint32_t kWeightOne = 1U << 20;

  // An allowed request's write, one round trip: if the estimate over the shared counts
  // still fits `cost` under `max` (the trailing subinterval, epoch - N, weighing
  // trailing_weight / kWeightOne: the share of it still inside the window), adds `cost`
  // to the shared count of `epoch`. Either way fills `counts` (N + 1 entries) with the
  // shared counts of epochs epoch, epoch - 1, ..., epoch - N after the decision, so the
  // caller can take in the whole shared window. cost 0 only reads (and says whether the
  // window is within max). Returns whether it added (fits, for cost 0), or std::nullopt
  // when the store could not be reached in time or refused.
  virtual std::optional<bool> add(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost,
                                  std::uint64_t max, std::uint32_t trailing_weight,
                                  std::span<std::uint64_t> counts) = 0;
  // Takes back `cost` that add() counted at `epoch` (never below 0), best effort: a
  // failure is logged and counted, not reported.
  virtual void remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) = 0;
  // False while the store is known to be unreachable (its circuit is open): callers
  // then skip it at once instead of each waiting for a deadline.
  virtual bool available() const noexcept = 0;
  // Nanoseconds to add to the engine's clock to read the store's clock.
  virtual std::int64_t clock_offset() const noexcept = 0;
  // When the store might be back: what a request rejected because of it should wait.
  virtual std::chrono::nanoseconds retry_hint() const noexcept = 0;
  virtual void add_stats(Stats& stats) const = 0;
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

}  // namespace ratewin::inline v1::detail
