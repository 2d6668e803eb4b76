#include "core/window.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "ratewin/limit.h"
#include "reference_window.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using detail::SlidingWindow;
using detail::Trailing;
using detail::WindowState;


// A window with its own storage; copyable, so a test can ask "what if" on a copy.
struct OwnedWindow {
  OwnedWindow(std::uint32_t subintervals, std::int64_t resolution_ns, std::int64_t t)
      : buckets(subintervals), n(subintervals), r(resolution_ns) {
    view().reset(t);
  }
  SlidingWindow view() { return SlidingWindow(state, buckets.data(), n, r); }
  WindowState state;
  std::vector<detail::Bucket> buckets;
  std::uint32_t n;
  std::int64_t r;
};

struct TraceShape {
  std::uint32_t n;
  std::int64_t resolution;
  std::uint64_t max;
};

TraceShape random_shape(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::uint32_t> n_dist(1, 16);
  std::uniform_int_distribution<std::int64_t> res_ms(1, 1500);
  std::uniform_int_distribution<std::uint64_t> max_dist(1, 60);
  return {n_dist(rng), res_ms(rng) * kMs, max_dist(rng)};
}

// Gaps: often within a subinterval, sometimes zero, sometimes longer than the interval.
std::int64_t random_gap(std::mt19937_64& rng, const TraceShape& s) {
  const std::int64_t interval = s.resolution * s.n;
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return 0;
    case 1:
      return std::uniform_int_distribution<std::int64_t>(interval, 5 * interval)(rng);
    case 2:
      return std::uniform_int_distribution<std::int64_t>(0, 2 * s.resolution)(rng);
    default:
      return std::uniform_int_distribution<std::int64_t>(0, s.resolution / 4 + 1)(rng);
  }
}

std::uint64_t random_cost(std::mt19937_64& rng, const TraceShape& s) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return 0;
    case 1:
      return std::uniform_int_distribution<std::uint64_t>(0, s.max + 2)(rng);
    case 2:
      return std::uniform_int_distribution<std::uint64_t>(1, (s.max + 1) / 2)(rng);
    default:
      return 1;
  }
}

}  // namespace

constexpr Trailing kTrailings[] = {Trailing::interpolated, Trailing::whole, Trailing::none};

TEST_CASE("window matches the brute-force reference on random traces, for each algorithm") {
  std::mt19937_64 rng(20261121);
  constexpr int kTraces = 4500;
  constexpr int kEvents = 120;
  std::uint64_t decisions = 0;
  std::uint64_t allowed = 0;
  for (int trace = 0; trace < kTraces; ++trace) {
    const TraceShape s = random_shape(rng);
    std::int64_t t =
        1'700'000'000 * kSec + std::uniform_int_distribution<std::int64_t>(0, kSec)(rng);
    const Trailing mode = kTrailings[trace % 3];
    OwnedWindow w(s.n, s.resolution, t);
    ReferenceWindow ref(s.n, s.resolution, mode);
    for (int i = 0; i < kEvents; ++i) {
      t += random_gap(rng, s);
      const std::uint64_t cost = random_cost(rng, s);
      CAPTURE(trace);
      CAPTURE(i);
      const bool expect = ref.allows(t, s.max, cost);
      const Decision d = w.view().try_acquire(t, s.max, cost, mode);
      REQUIRE(d.allowed == expect);
      if (expect) ref.admit(t, cost);
      ++decisions;
      allowed += d.allowed ? 1 : 0;
      if (mode == Trailing::interpolated) {
        REQUIRE(w.view().scaled_estimate(t, s.max) == ref.scaled_estimate(t, s.max));
      }
      CHECK(d.limit == s.max);
      CHECK(d.remaining == ref.remaining(t, s.max));
      CHECK(d.reset_after.count() == ref.reset_at(t) - t);
      if (d.allowed) {
        CHECK(d.retry_after.count() == 0);
      } else if (cost > s.max) {
        CHECK_FALSE(d.can_ever_pass());
      } else {
        // retry_after is exact: allowed at now + retry_after, not 1 ns or 1 ms before.
        const std::int64_t at = t + d.retry_after.count();
        REQUIRE(d.retry_after.count() > 0);
        CHECK(ref.allows(at, s.max, cost));
        CHECK_FALSE(ref.allows(at - 1, s.max, cost));
        CHECK_FALSE(ref.allows(at - kMs, s.max, cost));
      }
    }
  }
  MESSAGE("decisions checked: " << decisions << ", allowed: " << allowed);
  CHECK(allowed > decisions / 4);  // the traces exercise both outcomes
  CHECK(allowed < decisions - decisions / 10);
}

