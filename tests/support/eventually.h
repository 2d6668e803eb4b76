// Waiting for something that happens in the background (Redis, a failover), in the
// Redis suites: they run on real time.
#pragma once

#include <chrono>
#include <thread>

namespace ratewin::test {

// Polls `done` every 5 ms until it is true or `timeout` has passed; its last answer.
template <class F>
bool eventually(F&& done, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace ratewin::test
