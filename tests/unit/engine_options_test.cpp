#include "internal/ratewin_internal/engine_options.h"

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

#include "ratewin/engine.h"

namespace ratewin::test {
namespace {

using internal::kOptionRanges;
using internal::OptionRange;

// What the Engine says of `o`: empty when it is made, else its message.
std::string engine_says(const Options& o) {
  try {
    Engine e(o);
    return {};
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

// A value just outside the range below (or above) it, in the option's unit.
double below(const OptionRange& r) { return r.min >= 1 ? r.min - 1 : r.min / 2 - 1; }
double above(const OptionRange& r) { return r.max >= 1 ? r.max + 1 : r.max * 2; }

}  // namespace

TEST_CASE("kOptionRanges names each numeric option once, and the defaults are in range") {
  std::set<std::string_view> names;
  const Options defaults;
  for (const OptionRange& r : kOptionRanges) {
    CAPTURE(r.name);
    CHECK(names.insert(r.name).second);
    CHECK(r.min <= r.max);
    CHECK(r.accepts(r.get(defaults)));
    CHECK(&internal::option_range(r.name) == &r);
    Options o;
    r.set(o, r.min);
    CHECK(r.get(o) == r.min);
  }
  CHECK(internal::options_problem(defaults).empty());
  CHECK_THROWS_AS(internal::option_range("max_limiter"), std::logic_error);
}

TEST_CASE("The Engine accepts each option's range and refuses just outside it, as the table says") {
  for (const OptionRange& r : kOptionRanges) {
    CAPTURE(r.name);
    const std::string refused = "ratewin::Options: " + r.problem();
    Options o;
    r.set(o, r.min);
    CHECK(engine_says(o).empty());
    r.set(o, below(r));
    CHECK(r.accepts(below(r)) == (r.zero_too && below(r) == 0));
    if (!r.accepts(below(r))) CHECK(engine_says(o) == refused);
    if (std::isfinite(r.max)) {
      r.set(o, r.max);
      CHECK(engine_says(o).empty());
      r.set(o, above(r));
      CHECK(engine_says(o) == refused);
    }
    if (r.zero_too) {
      r.set(o, 0);
      CHECK(engine_says(o).empty());
    }
  }
  // The messages users have always read.
  Options o;
  o.max_limiters = 0;
  CHECK(engine_says(o) == "ratewin::Options: max_limiters must be at least 1");
  o = Options{};
  o.flush_interval = std::chrono::milliseconds(1001);
  CHECK(engine_says(o) ==
        "ratewin::Options: flush_interval must be 0 (chosen per window) or between 1 ms and 1 s");
  o = Options{};
  o.partition_share = std::nan("");
  CHECK(engine_says(o) == "ratewin::Options: partition_share must be between 0.01 and 1000");
  o = Options{};
  o.key_prefix = "a{b";
  CHECK(engine_says(o) == "ratewin::Options: key_prefix must not contain '{' or '}'");
  o = Options{};
  o.write_mode = static_cast<WriteMode>(7);
  CHECK(engine_says(o) == "ratewin::Options: write_mode must be WriteMode::sync or WriteMode::batched");
  o = Options{};
  o.partitioned_unknown = FailurePolicy::open;
  CHECK(engine_says(o) ==
        "ratewin::Options: partitioned_unknown must be FailurePolicy::local or "
        "FailurePolicy::closed");
}

TEST_CASE("Each enum's names name every value once, and read back to it") {
  const auto round_trip = [](auto names, int count) {
    std::set<std::string_view> seen;
    for (int i = 0; i < count; ++i) {
      using E = decltype(names[0].value);
      const auto value = static_cast<E>(i);
      const std::string_view name = internal::name_of(names, value);
      CAPTURE(name);
      CHECK(!name.empty());
      CHECK(seen.insert(name).second);
      CHECK(internal::parse_name(names, name) == value);
    }
    CHECK(names.size() == static_cast<std::size_t>(count));
    CHECK(!internal::parse_name(names, "").has_value());
  };
  round_trip(std::span<const internal::Named<FailurePolicy>>(internal::kFailurePolicyNames), 4);
  round_trip(std::span<const internal::Named<WriteMode>>(internal::kWriteModeNames), 2);
  round_trip(std::span<const internal::Named<LogLevel>>(internal::kLogLevelNames), 4);
  round_trip(std::span<const internal::Named<TlsVerify>>(internal::kTlsVerifyNames), 3);
  CHECK(internal::name_of(FailurePolicy::partitioned) == "partitioned");
  CHECK(internal::choices<TlsVerify>(internal::kTlsVerifyNames) == "full, ca or none");
  CHECK(internal::choices<FailurePolicy>(internal::kFailurePolicyNames, "'", ", ") ==
        "'local', 'open', 'closed', 'partitioned'");
  CHECK(internal::choices(internal::kTlsVersions, "'") == "'1.2' or '1.3'");
}

}  // namespace ratewin::test