TEST_CASE("retry_after is exact on many random states (checked on copies of the window)") {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int trace = 0; trace < 3000; ++trace) {
    const Trailing mode = kTrailings[trace % 3];
    const TraceShape s = random_shape(rng);
    std::int64_t t = 1'700'000'000 * kSec;
    OwnedWindow w(s.n, s.resolution, t);
    const int events = std::uniform_int_distribution<int>(1, 80)(rng);
    for (int i = 0; i < events; ++i) {
      t += random_gap(rng, s);
      (void)w.view().try_acquire(t, s.max, random_cost(rng, s), mode);
    }
    const std::uint64_t cost = std::uniform_int_distribution<std::uint64_t>(0, s.max)(rng);
    OwnedWindow probe = w;
    const Decision d = probe.view().try_acquire(t, s.max, cost, mode);
    if (d.allowed) continue;
    ++checked;
    CAPTURE(trace);
    const std::int64_t at = t + d.retry_after.count();
    OwnedWindow exact = w;
    CHECK(exact.view().try_acquire(at, s.max, cost, mode).allowed);
    OwnedWindow early_ns = w;
    CHECK_FALSE(early_ns.view().try_acquire(at - 1, s.max, cost, mode).allowed);
    OwnedWindow early_ms = w;
    CHECK_FALSE(early_ms.view().try_acquire(at - kMs, s.max, cost, mode).allowed);
  }
  MESSAGE("rejected states checked: " << checked);
  CHECK(checked > 750);
}

// strict_window's promise: no sliding window of the interval ever holds more than max,
// checked against the admitted requests themselves (not a model of the ring); and
// fixed_window's (one subinterval, no trailing weight): no aligned window does.
TEST_CASE("strict and fixed windows never admit more than max in their windows") {
  std::mt19937_64 rng(13);
  std::uint64_t admitted_total = 0;
  for (int trace = 0; trace < 1500; ++trace) {
    const bool fixed = trace % 2 == 1;
    TraceShape s = random_shape(rng);
    if (fixed) s = {1, s.resolution * s.n, s.max};
    const Trailing mode = fixed ? Trailing::none : Trailing::whole;
    const std::int64_t interval = s.resolution * s.n;
    std::int64_t t =
        1'700'000'000 * kSec + std::uniform_int_distribution<std::int64_t>(0, kSec)(rng);
    OwnedWindow w(s.n, s.resolution, t);
    std::vector<Admitted> admitted;
    // Bursty random traffic or steady overload (about 10x).
    const bool steady = trace % 4 < 2;
    const std::int64_t steady_gap = std::max<std::int64_t>(1, interval / std::int64_t(s.max * 10));
    for (int i = 0; i < 300; ++i) {
      t += steady ? steady_gap : random_gap(rng, s);
      const std::uint64_t cost = steady ? 1 : random_cost(rng, s);
      if (!w.view().try_acquire(t, s.max, cost, mode).allowed || cost == 0) continue;
      admitted.push_back({t, cost});
      admitted_total += cost;
      std::uint64_t in_window = 0;
      for (const auto& a : admitted) {
        const bool counts =
            fixed ? floor_div(a.t, interval) == floor_div(t, interval) : a.t > t - interval;
        if (counts) in_window += a.cost;
      }
      CAPTURE(trace);
      REQUIRE(in_window <= s.max);
    }
  }
  CHECK(admitted_total > 10000);
}

