// The system clock, remembering on each thread its last reading: the time at which the
// engine decided that thread's last request (an engine reads its clock once per
// decision, on the calling thread). Tests and ratewin-bench check what engines admitted
// against exact windows at the engines' own times, not at a time read after the call
// returned (which lags an admission by its Redis round trip).
#pragma once

#include <cstdint>

#include "ratewin/clock.h"

namespace ratewin::test {

class RecordingClock final : public Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    last_ = SystemClock::read();
    return std::chrono::nanoseconds(last_);
  }
  // This thread's last reading (nanoseconds since the epoch); 0 before the first.
  static std::int64_t last() noexcept { return last_; }

 private:
  static inline thread_local std::int64_t last_ = 0;
};

}  // namespace ratewin::test
