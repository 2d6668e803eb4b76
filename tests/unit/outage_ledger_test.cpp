#include "engine/outage_ledger.h"

#include <doctest/doctest.h>

#include <atomic>
#include <climits>
#include <thread>

namespace ratewin::test {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kHour = 3600 * kSecond;

}  // namespace

TEST_CASE("the outage ledger counts what was noted in a window, and clears once it is done") {
  detail::OutageLedger ledger;
  CHECK(ledger.empty());
  ledger.clear_if_done(0, kSecond);  // nothing noted: nothing to overflow on
  ledger.clear_if_done(INT64_MAX, INT64_MAX);
  CHECK(ledger.empty());

  const std::int64_t t = 1'700'000'000 * kSecond;
  ledger.note(7, t, 2, 10 * kSecond);
  ledger.note(7, t + kSecond, 3, 10 * kSecond);
  CHECK_FALSE(ledger.empty());
  std::int64_t oldest = 0;
  CHECK(ledger.since(7, t - 1, oldest) == 5);
  CHECK(oldest == t);
  CHECK(ledger.since(7, t, oldest) == 3);  // the first is dropped
  CHECK(ledger.since(8, t, oldest) == 0);
  CHECK(oldest == INT64_MAX);

  ledger.clear_if_done(t + 11 * kSecond + kSecond, kSecond);  // the window still holds it
  CHECK_FALSE(ledger.empty());
  ledger.clear_if_done(t + 11 * kSecond + kSecond + 1, kSecond);
  CHECK(ledger.empty());
  // Times near the ends of the clock do not overflow.
  ledger.note(9, INT64_MAX - kSecond, 1, kHour);
  ledger.clear_if_done(INT64_MAX, INT64_MAX);
  CHECK_FALSE(ledger.empty());
}

TEST_CASE("a long window noted once does not keep later ledgers alive") {
  detail::OutageLedger ledger;
  const std::int64_t t = 1'700'000'000 * kSecond;
  ledger.note(1, t, 1, kHour);
  ledger.clear_if_done(t + kHour + 2 * kSecond, kSecond);
  REQUIRE(ledger.empty());
  // A later outage on a limit of a second: done a second (and the slack) after it.
  const std::int64_t later = t + 2 * kHour;
  ledger.note(2, later, 1, kSecond);
  ledger.clear_if_done(later + 2 * kSecond + 1, kSecond);
  CHECK(ledger.empty());
}

TEST_CASE("a reader that sees a ledger not empty sees what was noted") {
  // clear_if_done reads the newest admission without the lock once empty() says there is
  // one: it must never read the value from before the note (a subtraction from INT64_MIN).
  for (int round = 0; round < 200; ++round) {
    detail::OutageLedger ledger;
    std::atomic<bool> go{false};
    std::thread writer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      ledger.note(1, kHour, 1, kSecond);
    });
    go.store(true, std::memory_order_release);
    while (ledger.empty()) ledger.clear_if_done(kHour, kSecond);
    ledger.clear_if_done(kHour, kSecond);  // the window still holds it
    CHECK_FALSE(ledger.empty());
    writer.join();
  }
}

}  // namespace ratewin::test
