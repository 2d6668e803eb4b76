// The sliding log against the plainest model of an exact window: a list of admission
// times, where a request of cost c at t passes when the units admitted in
// (t - interval, t] plus c are at most max. Random traces of arrival times, costs and
// clock steps; every Decision field; retry_after exact; the store's view (learn) only
// ever refusing more; and give-backs by expiry.
#include "core/sliding_log.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "random_cost.h"
#include "ratewin/limit.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using detail::LogEntry;
using detail::LogRule;
using detail::SlidingLog;
using detail::WindowState;
using namespace std::chrono_literals;


// Admission times, each with its cost.
struct ExactLog {
  std::vector<std::pair<std::int64_t, std::uint64_t>> admitted;
  std::uint64_t in_window(std::int64_t t, std::int64_t window) const {
    std::uint64_t n = 0;
    for (const auto& [at, cost] : admitted)
      if (at > t - window && at <= t) n += cost;
    return n;
  }
  bool allows(std::int64_t t, const LogRule& r, std::uint64_t cost) const {
    return cost <= r.max && in_window(t, r.window) + cost <= r.max;
  }
  std::int64_t newest() const { return admitted.empty() ? INT64_MIN : admitted.back().first; }
};

// The log of a sliding_log limit, with its own storage.
struct OwnedLog {
  explicit OwnedLog(const Limit& limit)
      : rule(LogRule::of(limit)),
        entries(limit.max()),
        log(state, entries.data(), static_cast<std::uint32_t>(limit.max())) {
    log.reset();
  }
  LogRule rule;
  WindowState state;
  std::vector<LogEntry> entries;
  SlidingLog log;
};

}  // namespace

TEST_CASE("sliding log matches an exact window on random traces, field by field") {
  std::mt19937_64 rng(20261125);
  std::uint64_t decisions = 0;
  std::uint64_t allowed = 0;
  for (int trace = 0; trace < 2000; ++trace) {
    const auto max = std::uniform_int_distribution<std::uint64_t>(1, 40)(rng);
    const auto interval = std::chrono::milliseconds(std::uniform_int_distribution<int>(1, 3000)(rng));
    const Limit limit = Limit(max, interval).with_algorithm(Algorithm::sliding_log);
    OwnedLog owned(limit);
    const LogRule& rule = owned.rule;
    const std::int64_t gap = std::max<std::int64_t>(1, rule.window / static_cast<std::int64_t>(max));
    SlidingLog& log = owned.log;
    ExactLog model;
    std::int64_t t = 1'700'000'000'000'000'000 +
                     std::uniform_int_distribution<std::int64_t>(0, 1'000'000'000)(rng);
    for (int i = 0; i < 150; ++i) {
      switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
        case 0:
          break;  // the same instant
        case 1:
          t += std::uniform_int_distribution<std::int64_t>(0, 3 * rule.window)(rng);
          break;
        default:
          t += std::uniform_int_distribution<std::int64_t>(0, gap)(rng);
      }
      const std::uint64_t cost = random_cost(rng, max);
      CAPTURE(trace);
      CAPTURE(i);
      Decision d;
      log.evaluate(t, rule, cost, d);
      const bool expect = model.allows(t, rule, cost);
      REQUIRE(d.allowed == expect);
      CHECK(d.limit == max);
      const std::uint64_t used = model.in_window(t, rule.window);
      if (expect) {
        CHECK(d.retry_after == 0ns);
        CHECK(d.remaining == max - used - cost);
        if (cost != 0) {
          CHECK(log.add(t, cost, rule) == t + rule.window);
          model.admitted.emplace_back(t, cost);
        }
      } else {
        CHECK(d.remaining == (used >= max ? 0 : max - used));
        if (cost > max) {
          CHECK_FALSE(d.can_ever_pass());
        } else {
          // Exact: allowed then, not 1 ns before.
          const std::int64_t at = t + d.retry_after.count();
          REQUIRE(d.retry_after > 0ns);
          CHECK(model.allows(at, rule, cost));
          CHECK_FALSE(model.allows(at - 1, rule, cost));
        }
      }
      // reset_after: until nothing counted is in the window.
      const std::int64_t newest = model.newest();
      const std::int64_t empty_at = newest == INT64_MIN || newest + rule.window <= t
                                        ? t
                                        : newest + rule.window;
      CHECK(d.reset_after.count() == empty_at - t);
      CHECK(log.empty_from() == (newest == INT64_MIN ? INT64_MIN : newest + rule.window));
      ++decisions;
      allowed += d.allowed ? 1 : 0;
    }
  }
  MESSAGE("decisions checked: " << decisions << ", allowed: " << allowed);
  CHECK(allowed > decisions / 4);
  CHECK(allowed < decisions - decisions / 10);
}

