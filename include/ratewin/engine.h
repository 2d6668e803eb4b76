// ratewin/engine.h: the root object applications call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ratewin/clock.h"
#include "ratewin/decision.h"
#include "ratewin/hash.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {

namespace detail {
class EngineCore;
struct Record;
class Shard;
}  // namespace detail

struct Options {
  // Upper bound on limiters held in memory (one per resource and window geometry).
  // When it is reached, a limiter whose window is empty is dropped first (among the 16
  // least recently used), otherwise the least recently used one; each drop is counted
  // in Stats. The bound is split evenly over up to 64 shards by resource hash. Limiters
  // held by a LimiterHandle are never dropped.
  std::size_t max_limiters = 1'000'000;
  // Source of time; nullptr means system_clock().
  std::shared_ptr<const Clock> clock;
};

// Counters since the engine was created, and gauges of its current state.
struct Stats {
  std::uint64_t allowed = 0;           // decisions that admitted the request
  std::uint64_t rejected = 0;          // decisions that turned it away
  std::uint64_t degraded = 0;          // decisions made while the store was unreachable
  std::uint64_t limiters = 0;          // limiters held now
  std::uint64_t max_limiters = 0;      // the configured bound
  std::uint64_t pinned = 0;            // limiters held by LimiterHandles now
  std::uint64_t evictions = 0;         // limiters dropped to stay within max_limiters
  std::uint64_t evictions_active = 0;  // of those, ones whose window still held counts
};

class LimiterHandle;

// The rate-limiting engine. Thread-safe: any number of threads may call any member
// concurrently. A rejected request is decided from local state only.
class Engine {
 public:
  explicit Engine(Options options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Decides whether `cost` units of `resource` fit in `limit` now, and counts them if
  // they do. Limits with the same interval and resolution share counts on a resource;
  // limits with another geometry are counted apart. cost 0 asks without counting.
  Decision try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost = 1);
  Decision try_acquire(std::string_view resource, const Limit& limit, std::uint64_t cost = 1) {
    return try_acquire(hash(resource), limit, cost);
  }

  // A handle on the limiter of (resource, limit): skips the registry lookup on every
  // call and keeps the limiter from being evicted while the handle lives.
  LimiterHandle limiter(std::uint64_t resource, const Limit& limit);
  LimiterHandle limiter(std::string_view resource, const Limit& limit);

  Stats stats() const;
  const Options& options() const noexcept;

 private:
  std::shared_ptr<detail::EngineCore> core_;
};

// A pinned limiter: one resource under one limit. Movable, not copyable. It may outlive
// the Engine that made it (it keeps the engine's state alive). One handle may be used
// from several threads at once.
class LimiterHandle {
 public:
  LimiterHandle(LimiterHandle&& other) noexcept;
  LimiterHandle& operator=(LimiterHandle&& other) noexcept;
  LimiterHandle(const LimiterHandle&) = delete;
  LimiterHandle& operator=(const LimiterHandle&) = delete;
  ~LimiterHandle();

  // As Engine::try_acquire for this handle's resource and limit. A moved-from handle
  // throws std::logic_error.
  Decision try_acquire(std::uint64_t cost = 1);

  std::uint64_t resource() const noexcept { return resource_; }
  const Limit& limit() const noexcept { return limit_; }

 private:
  friend class Engine;
  LimiterHandle(std::shared_ptr<detail::EngineCore> core, detail::Shard* shard,
                detail::Record* record, std::uint32_t record_id, std::uint64_t resource,
                const Limit& limit);
  void release() noexcept;

  std::shared_ptr<detail::EngineCore> core_;
  detail::Shard* shard_ = nullptr;
  detail::Record* record_ = nullptr;
  std::uint32_t record_id_ = 0;
  std::uint64_t resource_ = 0;
  Limit limit_;
};

}  // namespace v1
}  // namespace ratewin