// Over-admission against an exact sliding log, single node.
//
// Bound: let t be the time of an admission, e its epoch, w = (e+1)R - t, and T the count
// admitted in epoch e-N. Every request counted in the exact window (t - NR, t] lies in
// epochs e-N+1..e (sum S, all of it, cost of this request included) or in the part of
// epoch e-N after t - NR (at most T). Admission required S*R + T*w <= max*R, so
//     exact count * R <= max*R - T*w + T*R = max*R + T*(R - w).
// The count in any window is at most the count of the window ending at its last
// admission, so this bounds every window; with T <= max it gives exact < 2 * max. The
// interpolation discounts T by at most D = floor(max / 4) (E >= S + T - D), so also
//     exact <= max + D <= 1.25 * max.
// The test checks both forms and reports the worst ratio seen.
TEST_CASE("over-admission against an exact sliding log stays within the derived bound") {
  std::mt19937_64 rng(99);
  double worst_ratio = 0;
  double worst_uniform_ratio = 0;
  for (int trace = 0; trace < 1500; ++trace) {
    const TraceShape s = random_shape(rng);
    const std::int64_t interval = s.resolution * s.n;
    std::int64_t t = 1'700'000'000 * kSec;
    OwnedWindow w(s.n, s.resolution, t);
    ReferenceWindow ref(s.n, s.resolution);
    // Half the traces are bursty random traffic, half steady overload (about 10x).
    const bool steady = trace % 2 == 1;
    const std::int64_t steady_gap = std::max<std::int64_t>(1, interval / std::int64_t(s.max * 10));
    for (int i = 0; i < 300; ++i) {
      t += steady ? steady_gap : random_gap(rng, s);
      const std::uint64_t cost = steady ? 1 : random_cost(rng, s);
      if (!w.view().try_acquire(t, s.max, cost).allowed || cost == 0) continue;
      ref.admit(t, cost);
      std::uint64_t exact = 0;
      for (const auto& a : ref.admitted()) {
        if (a.t > t - interval && a.t <= t) exact += a.cost;
      }
      const std::int64_t e = floor_div(t, s.resolution);
      const std::uint64_t trailing = ref.epoch_count(e - s.n);
      const std::int64_t weight = (e + 1) * s.resolution - t;
      CAPTURE(trace);
      REQUIRE(u128{exact} * u128(s.resolution) <=
              u128{s.max} * u128(s.resolution) + u128{trailing} * u128(s.resolution - weight));
      REQUIRE(exact < 2 * s.max);
      REQUIRE(exact <= s.max + s.max / 4);
      const double ratio = double(exact) / double(s.max);
      worst_ratio = std::max(worst_ratio, ratio);
      if (steady && t > 1'700'000'000 * kSec + 3 * interval) {
        worst_uniform_ratio = std::max(worst_uniform_ratio, ratio);
      }
    }
  }
  MESSAGE("worst exact/max in any sliding interval, random bursty traces: " << worst_ratio);
  MESSAGE("worst exact/max, steady 10x overload after warm-up: " << worst_uniform_ratio);
  CHECK(worst_ratio <= 1.25);
}

// The most admitted in any window of `interval` (the admissions are in time order).
std::uint64_t most_in_any_window(const std::vector<std::int64_t>& times, std::int64_t interval) {
  std::uint64_t most = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < times.size(); ++i) {
    while (times[first] <= times[i] - interval) ++first;
    most = std::max<std::uint64_t>(most, i - first + 1);
  }
  return most;
}