TEST_CASE("sliding log: never more than max in any window under overload") {
  std::mt19937_64 rng(4242);
  for (int trace = 0; trace < 300; ++trace) {
    const auto max = std::uniform_int_distribution<std::uint64_t>(1, 30)(rng);
    const Limit limit = Limit(max, 1s).with_algorithm(Algorithm::sliding_log);
    OwnedLog owned(limit);
    const LogRule& rule = owned.rule;
    std::vector<std::int64_t> admitted;  // one per unit
    std::int64_t t = 1'700'000'000'000'000'000;
    for (int i = 0; i < 400; ++i) {
      t += std::uniform_int_distribution<std::int64_t>(0, 2 * rule.window / static_cast<std::int64_t>(max))(rng);
      const std::uint64_t cost = std::uniform_int_distribution<std::uint64_t>(1, 3)(rng);
      Decision d;
      owned.log.evaluate(t, rule, cost, d);
      if (!d.allowed) continue;
      owned.log.add(t, cost, rule);
      for (std::uint64_t k = 0; k < cost; ++k) admitted.push_back(t);
    }
    CAPTURE(trace);
    for (std::size_t a = 0, b = 0; b < admitted.size(); ++b) {
      while (admitted[b] - admitted[a] >= rule.window) ++a;
      REQUIRE(b - a + 1 <= max);
    }
  }
}

TEST_CASE("sliding log: the store's count refuses until its oldest entry leaves") {
  OwnedLog owned(Limit(5, 1s).with_algorithm(Algorithm::sliding_log));
  const LogRule& rule = owned.rule;
  SlidingLog& log = owned.log;
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  log.add(t0, 2, rule);  // this engine's own two
  // The store holds 5 (the 2 among them), none leaving before t0 + 300 ms; trusted for
  // 250 ms.
  log.learn(t0 + 300 * kMs, t0 + 250 * kMs, 5);
  Decision d;
  log.evaluate(t0 + 100 * kMs, rule, 1, d);
  CHECK_FALSE(d.allowed);
  CHECK(d.remaining == 0);
  CHECK(d.retry_after == 200ms);       // when the oldest leaves (the store decides then)
  CHECK(d.reset_after == 900ms);       // its own newest leaves at t0 + 1 s
  log.evaluate(t0 + 250 * kMs, rule, 1, d);
  CHECK(d.allowed);                    // no longer trusted: ask the store
  log.learn(t0 + 300 * kMs, t0 + 300 * kMs, 5);
  log.evaluate(t0 + 300 * kMs, rule, 1, d);
  CHECK(d.allowed);                    // the store's count may have fallen: ask it
  CHECK(d.remaining == 2);             // its own two are known
  log.evaluate(t0 + 300 * kMs, rule, 4, d);
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after == 700ms);       // its own two leave at t0 + 1 s
  // Taking back one of its own takes it from the store's count too.
  CHECK(log.remove(t0 + 1000 * kMs, 1) == 1);
  log.evaluate(t0 + 100 * kMs, rule, 1, d);
  CHECK(d.allowed);
  CHECK(d.remaining == 0);  // 4 of 5 held: this one is the last
}

TEST_CASE("sliding log: remove takes back entries of one expiry; newest_before walks them") {
  OwnedLog owned(Limit(10, 1s).with_algorithm(Algorithm::sliding_log));
  const LogRule& rule = owned.rule;
  SlidingLog& log = owned.log;
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  const std::int64_t e1 = log.add(t0, 3, rule);
  const std::int64_t e2 = log.add(t0 + 10 * kMs, 2, rule);
  const std::int64_t e3 = log.add(t0 + 20 * kMs, 4, rule);
  CHECK(log.size() == 9);
  CHECK(log.remove(e2, 5) == 2);  // only what it holds of that expiry
  CHECK(log.size() == 7);
  CHECK(log.remove(e2, 1) == 0);
  std::int64_t expiry = 0;
  std::uint64_t count = 0;
  REQUIRE(log.newest_before(t0, INT64_MAX, expiry, count));
  CHECK((expiry == e3 && count == 4));
  REQUIRE(log.newest_before(t0, e3, expiry, count));
  CHECK((expiry == e1 && count == 3));
  CHECK_FALSE(log.newest_before(t0, e1, expiry, count));
  // The newer entries moved down in order: a decision at t0 + 20 ms sees 7.
  Decision d;
  log.evaluate(t0 + 20 * kMs, rule, 4, d);
  CHECK_FALSE(d.allowed);
  CHECK(d.remaining == 3);
  CHECK(d.retry_after == 980ms);  // the 3 of t0 leave at t0 + 1 s; then 4 fit
  // A clock read before the newest entry's (another thread's) gets the newest expiry, so
  // entries stay in order.
  CHECK(log.expiry_at(t0 + 5 * kMs, rule) == e3);
  // Entries that expired go as a ring: it wraps and keeps counting right.
  std::int64_t t = t0 + 2000 * kMs;
  for (int round = 0; round < 25; ++round, t += 250 * kMs) {
    log.evaluate(t, rule, 2, d);
    REQUIRE(d.allowed);
    log.add(t, 2, rule);
  }
  log.evaluate(t, rule, 0, d);
  CHECK(d.remaining == 10 - 2 * 3);  // the adds at t - 250, 500 and 750 ms are live
}

}  // namespace ratewin::test
