#include "ratewin/limit.h"

#include "ratewin/hash.h"

#include <doctest/doctest.h>

#include <chrono>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <variant>

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

// The issue from_spec finds in `spec` (none: it makes a limit).
LimitIssue issue_of(const LimitSpec& spec) {
  const auto made = Limit::from_spec(spec);
  const LimitIssue* issue = std::get_if<LimitIssue>(&made);
  return issue != nullptr ? *issue : LimitIssue{};
}

TEST_CASE("Limit::from_spec makes a limit, or names the first problem, its field and its bound") {
  using P = LimitProblem;
  using F = LimitField;
  const auto spec = [](std::uint64_t max, std::chrono::milliseconds interval) {
    LimitSpec s;
    s.max = max;
    s.interval = interval;
    return s;
  };
  const auto with = [](LimitSpec s, auto change) {
    change(s);
    return s;
  };
  const LimitSpec second = spec(10, seconds(1));
  const auto res = [&](std::chrono::milliseconds r) {
    return with(second, [&](LimitSpec& s) { s.resolution = r; });
  };
  const auto subs = [&](std::uint64_t n) {
    return with(second, [&](LimitSpec& s) { s.subintervals = n; });
  };
  const auto algo = [](LimitSpec s, Algorithm a, std::uint64_t burst = 0) {
    s.algorithm = a;
    s.burst = burst;
    return s;
  };
  struct Case {
    LimitSpec spec;
    LimitProblem problem;
    LimitField field;
    std::uint64_t bound;
  };
  const std::uint64_t max_res = static_cast<std::uint64_t>(Limit::kMaxResolution.count());
  const Case cases[] = {
      {spec(0, seconds(1)), P::max_zero, F::max, Limit::kMaxCount},
      {spec(Limit::kMaxCount + 1, seconds(1)), P::max_too_large, F::max, Limit::kMaxCount},
      {spec(1, seconds(0)), P::interval_not_positive, F::interval, 1},
      {spec(1, seconds(-3)), P::interval_not_positive, F::interval, 1},
      {spec(1, hours(24 * 367)), P::interval_too_long, F::interval,
       static_cast<std::uint64_t>(Limit::kMaxInterval.count())},
      {res(milliseconds(0)), P::resolution_not_positive, F::resolution, 1},
      {res(milliseconds(300)), P::resolution_does_not_divide, F::resolution, 1000},
      {with(spec(1, seconds(100)), [](LimitSpec& s) { s.resolution = milliseconds(1); }),
       P::too_many_subintervals, F::resolution, Limit::kMaxSubintervals},
      {with(spec(1, hours(24 * 60)), [](LimitSpec& s) { s.resolution = hours(24 * 60); }),
       P::resolution_too_long, F::resolution, max_res},
      {subs(0), P::resolution_not_positive, F::subintervals, 1},
      {subs(3), P::resolution_does_not_divide, F::subintervals, 1000},
      {with(spec(1, seconds(100)), [](LimitSpec& s) { s.subintervals = 100'000; }),
       P::too_many_subintervals, F::subintervals, Limit::kMaxSubintervals},
      {with(spec(1, hours(24 * 60)), [](LimitSpec& s) { s.subintervals = 1; }),
       P::resolution_too_long, F::subintervals, max_res},
      {with(res(milliseconds(100)), [](LimitSpec& s) { s.subintervals = 10; }),
       P::resolution_and_subintervals, F::subintervals, 0},
      // A window longer than the longest subinterval that none of 2 to 10 divides: the
      // resolution chosen for it is too long.
      {spec(1, milliseconds(max_res + 2)), P::resolution_too_long, F::interval, max_res},
      {algo(second, Algorithm::sliding_window, 3), P::burst_not_bucket, F::burst, 0},
      {algo(res(milliseconds(100)), Algorithm::fixed_window), P::not_one_subinterval,
       F::resolution, 1000},
      {algo(subs(10), Algorithm::token_bucket), P::not_one_subinterval, F::subintervals, 1},
      {algo(res(milliseconds(100)), Algorithm::sliding_log), P::not_one_subinterval,
       F::resolution, 1000},
      {algo(spec(1, hours(24 * 60)), Algorithm::fixed_window), P::fixed_window_too_long,
       F::interval, max_res},
      {algo(second, Algorithm::token_bucket, Limit::kMaxCount + 1), P::burst_too_large, F::burst,
       Limit::kMaxCount},
      {algo(spec(1000, hours(24 * 60)), Algorithm::token_bucket), P::bucket_too_slow, F::interval,
       max_res},
      {algo(spec(10, hours(24 * 60)), Algorithm::token_bucket, 9), P::bucket_too_slow, F::burst,
       max_res},
      {algo(spec(Limit::kMaxLogCount + 1, seconds(1)), Algorithm::sliding_log),
       P::log_too_large, F::max, Limit::kMaxLogCount},
  };
  for (const Case& c : cases) {
    const LimitIssue got = issue_of(c.spec);
    CAPTURE(describe(got, c.spec));
    CHECK(got.problem == c.problem);
    CHECK(got.field == c.field);
    CHECK(got.bound == c.bound);
    CHECK(static_cast<bool>(got));
    CHECK_FALSE(describe(got, c.spec).empty());
  }

  // What it makes: resolution given, chosen, or from subintervals; one subinterval for
  // the algorithms that have one (a token bucket's or a log's may exceed a ring's longest:
  // it is not used); a spec's limit back from spec().
  const auto limit_of = [](const LimitSpec& s) { return std::get<Limit>(Limit::from_spec(s)); };
  CHECK(limit_of(second) == Limit(10, seconds(1)));
  CHECK(limit_of(res(milliseconds(250))) == Limit(10, seconds(1), milliseconds(250)));
  CHECK(limit_of(subs(4)) == Limit(10, seconds(1), milliseconds(250)));
  CHECK(limit_of(algo(second, Algorithm::fixed_window)).resolution() == seconds(1));
  CHECK(limit_of(algo(res(seconds(1)), Algorithm::fixed_window)).subintervals() == 1);
  CHECK(limit_of(algo(subs(1), Algorithm::sliding_log)).subintervals() == 1);
  const Limit long_bucket = limit_of(algo(spec(10, hours(24 * 60)), Algorithm::token_bucket, 1));
  CHECK(long_bucket.resolution() == hours(24 * 60));
  CHECK(long_bucket.burst() == 1);
  LimitSpec full = algo(spec(20, seconds(60)), Algorithm::token_bucket, 5);
  full.failure_policy = FailurePolicy::closed;
  full.mode = Mode::shadow;
  full.scope = hash("s");
  const Limit made = limit_of(full);
  CHECK(made == Limit(20, seconds(60))
                    .with_algorithm(Algorithm::token_bucket, 5)
                    .with_failure_policy(FailurePolicy::closed)
                    .with_mode(Mode::shadow)
                    .with_scope("s"));
  for (const Limit& l : {made, Limit(10, seconds(1), milliseconds(250)), long_bucket,
                         Limit(3, seconds(60)).with_algorithm(Algorithm::sliding_log),
                         Limit(7, seconds(9)).with_algorithm(Algorithm::fixed_window).with_max(9)})
    CHECK(limit_of(l.spec()) == l);
  CHECK(Limit::default_resolution(seconds(1)) == milliseconds(100));
}

TEST_CASE("describe words an issue in a front end's terms") {
  LimitSpec s;
  s.max = 10;
  s.interval = seconds(2);
  s.resolution = milliseconds(300);
  const LimitIssue issue = issue_of(s);
  CHECK(describe(issue, s) ==
        "resolution 300ms does not divide interval 2s: the window must be a whole number of "
        "subintervals");
  LimitTerms terms;
  terms.interval = "per";
  terms.is = "=";
  terms.duration = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  CHECK(describe(issue, s, terms) ==
        "resolution=300 ms does not divide per=2000 ms: the window must be a whole number of "
        "subintervals");
  s.resolution.reset();
  s.algorithm = Algorithm::fixed_window;
  s.burst = 4;
  terms.algorithm = [](Algorithm a) { return std::string("algorithm '") + algorithm_name(a) + "'"; };
  CHECK(describe(issue_of(s), s, terms) ==
        "burst applies to algorithm 'token_bucket' only, not to algorithm 'fixed_window': leave it "
        "out");
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
        "ratewin::Limit: max must be from 1 to 4294967295, got 0");
  CHECK(error_of([] { Limit(Limit::kMaxCount + 1, seconds(1), seconds(1)); }) ==
        "ratewin::Limit: max must be from 1 to 4294967295, got 4294967296");
  CHECK(error_of([] { Limit(1, seconds(0), seconds(1)); }) ==
        "ratewin::Limit: interval must be positive, got 0ms");
  CHECK(error_of([] { Limit(1, seconds(-3), seconds(1)); }) ==
        "ratewin::Limit: interval must be positive, got -3000ms");
  CHECK(error_of([] { Limit(1, seconds(1), milliseconds(0)); }) ==
        "ratewin::Limit: resolution must be positive, got 0ms");
  CHECK(error_of([] { Limit(1, seconds(10), seconds(3)); }) ==
        "ratewin::Limit: resolution 3s does not divide interval 10s: the window must be a whole "
        "number of subintervals");
  CHECK(error_of([] { Limit(1, hours(24 * 367), hours(24)); }) ==
        "ratewin::Limit: interval 8808h is longer than 366 days, the longest window");
  CHECK(error_of([] { Limit(1, hours(24 * 60), hours(24 * 60)); }) ==
        "ratewin::Limit: resolution 1440h makes subintervals longer than the longest, "
        "4294967295ms");
  CHECK(Limit(1, hours(24 * 49), hours(24 * 49)).resolution() == hours(24 * 49));
  CHECK(error_of([] { Limit(1, seconds(100), milliseconds(1)); }) ==
        "ratewin::Limit: interval 100s / resolution 1ms = 100000 subintervals, more than "
        "65535: choose a coarser resolution");
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
  CHECK_NOTHROW((void)Limit(1, hours(24 * 60), hours(24)).with_algorithm(Algorithm::strict_window));
  CHECK(error_of([] {
          (void)Limit(1, hours(24 * 60), hours(24)).with_algorithm(Algorithm::fixed_window);
        }) ==
        "ratewin::Limit: interval 1440h is longer than 4294967295ms, the longest for "
        "fixed_window (its one subinterval is the whole window)");
}

TEST_CASE("a token bucket's burst: with_algorithm and problem agree") {
  const Limit slow(1000, hours(24 * 60));
  // Refilling max takes 60 days, too long; a burst of 1 refills in 86.4 s.
  const Limit one = slow.with_algorithm(Algorithm::token_bucket, 1);
  CHECK(one.burst() == 1);
  CHECK(one.to_string() == "1000/1440h@1440h token_bucket burst 1");
  CHECK(error_of([&] { (void)slow.with_algorithm(Algorithm::token_bucket); }) ==
        "ratewin::Limit: token_bucket with max 1000 and interval 1440h takes longer than "
        "4294967295ms (about 49.7 days) to refill its burst (max, when burst is not given): "
        "give a smaller burst");
  CHECK_THROWS_AS((void)slow.with_algorithm(Algorithm::strict_window, 3), std::invalid_argument);
  const Limit bucket = Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket, 4);
  CHECK(bucket == Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket).with_burst(4));
  CHECK(bucket.emission_ns() == 100'000'000);
  CHECK(bucket.tolerance_ns() == 400'000'000);
  CHECK(bucket.scope() != Limit(10, seconds(1)).with_algorithm(Algorithm::token_bucket).scope());
  CHECK_THROWS_AS((void)Limit(10, seconds(1)).with_burst(4), std::invalid_argument);
}

