// ratewin/clock.h: the engine's source of time, injectable for tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>

namespace ratewin {
inline namespace v1 {

// Wall-clock time in nanoseconds since the Unix epoch. Epochs of a limit are cut from
// this time, so every node must read a clock of the same origin. Implementations must
// be safe to call from many threads at once.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::nanoseconds now() const noexcept = 0;
};

// CLOCK_REALTIME. It may step backwards (NTP); the engine never moves a window back.
class SystemClock final : public Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(read());
  }
  // The same reading as now(), in nanoseconds, without a virtual call.
  static std::int64_t read() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  }
};

// The process-wide SystemClock the engine uses when none is given.
std::shared_ptr<const Clock> system_clock();

// A clock that moves only when told to. For tests: decisions become deterministic.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::chrono::nanoseconds start = std::chrono::seconds(1'700'000'000))
      : now_ns_(start.count()) {}
  std::chrono::nanoseconds now() const noexcept override {
    return std::chrono::nanoseconds(now_ns_.load(std::memory_order_acquire));
  }
  void set(std::chrono::nanoseconds t) noexcept {
    now_ns_.store(t.count(), std::memory_order_release);
  }
  void advance(std::chrono::nanoseconds d) noexcept {
    now_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

 private:
  std::atomic<std::int64_t> now_ns_;
};

}  // namespace v1
}  // namespace ratewin