// The attack the bound is for: the whole quota sent just before a subinterval ends, then
// one request every R/100 (or, in the second form, the quota again before every
// subinterval ends). Before the bound, limit 20 per 2 s at 200 ms admitted 37 in under 2 s.
TEST_CASE("bursts timed to subinterval ends get at most 1.25 x max in any window") {
  double worst = 0;
  for (const std::uint64_t max : {4U, 5U, 7U, 20U, 100U, 1000U}) {
    for (const std::uint32_t n : {1U, 2U, 3U, 10U, 60U}) {
      for (const std::int64_t lead : {kMs / 10, 15 * kMs, 60 * kMs}) {
        for (const bool every_end : {false, true}) {
          const std::int64_t r = 200 * kMs;
          const std::int64_t interval = r * n;
          std::int64_t t = 1'700'000'000 * kSec - lead;  // (a subinterval ends at kSec multiples)
          OwnedWindow w(n, r, t);
          std::vector<std::int64_t> admitted;
          const auto burst = [&] {
            for (std::uint64_t i = 0; i < max; ++i)
              if (w.view().try_acquire(t, max, 1).allowed) admitted.push_back(t);
          };
          burst();
          const std::int64_t end = t + 3 * interval;
          std::int64_t next_end = floor_div(t, r) * r + r;
          while (t < end) {
            t += r / 100;
            if (every_end && t >= next_end - lead) {
              burst();
              next_end += r;
            } else if (w.view().try_acquire(t, max, 1).allowed) {
              admitted.push_back(t);
            }
          }
          const std::uint64_t most = most_in_any_window(admitted, interval);
          CAPTURE(max);
          CAPTURE(n);
          CAPTURE(lead);
          CAPTURE(every_end);
          CHECK(most <= max + max / 4);
          worst = std::max(worst, double(most) / double(max));
        }
      }
    }
  }
  MESSAGE("worst most-in-a-window / max under timed bursts: " << worst);
}