TEST_CASE("limits written as text: the grammar, the base spec, and what is wrong") {
  using std::chrono::seconds;
  const auto one = [](std::string_view text, const LimitSpec& base = {}) {
    auto made = parse_limit(text, base);
    REQUIRE_MESSAGE(std::holds_alternative<Limit>(made), std::get<std::string>(made));
    return std::get<Limit>(made);
  };
  const auto error = [](std::string_view text, const LimitSpec& base = {}) {
    auto made = parse_limits(text, base);
    REQUIRE(std::holds_alternative<std::string>(made));
    return std::get<std::string>(made);
  };
  CHECK(one("10/second") == Limit(10, seconds(1)));
  CHECK(one("  5 / Minute ") == Limit(5, seconds(60)));
  CHECK(one("100 per 5 minutes") == Limit(100, seconds(300)));
  CHECK(one("100/5minutes") == Limit(100, seconds(300)));
  CHECK(one("1000 PER day") == Limit(1000, seconds(86400)));
  CHECK(one("2/2 days") == Limit(2, seconds(172800)));
  CHECK(one("3/month") == Limit(3, seconds(30 * 86400)));
  CHECK(one("1 per year") == Limit(1, seconds(365 * 86400)));
  CHECK(one("4294967295/hour").max() == Limit::kMaxCount);
  // The base gives everything but max and interval.
  LimitSpec base;
  base.algorithm = Algorithm::token_bucket;
  base.burst = 4;
  base.failure_policy = FailurePolicy::closed;
  base.scope = 77;
  const Limit bucket = one("10/second", base);
  CHECK(bucket.algorithm() == Algorithm::token_bucket);
  CHECK(bucket.burst() == 4);
  CHECK(bucket.failure_policy() == FailurePolicy::closed);
  CHECK(bucket.scope() == 77);
  const auto spec = read_limit("7 per 3 hours", base);
  REQUIRE(std::holds_alternative<LimitSpec>(spec));
  CHECK(std::get<LimitSpec>(spec).max == 7);
  CHECK(std::get<LimitSpec>(spec).interval == std::chrono::hours(3));
  CHECK(std::get<LimitSpec>(spec).burst == 4);

  const std::string grammar =
      "; write COUNT/UNIT or COUNT per [AMOUNT] UNIT, such as '10/second' or '100 per 5 minutes'";
  CHECK(error("") == "no limit in ''");
  CHECK(error("ten/second") == "cannot read 'ten/second' as a limit" + grammar);
  CHECK(error("10") == "cannot read '10' as a limit" + grammar);
  CHECK(error("10per second") == "cannot read '10per second' as a limit" + grammar);
  CHECK(error("10 per5 seconds") == "cannot read '10 per5 seconds' as a limit" + grammar);
  CHECK(error("10/second extra") == "cannot read '10/second extra' as a limit" + grammar);
  CHECK(error("-1/second") == "cannot read '-1/second' as a limit" + grammar);
  CHECK(error("it's/1") == "cannot read 'it\\'s/1' as a limit" + grammar);
  CHECK(error("10/fortnight") ==
        "unknown unit 'fortnight' in '10/fortnight'; use second, minute, hour, day, month or year");
  CHECK(error("10/s") == "unknown unit 's' in '10/s'; use second, minute, hour, day, month or year");
  CHECK(error("0/second") == "'0/second' allows nothing; the count must be at least 1");
  CHECK(error("1/0 seconds") == "'1/0 seconds' has a window of 0; the amount must be at least 1");
  CHECK(error("4294967296/second") ==
        "'4294967296/second': the count must be from 1 to 4294967295, got 4294967296");
  CHECK(error("99999999999999999999999/second").find("got 99999999999999999999999") !=
        std::string::npos);
  CHECK(error("1/367 days") == "'1/367 days': the window is longer than 366 days, the longest");
  CHECK(error("1/99999999999999999999 years") ==
        "'1/99999999999999999999 years': the window is longer than 366 days, the longest");
  CHECK(one("1/366 days").interval() == std::chrono::hours(24 * 366));
  // from_spec's problems, in the text's terms.
  LimitSpec log;
  log.algorithm = Algorithm::sliding_log;
  CHECK(error("5000/minute", log) ==
        "'5000/minute': count 5000 is more than 4096 for sliding_log (every unit is an entry of its "
        "log)");
  // Several.
  auto many = parse_limits("1/second, 2/minute | 3/hour;4/day");
  REQUIRE(std::holds_alternative<std::vector<Limit>>(many));
  CHECK(std::get<std::vector<Limit>>(many) ==
        std::vector<Limit>{Limit(1, seconds(1)), Limit(2, seconds(60)), Limit(3, seconds(3600)),
                           Limit(4, seconds(86400))});
  CHECK(error(" ; ") == "no limit in ' ; '");
  CHECK(error("1/second;;2/day") == "an empty limit in '1/second;;2/day'");
  CHECK(error("1/second; 2/fortnight") ==
        "unknown unit 'fortnight' in ' 2/fortnight'; use second, minute, hour, day, month or year");
  CHECK(std::holds_alternative<std::string>(parse_limit("1/second; 2/day")));
  // The throwing forms.
  CHECK(Limit::parse("3/minute") == Limit(3, seconds(60)));
  CHECK(Limit::parse_many("3/minute;1/day").size() == 2);
  CHECK_THROWS_WITH_AS(Limit::parse("3/fortnight"),
                       doctest::Contains("ratewin::Limit::parse: unknown unit 'fortnight'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Limit::parse_many(""), "ratewin::Limit::parse_many: no limit in ''",
                       std::invalid_argument);
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
