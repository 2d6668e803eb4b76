// Waiting for something that happens in the background (Redis, a failover), in the
// Redis suites: they run on real time.
#pragma once

#include <chrono>
#include <thread>

namespace ratewin::test {

// How long a wait for an event may take before the test calls it a hang. It is not what
// a test measures: passing, a wait ends when its event comes; the bound only stops a test
// whose event never comes. So it is long enough for a ThreadSanitizer build beside a CPU
// hog on a shared 2-core machine (tests/under_load.sh), where a heartbeat read or a
// reconnection can take seconds.
inline constexpr std::chrono::milliseconds kHang{30'000};

// Polls `done` every 5 ms until it is true or `timeout` has passed; its last answer.
template <class F>
bool eventually(F&& done, std::chrono::milliseconds timeout = kHang) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace ratewin::test