TEST_CASE("edge cases") {
  const std::int64_t t0 = 1'700'000'000 * kSec;

  SUBCASE("time going backwards never moves an epoch back") {
    OwnedWindow w(10, 100 * kMs, t0);
    for (int i = 0; i < 5; ++i) CHECK(w.view().try_acquire(t0 + 550 * kMs, 10, 1).allowed);
    const std::int64_t epoch = w.view().epoch();
    const Decision back = w.view().try_acquire(t0 - 3600 * kSec, 10, 1);
    CHECK(back.allowed);
    CHECK(w.view().epoch() == epoch);
    CHECK(w.view().count_for_epoch(epoch) == 6);
    // Evaluated as at the start of the current epoch: 6 counted, 4 left.
    CHECK(back.remaining == 4);
    CHECK(back.reset_after.count() > 3600 * kSec);
    const Decision negative = w.view().try_acquire(-5 * kSec, 10, 100);
    CHECK_FALSE(negative.allowed);
    CHECK(w.view().epoch() == epoch);
  }

  SUBCASE("idle gaps of many intervals empty the window") {
    OwnedWindow w(4, 250 * kMs, t0);
    for (int i = 0; i < 3; ++i) CHECK(w.view().try_acquire(t0, 3, 1).allowed);
    CHECK_FALSE(w.view().try_acquire(t0, 3, 1).allowed);
    const std::int64_t later = t0 + 1000 * 3600 * kSec;
    CHECK(w.view().empty_at(later));
    const Decision d = w.view().try_acquire(later, 3, 1);
    CHECK(d.allowed);
    CHECK(d.remaining == 2);
    // Exactly N epochs later the old newest bucket is the trailing one; N+1: gone.
    OwnedWindow v(4, 250 * kMs, 0);
    CHECK(v.view().try_acquire(0, 10, 4).allowed);
    CHECK(v.view().scaled_estimate(4 * 250 * kMs, 10) == detail::u128{4} * (250 * kMs));
    CHECK(v.view().scaled_estimate(4 * 250 * kMs + 125 * kMs, 10) == detail::u128{4} * (125 * kMs));
    CHECK(v.view().scaled_estimate(5 * 250 * kMs, 10) == 0);
    CHECK(v.view().empty_at(5 * 250 * kMs));
  }

  SUBCASE("max = 1") {
    OwnedWindow w(10, 100 * kMs, t0);
    const Decision first = w.view().try_acquire(t0, 1, 1);
    CHECK(first.allowed);
    CHECK(first.remaining == 0);
    const Decision second = w.view().try_acquire(t0 + 10 * kMs, 1, 1);
    CHECK_FALSE(second.allowed);
    // The one request leaves the window when its epoch stops trailing: 1.1 s after t0's epoch
    // start.
    CHECK(t0 + 10 * kMs + second.retry_after.count() == t0 + 1100 * kMs);
  }

  SUBCASE("resolution = interval (N = 1)") {
    OwnedWindow w(1, kSec, t0);
    for (int i = 0; i < 10; ++i) CHECK(w.view().try_acquire(t0 + 900 * kMs, 10, 1).allowed);
    CHECK_FALSE(w.view().try_acquire(t0 + 999 * kMs, 10, 1).allowed);
    // In the next epoch the trailing 10 would weigh (1 - 0.5) at mid-epoch, 5, but the
    // interpolation discounts a trailing count by at most max / 4 = 2: 8 counted.
    const Decision d = w.view().try_acquire(t0 + 1500 * kMs, 10, 1);
    CHECK(d.allowed);
    CHECK(d.remaining == 1);
    // With 2 trailing (no more than max / 4) the overlap alone decides: 1 at mid-epoch.
    OwnedWindow spread(1, kSec, t0);
    for (int i = 0; i < 2; ++i) CHECK(spread.view().try_acquire(t0 + 900 * kMs, 10, 1).allowed);
    CHECK(spread.view().try_acquire(t0 + 1500 * kMs, 10, 1).remaining == 8);
  }

  SUBCASE("resolution = 1 ms") {
    const Limit limit(5, std::chrono::milliseconds(10), std::chrono::milliseconds(1));
    OwnedWindow w(limit.subintervals(), limit.resolution_ns(), t0);
    for (int i = 0; i < 5; ++i) CHECK(w.view().try_acquire(t0 + i * kMs, 5, 1).allowed);
    const Decision d = w.view().try_acquire(t0 + 5 * kMs, 5, 1);
    CHECK_FALSE(d.allowed);
    // The first request (epoch t0) trails during [t0+10ms, t0+11ms): retry at t0+11ms.
    CHECK(d.retry_after.count() == 6 * kMs);
  }

  SUBCASE("cost = 0 asks without counting") {
    OwnedWindow w(10, 100 * kMs, t0);
    for (int i = 0; i < 3; ++i) CHECK(w.view().try_acquire(t0, 3, 1).allowed);
    const Decision d = w.view().try_acquire(t0, 3, 0);
    CHECK(d.allowed);  // E = max still fits a zero cost
    CHECK(d.remaining == 0);
    CHECK(w.view().count_for_epoch(w.view().epoch()) == 3);
  }

  SUBCASE("cost > max can never pass and is not counted") {
    OwnedWindow w(10, 100 * kMs, t0);
    const Decision d = w.view().try_acquire(t0, 5, 6);
    CHECK_FALSE(d.allowed);
    CHECK_FALSE(d.can_ever_pass());
    CHECK(d.retry_after == Decision::kNever);
    CHECK(d.remaining == 5);
    CHECK(d.reset_after.count() == 0);
    CHECK(w.view().empty_at(t0));
  }

  SUBCASE("counts near overflow") {
    const std::uint64_t top = Limit::kMaxCount;
    OwnedWindow w(3, kSec, t0);
    CHECK(w.view().try_acquire(t0, top, top - 1).allowed);
    CHECK(w.view().try_acquire(t0, top, 1).allowed);
    const Decision full = w.view().try_acquire(t0, top, 1);
    CHECK_FALSE(full.allowed);
    CHECK(full.remaining == 0);
    // A shared count above what a bucket holds saturates instead of wrapping.
    w.view().merge(w.view().epoch() - 1, std::uint64_t{1} << 40);
    CHECK(w.view().count_for_epoch(w.view().epoch() - 1) == top);
    CHECK(w.view().scaled_estimate(t0, top) == detail::u128{2 * top} * kSec);
    CHECK_FALSE(w.view().try_acquire(t0, top, 0).allowed);  // E > max: even cost 0 fails
    const Decision d = w.view().try_acquire(t0, top, top);
    CHECK_FALSE(d.allowed);
    CHECK(d.can_ever_pass());
    CHECK(d.retry_after.count() > 0);
  }
}

