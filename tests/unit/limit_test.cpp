#include "ratewin/limit.h"

#include "ratewin/hash.h"

#include <doctest/doctest.h>

#include <chrono>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace ratewin::test {
namespace {

// Each value's name parses back to it; `bad` parses to nothing and leaves the output
// alone; a value out of range is named "unknown".
template <typename E>
void names_round_trip(const char* (*name)(E) noexcept, bool (*parse)(std::string_view, E&) noexcept,
                      std::initializer_list<E> values, std::string_view bad) {
  for (const E value : values) {
    E parsed{};
    CHECK(parse(name(value), parsed));
    CHECK(parsed == value);
  }
  E untouched = *values.begin();
  CHECK_FALSE(parse(bad, untouched));
  CHECK(untouched == *values.begin());
  CHECK(std::string(name(static_cast<E>(99))) == "unknown");
}

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string error_of(auto make) {
  try {
    make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a valid limit exposes its geometry") {
  const Limit limit(100, seconds(60), seconds(5));
  CHECK(limit.max() == 100);
  CHECK(limit.interval() == seconds(60));
  CHECK(limit.resolution() == seconds(5));
  CHECK(limit.subintervals() == 12);
  CHECK(limit.resolution_ns() == 5'000'000'000);
  CHECK(limit.to_string() == "100/1m@5s");
  // with_max keeps the scope (it counts with `limit`): not a plain limit of 7.
  CHECK(limit.with_max(7).max() == 7);
  CHECK(limit.with_max(7).scope() == limit.scope());
  CHECK(limit.with_max(7) != Limit(7, seconds(60), seconds(5)));
  CHECK(limit.with_max(100) == limit);
  CHECK(Limit(1, milliseconds(1), milliseconds(1)).subintervals() == 1);
  CHECK(Limit(Limit::kMaxCount, hours(24), seconds(2)).subintervals() == 43200);
}

TEST_CASE("a limit's own scope follows from its max; a named one is shared on purpose") {
  const Limit a(3, seconds(60));
  const Limit b(100, seconds(60));
  CHECK_FALSE(a.has_scope());
  CHECK(a.scope() != 0);
  CHECK(a.scope() != b.scope());
  CHECK(a.scope() == Limit(3, seconds(60)).scope());
  CHECK(a.scope() == Limit(3, seconds(10)).scope());  // (geometry separates those)
  CHECK(a.with_scope("login").scope() == hash("login"));
  CHECK(a.with_scope("login").has_scope());
  CHECK(a.with_scope("login").scope() == b.with_scope("login").scope());
  CHECK(a.with_scope("login") != a);
  CHECK(a.with_scope("login").with_scope_id(0) == a);
  CHECK(a.with_scope_id(a.scope()) == a);  // its own scope, given: the same limit
  CHECK(a.with_scope("x").with_max(7).scope() == hash("x"));
  CHECK(a.with_failure_policy(FailurePolicy::open).scope() == a.scope());
}

TEST_CASE("Limit::problem names what the constructor refuses, for bindings to say it") {
  CHECK(Limit::problem(1, seconds(1), milliseconds(100)) == LimitProblem::none);
  CHECK(Limit::problem(0, seconds(1), milliseconds(100)) == LimitProblem::max_zero);
  CHECK(Limit::problem(Limit::kMaxCount + 1, seconds(1), seconds(1)) ==
        LimitProblem::max_too_large);
  CHECK(Limit::problem(1, seconds(1), milliseconds(300)) ==
        LimitProblem::resolution_does_not_divide);
  CHECK(Limit::problem(1, seconds(100000), seconds(1)) == LimitProblem::too_many_subintervals);
  CHECK(Limit::problem(1, hours(24 * 400), hours(24)) == LimitProblem::interval_too_long);
  CHECK(Limit::problem(1, milliseconds(0), milliseconds(1)) == LimitProblem::interval_not_positive);
  CHECK(Limit::default_resolution(seconds(1)) == milliseconds(100));
  // A negative max converted to unsigned: the message says what probably happened.
  CHECK_THROWS_WITH(Limit(static_cast<std::uint64_t>(-1), seconds(1)),
                    doctest::Contains("a negative number converted"));
}

TEST_CASE("default resolution") {
  CHECK(Limit(10, seconds(60)).resolution() == seconds(6));
  CHECK(Limit(10, seconds(1)).resolution() == milliseconds(100));
  CHECK(Limit(10, milliseconds(7)).resolution() == milliseconds(1));
  CHECK(Limit(10, milliseconds(9)).resolution() == milliseconds(1));
  CHECK(Limit(10, milliseconds(13)).resolution() == milliseconds(13));  // prime: N = 1
}

TEST_CASE("invalid limits are clear errors") {
  CHECK(error_of([] { Limit(0, seconds(1), seconds(1)); }) ==
        "ratewin::Limit: max must be at least 1");
  CHECK(error_of([] { Limit(Limit::kMaxCount + 1, seconds(1), seconds(1)); }) ==
        "ratewin::Limit: max 4294967296 exceeds 4294967295");
  CHECK(error_of([] { Limit(1, seconds(0), seconds(1)); }) ==
        "ratewin::Limit: interval must be positive, got 0ms");
  CHECK(error_of([] { Limit(1, seconds(-3), seconds(1)); }) ==
        "ratewin::Limit: interval must be positive, got -3000ms");
  CHECK(error_of([] { Limit(1, seconds(1), milliseconds(0)); }) ==
        "ratewin::Limit: resolution must be positive, got 0ms");
  CHECK(error_of([] { Limit(1, seconds(10), seconds(3)); }) ==
        "ratewin::Limit: resolution 3000ms does not divide interval 10000ms");
  CHECK(error_of([] { Limit(1, hours(24 * 367), hours(24)); }) ==
        "ratewin::Limit: interval 8808h exceeds 366 days");
  CHECK(error_of([] { Limit(1, hours(24 * 60), hours(24 * 60)); }) ==
        "ratewin::Limit: resolution 1440h exceeds 4294967295ms");
  CHECK(Limit(1, hours(24 * 49), hours(24 * 49)).resolution() == hours(24 * 49));
  CHECK(error_of([] { Limit(1, seconds(100), milliseconds(1)); }) ==
        "ratewin::Limit: interval / resolution = 100000 subintervals, more than 65535");
  CHECK(error_of([] { Limit(1, seconds(0)); }) ==
        "ratewin::Limit: interval must be positive, got 0ms");
}

TEST_CASE("a limit's algorithm: names, fixed_window's one subinterval, scopes, equality") {
  const Limit base(100, seconds(60));
  CHECK(base.algorithm() == Algorithm::sliding_window);
  const Limit strict = base.with_algorithm(Algorithm::strict_window);
  CHECK(strict.algorithm() == Algorithm::strict_window);
  CHECK(strict.resolution() == seconds(6));
  CHECK(strict.to_string() == "100/1m@6s strict_window");
  CHECK(base.to_string() == "100/1m@6s");
  const Limit fixed = base.with_algorithm(Algorithm::fixed_window);
  CHECK(fixed.resolution() == seconds(60));
  CHECK(fixed.subintervals() == 1);
  CHECK(fixed.to_string() == "100/1m@1m fixed_window");
  // Different algorithms are different limits, with scopes of their own...
  CHECK_FALSE(strict == base);
  CHECK(strict.scope() != base.scope());
  CHECK(fixed.scope() != Limit(100, seconds(60), seconds(60)).scope());
  CHECK(base.with_algorithm(Algorithm::sliding_window) == base);
  // ...unless a scope is named; with_max keeps the algorithm and the scope.
  CHECK(strict.with_scope("api").scope() == base.with_scope("api").scope());
  CHECK(strict.with_max(7).algorithm() == Algorithm::strict_window);
  CHECK(strict.with_max(7).scope() == strict.scope());
  CHECK(fixed.with_max(7).subintervals() == 1);
  names_round_trip(algorithm_name, parse_algorithm,
                   {Algorithm::sliding_window, Algorithm::strict_window, Algorithm::fixed_window,
                    Algorithm::token_bucket, Algorithm::sliding_log},
                   "token bucket");
  // A fixed window's interval is its resolution: at most kMaxResolution.
  CHECK(Limit::problem(1, hours(24 * 60), hours(24), Algorithm::fixed_window) ==
        LimitProblem::fixed_window_too_long);
  CHECK(Limit::problem(1, hours(24 * 60), hours(24), Algorithm::strict_window) ==
        LimitProblem::none);
  CHECK(error_of([] {
          (void)Limit(1, hours(24 * 60), hours(24)).with_algorithm(Algorithm::fixed_window);
        }) ==
        "ratewin::Limit: a fixed_window's interval 1440h exceeds its longest, 4294967295ms "
        "(its one subinterval is the whole interval)");
}

TEST_CASE("a token bucket's burst: with_algorithm and problem agree") {
  const Limit slow(1000, hours(24 * 60));
  // Refilling max takes 60 days, too long; a burst of 1 refills in 86.4 s.
  CHECK(Limit::problem(1000, hours(24 * 60), hours(24 * 6), Algorithm::token_bucket, 1) ==
        LimitProblem::none);
  const Limit one = slow.with_algorithm(Algorithm::token_bucket, 1);
  CHECK(one.burst() == 1);
  CHECK(one.to_string() == "1000/1440h@144h token_bucket burst 1");
  CHECK(Limit::problem(1000, hours(24 * 60), hours(24 * 6), Algorithm::token_bucket) ==
        LimitProblem::bucket_too_slow);
  CHECK_THROWS_AS((void)slow.with_algorithm(Algorithm::token_bucket), std::invalid_argument);
  CHECK_THROWS_AS((void)slow.with_algorithm(Algorithm::strict_window, 3), std::invalid_argument);
  const Limit bucket = Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket, 4);
  CHECK(bucket == Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket).with_burst(4));
  CHECK(bucket.emission_ns() == 100'000'000);
  CHECK(bucket.tolerance_ns() == 400'000'000);
  CHECK(bucket.scope() != Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket).scope());
  CHECK_THROWS_AS((void)Limit(10, seconds(1)).with_burst(4), std::invalid_argument);
}

}  // namespace ratewin::test

namespace ratewin::test {

TEST_CASE("a limit's mode: enforce by default, shadow named, outside its scope") {
  using std::chrono::seconds;
  const Limit base(100, seconds(60));
  CHECK(base.mode() == Mode::enforce);
  const Limit shadow = base.with_mode(Mode::shadow);
  CHECK(shadow.mode() == Mode::shadow);
  CHECK_FALSE(shadow == base);
  CHECK(shadow.with_mode(Mode::enforce) == base);
  CHECK(shadow.scope() == base.scope());
  CHECK(shadow.with_max(7).mode() == Mode::shadow);
  CHECK(shadow.with_algorithm(Algorithm::token_bucket).mode() == Mode::shadow);
  CHECK(shadow.to_string() == "100/1m@6s shadow");
  CHECK(base.to_string() == "100/1m@6s");
  names_round_trip(mode_name, parse_mode, {Mode::enforce, Mode::shadow}, "dry_run");
}

}  // namespace ratewin::test
