// The engine's side of the store seam, tested without Redis: a fake store shared by
// several engines in one process (counts per limiter and epoch, optionally failing), and
// a fixture with an injected clock. For the unit suites (engine_test, batched_test).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>

#include "engine/store.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"

namespace ratewin::test {

using namespace std::chrono_literals;

struct Fixture {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(1'700'000'000s);
  Options options(std::size_t max_limiters = 1'000'000) {
    Options o;
    o.clock = clock;
    o.max_limiters = max_limiters;
    return o;
  }
};

// A store shared by several engines in one process, standing in for Redis to test the
// engine's side of the seam: counts per (limiter, epoch), optionally failing.
struct SharedCounts {
  std::mutex mutex;
  std::map<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t, std::int64_t>, std::uint64_t>
      counts;
  std::map<std::uint64_t, std::int64_t> tats;  // token buckets' TATs, by counter
  std::atomic<bool> down{false};
  std::atomic<bool> unreachable{false};  // available() says no (the circuit is open)
  std::atomic<std::uint32_t> live{0};    // live_nodes()
  std::atomic<std::int64_t> back_for{INT64_MAX};  // back_for(): ns since the last outage
  std::atomic<int> calls{0};
  std::atomic<int> first_writes{0};  // writes marked as an engine's first in their epoch
  std::atomic<int> batches{0};       // add_all calls
  std::atomic<int> batched{0};       // writes they carried
  std::function<void()> during_add;  // runs inside each write, before it is counted
  std::function<void()> after_add;   // runs inside each write, once it is counted and read

  // Every count held, over all limiters and epochs.
  std::uint64_t total() {
    std::lock_guard lock(mutex);
    std::uint64_t sum = 0;
    for (const auto& [key, count] : counts) sum += count;
    return sum;
  }
};

class FakeStore final : public detail::Store {
 public:
  explicit FakeStore(std::shared_ptr<SharedCounts> shared) : shared_(std::move(shared)) {}
  // What the Redis store does, over a map: adds the cost, whatever the counts, and
  // returns the window after it (the engine decides from it).
  bool add(const detail::StoreWrite& write, std::span<std::uint64_t> counts) override {
    ++shared_->calls;
    if (shared_->during_add) shared_->during_add();
    if (write.first) ++shared_->first_writes;
    if (shared_->down) return false;
    if (write.key.bucket()) {
      // What the Redis store's script does: counts only what fits.
      std::lock_guard lock(shared_->mutex);
      std::int64_t& stored = shared_->tats[write.key.resource];
      const std::int64_t tat = std::max(stored, write.epoch);
      const std::int64_t next = tat + static_cast<std::int64_t>(write.cost) * write.emission;
      const bool fits = write.cost == 0 || next - write.epoch <= write.tolerance;
      if (fits) stored = next;
      counts[detail::BucketReply::kAdmitted] = fits ? 1 : 0;
      counts[detail::BucketReply::kBacklog] =
          static_cast<std::uint64_t>((fits ? next : tat) - write.epoch);
    } else {
      std::lock_guard lock(shared_->mutex);
      const detail::LimiterKey& key = write.key;
      auto count = [&](std::int64_t e) -> std::uint64_t& {
        return shared_->counts[{key.resource, key.resolution_ms, key.subintervals, e}];
      };
      count(write.epoch) += write.cost;  // cost 0 only reads
      // As detail::RingReply says: the window, then the next epoch's count.
      const std::span<std::uint64_t> window = detail::RingReply::window(counts);
      for (std::size_t k = 0; k < window.size(); ++k)
        window[k] = count(write.epoch - static_cast<std::int64_t>(k));
      counts.back() = count(write.epoch + 1);
    }
    if (shared_->after_add) shared_->after_add();
    return true;
  }
  void add_all(std::span<const detail::StoreWrite> writes,
               std::span<const std::span<std::uint64_t>> counts, std::span<bool> written) override {
    ++shared_->batches;
    shared_->batched += static_cast<int>(writes.size());
    for (std::size_t i = 0; i < writes.size(); ++i) written[i] = add(writes[i], counts[i]);
  }
  void remove(const detail::StoreWrite& w) override {
    if (shared_->down) return;
    std::lock_guard lock(shared_->mutex);
    if (w.key.bucket()) {
      std::int64_t& tat = shared_->tats[w.key.resource];
      tat = std::max(tat - static_cast<std::int64_t>(w.cost) * w.emission, w.epoch);
      return;
    }
    std::uint64_t& c =
        shared_->counts[{w.key.resource, w.key.resolution_ms, w.key.subintervals, w.epoch}];
    c -= std::min(c, w.cost);
  }
  std::string counts_key(const detail::LimiterKey& key) const override {
    return "fake:" + std::to_string(key.resource);
  }
  bool reset(const detail::LimiterKey& key) override {
    if (shared_->down) return false;
    std::lock_guard lock(shared_->mutex);
    if (key.bucket()) shared_->tats.erase(key.resource);
    std::erase_if(shared_->counts, [&](const auto& entry) {
      const auto& [resource, resolution_ms, subintervals, epoch] = entry.first;
      return resource == key.resource && resolution_ms == key.resolution_ms &&
             subintervals == key.subintervals;
    });
    return true;
  }
  // The fake is "reachable" even while failing writes (it tests the write path), unless
  // told otherwise.
  bool available(std::uint64_t) const noexcept override { return !shared_->unreachable; }
  std::uint32_t live_nodes() const noexcept override { return shared_->live; }
  std::int64_t back_for(std::uint64_t) const noexcept override { return shared_->back_for; }
  std::int64_t clock_offset() const noexcept override { return 0; }
  std::chrono::nanoseconds retry_hint() const noexcept override { return 1s; }
  void add_stats(Stats&) const override {}
  void shutdown() override {}

 private:
  std::shared_ptr<SharedCounts> shared_;
};

}  // namespace ratewin::test