// What a lock-free reader may see on a torn read: any mix of values written at some
// time, here the extremes. evaluate() must stay free of undefined behaviour (UBSan
// checks this in the test command) and must not loop or index out of range; its answer
// is then discarded by the reader's validation.
TEST_CASE("evaluate stays defined on inconsistent states") {
  const std::int64_t t = 1'700'000'000 * kSec;
  const std::int64_t epochs[] = {0,
                                 -1,
                                 1,
                                 t / (10 * kMs),
                                 t / kSec,
                                 t / kMs,
                                 std::numeric_limits<std::int64_t>::max(),
                                 std::numeric_limits<std::int64_t>::min()};
  const std::uint64_t sums[] = {0, 1, 1000, std::numeric_limits<std::uint64_t>::max()};
  const std::uint32_t counts[] = {0, 1, 0xffffffffU};
  int evaluated = 0;
  for (const std::int64_t epoch : epochs) {
    for (const std::uint64_t sum : sums) {
      for (const std::uint32_t count : counts) {
        for (const std::uint16_t slot :
             {std::uint16_t{0}, std::uint16_t{9}, std::uint16_t{10}, std::uint16_t{65535}}) {
          OwnedWindow w(10, kSec, 0);
          w.state.epoch = epoch;
          w.state.sum = sum;
          w.state.trailing = count;
          w.state.head = slot;
          w.state.newest = static_cast<std::uint16_t>(slot % 11);
          for (auto& b : w.buckets) b = count;
          for (const std::uint64_t cost : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}}) {
            for (const Trailing mode : kTrailings) {
              Decision d;
              if (w.view().evaluate(t, 5, cost, mode, d)) ++evaluated;
              if (w.view().evaluate(std::numeric_limits<std::int64_t>::min(), 5, cost, mode, d))
                ++evaluated;
            }
          }
        }
      }
    }
  }
  CHECK(evaluated > 0);
}

TEST_CASE("merge keeps the larger of local and shared counts, by epoch") {
  const std::int64_t r = 100 * kMs;
  OwnedWindow w(5, r, 10 * r);
  CHECK(w.view().try_acquire(10 * r, 100, 3).allowed);
  w.view().merge(10, 2);  // lower than local: kept
  CHECK(w.view().count_for_epoch(10) == 3);
  w.view().merge(10, 7);
  CHECK(w.view().count_for_epoch(10) == 7);
  w.view().merge(8, 4);
  CHECK(w.view().count_for_epoch(8) == 4);
  w.view().merge(5, 9);  // trailing epoch (10 - 5)
  CHECK(w.view().count_for_epoch(5) == 9);
  w.view().merge(4, 9);  // out of the window: ignored
  CHECK(w.view().count_for_epoch(4) == 0);
  CHECK(w.view().scaled_estimate(10 * r, 100) == detail::u128{7 + 4} * r + detail::u128{9} * r);
  w.view().merge(12, 1);  // ahead: moves the window forward
  CHECK(w.view().epoch() == 12);
  CHECK(w.view().count_for_epoch(12) == 1);
  CHECK(w.view().count_for_epoch(10) == 7);
  CHECK(w.view().count_for_epoch(7) == 0);  // was trailing... epoch 7 = 12 - 5 holds 0
}

}  // namespace ratewin::test
