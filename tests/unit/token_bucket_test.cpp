// The token bucket (GCRA) against an independent model: a leaky bucket's level, drained
// by elapsed time (the "continuous state" formulation), on random traces of arrival
// times, costs and clock steps; and its promise, checked on the admitted requests
// themselves: in any span of time d, at most burst + d / emission.
#include "core/token_bucket.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "random_cost.h"
#include "ratewin/limit.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using detail::BucketRule;
using detail::TokenBucket;
using detail::WindowState;
using namespace std::chrono_literals;


// The level of a leaky bucket in ns of work: drained 1 ns per ns since the last admission,
// filled by cost x emission, refusing what would take it over the tolerance.
struct LeakyBucket {
  std::int64_t level = 0;
  std::int64_t last = 0;
  std::int64_t level_at(std::int64_t t) const {
    return std::max<std::int64_t>(0, level - (t - last));
  }
  bool allows(std::int64_t t, const BucketRule& r, std::uint64_t cost) const {
    if (cost > r.burst) return false;
    return level_at(t) + static_cast<std::int64_t>(cost) * r.emission <= r.tolerance;
  }
  void admit(std::int64_t t, const BucketRule& r, std::uint64_t cost) {
    level = level_at(t) + static_cast<std::int64_t>(cost) * r.emission;
    last = t;
  }
};

struct BucketShape {
  Limit limit;
  std::int64_t gap;  // typical gap between arrivals
};

BucketShape random_bucket_shape(std::mt19937_64& rng) {
  const auto max = std::uniform_int_distribution<std::uint64_t>(1, 50)(rng);
  const auto interval = std::chrono::milliseconds(std::uniform_int_distribution<int>(1, 5000)(rng));
  const auto burst = std::uniform_int_distribution<std::uint64_t>(1, 80)(rng);
  const Limit limit =
      Limit(max, interval).with_algorithm(Algorithm::token_bucket).with_burst(burst);
  return {limit, std::max<std::int64_t>(1, limit.emission_ns() / 2)};
}

std::int64_t random_gap(std::mt19937_64& rng, const BucketShape& s) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return 0;
    case 1:
      return std::uniform_int_distribution<std::int64_t>(0, 4 * s.limit.tolerance_ns())(rng);
    case 2:
      return std::uniform_int_distribution<std::int64_t>(0, 3 * s.gap)(rng);
    default:
      return std::uniform_int_distribution<std::int64_t>(0, s.gap)(rng);
  }
}

}  // namespace

TEST_CASE("token bucket matches the leaky-bucket model on random traces, field by field") {
  std::mt19937_64 rng(20261124);
  std::uint64_t decisions = 0;
  std::uint64_t allowed = 0;
  for (int trace = 0; trace < 3000; ++trace) {
    const BucketShape s = random_bucket_shape(rng);
    const BucketRule rule = BucketRule::of(s.limit);
    WindowState state;
    TokenBucket bucket(state);
    bucket.reset();
    LeakyBucket model;
    std::int64_t t = 1'700'000'000'000'000'000 +
                     std::uniform_int_distribution<std::int64_t>(0, 1'000'000'000)(rng);
    model.last = t;
    for (int i = 0; i < 100; ++i) {
      t += random_gap(rng, s);
      const std::uint64_t cost = random_cost(rng, rule.burst);
      CAPTURE(trace);
      CAPTURE(i);
      Decision d;
      bucket.evaluate(t, rule, cost, d);
      const bool expect = model.allows(t, rule, cost);
      REQUIRE(d.allowed == expect);
      CHECK(d.limit == rule.burst);
      if (expect) {
        bucket.add(t, cost, rule);
        model.admit(t, rule, cost);
        CHECK(d.retry_after == 0ns);
      }
      ++decisions;
      allowed += d.allowed ? 1 : 0;
      const std::int64_t level = model.level_at(t);
      // remaining: how many of cost 1 would pass now, one after the other.
      CHECK(d.remaining == static_cast<std::uint64_t>(
                               std::max<std::int64_t>(0, rule.tolerance - level) / rule.emission));
      // reset_after: until the bucket is full.
      CHECK(d.reset_after.count() == level);
      if (!d.allowed) {
        if (cost > rule.burst) {
          CHECK_FALSE(d.can_ever_pass());
        } else {
          // retry_after is exact: allowed then, not 1 ns before.
          const std::int64_t at = t + d.retry_after.count();
          REQUIRE(d.retry_after > 0ns);
          CHECK(model.allows(at, rule, cost));
          CHECK_FALSE(model.allows(at - 1, rule, cost));
        }
      }
    }
  }
  MESSAGE("decisions checked: " << decisions << ", allowed: " << allowed);
  CHECK(allowed > decisions / 4);
  CHECK(allowed < decisions - decisions / 10);
}

TEST_CASE("token bucket: in any span d, at most burst + d / emission admitted") {
  std::mt19937_64 rng(77);
  for (int trace = 0; trace < 600; ++trace) {
    const BucketShape s = random_bucket_shape(rng);
    const BucketRule rule = BucketRule::of(s.limit);
    WindowState state;
    TokenBucket bucket(state);
    bucket.reset();
    std::vector<std::pair<std::int64_t, std::uint64_t>> admitted;
    std::int64_t t = 1'700'000'000'000'000'000;
    for (int i = 0; i < 200; ++i) {
      t += std::uniform_int_distribution<std::int64_t>(0, s.gap)(rng);  // overload
      const std::uint64_t cost = std::uniform_int_distribution<std::uint64_t>(1, 3)(rng);
      Decision d;
      bucket.evaluate(t, rule, cost, d);
      if (!d.allowed) continue;
      bucket.add(t, cost, rule);
      admitted.emplace_back(t, cost);
    }
    CAPTURE(trace);
    for (std::size_t a = 0; a < admitted.size(); ++a) {
      std::uint64_t sum = 0;
      for (std::size_t b = a; b < admitted.size(); ++b) {
        sum += admitted[b].second;
        const std::int64_t span = admitted[b].first - admitted[a].first;
        REQUIRE(sum <= rule.burst + static_cast<std::uint64_t>(span / rule.emission));
      }
    }
  }
}

TEST_CASE("token bucket: remove gives back at most what the bucket holds; merge keeps the later") {
  const Limit limit = Limit(10, 1s).with_algorithm(Algorithm::token_bucket);  // 100 ms each
  const BucketRule rule = BucketRule::of(limit);
  CHECK(rule.emission == 100 * kMs);
  CHECK(rule.tolerance == 1000 * kMs);
  WindowState state;
  TokenBucket bucket(state);
  bucket.reset();
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  bucket.add(t0, 4, rule);
  CHECK(bucket.tat() == t0 + 400 * kMs);
  CHECK(bucket.remove(t0 + 150 * kMs, 10, rule) == 3);  // 250 ms of backlog: 3 units, rounded up
  CHECK(bucket.tat() == t0 + 150 * kMs);                // full from now: never before now
  bucket.merge(t0 + 900 * kMs);
  CHECK(bucket.tat() == t0 + 900 * kMs);
  bucket.merge(t0);
  CHECK(bucket.tat() == t0 + 900 * kMs);
  Decision d;
  bucket.evaluate(t0 + 500 * kMs, rule, 7, d);  // backlog 400 ms: 6 fit
  CHECK_FALSE(d.allowed);
  CHECK(d.remaining == 6);
  CHECK(d.retry_after == 100ms);
  CHECK(d.reset_after == 400ms);
}

}  // namespace ratewin::test
