#include "ratewin/decision.h"

#include <doctest/doctest.h>

#include <array>

#include "ratewin/engine.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

TEST_CASE("ceil_seconds rounds delays up to whole seconds") {
  CHECK(ceil_seconds(0ns) == 0);
  CHECK(ceil_seconds(-5s) == 0);
  CHECK(ceil_seconds(1ns) == 1);
  CHECK(ceil_seconds(1s) == 1);
  CHECK(ceil_seconds(1s + 1ns) == 2);
  CHECK(ceil_seconds(59999ms) == 60);
  CHECK(ceil_seconds(std::chrono::nanoseconds::max()) == 9'223'372'037);
}

TEST_CASE("headers of an allowed decision") {
  Decision d;
  d.allowed = true;
  d.limit = 100;
  d.remaining = 99;
  d.reset_after = 59'500ms;
  const std::vector<HeaderField> expected = {
      {"X-RateLimit-Limit", "100"}, {"X-RateLimit-Remaining", "99"}, {"X-RateLimit-Reset", "60"}};
  CHECK(headers(d) == expected);
}

TEST_CASE("headers of a rejected decision carry Retry-After, rounded up, at least 1") {
  Decision d;
  d.limit = 5;
  d.remaining = 0;
  d.reset_after = 10s;
  d.retry_after = 2'100ms;
  auto h = headers(d);
  REQUIRE(h.size() == 4);
  CHECK(h[3] == HeaderField{"Retry-After", "3"});
  d.retry_after = 1ns;
  CHECK(headers(d)[3] == HeaderField{"Retry-After", "1"});
  d.retry_after = 0ns;  // never produced by the engine, but never invites a retry storm
  CHECK(headers(d)[3] == HeaderField{"Retry-After", "1"});
  // A request that can never pass: retrying cannot help, so no Retry-After.
  d.retry_after = Decision::kNever;
  CHECK(headers(d).size() == 3);
}

TEST_CASE("numeric_headers are headers() as numbers") {
  Decision d;
  d.limit = 5;
  d.reset_after = 10s;
  std::array<NumericHeader, 4> out;
  for (const auto retry :
       {std::chrono::nanoseconds(2'100ms), std::chrono::nanoseconds(0), Decision::kNever}) {
    for (const bool allowed : {false, true}) {
      d.allowed = allowed;
      d.retry_after = allowed ? std::chrono::nanoseconds(0) : retry;
      const std::vector<HeaderField> text = headers(d);
      REQUIRE(numeric_headers(d, out) == text.size());
      for (std::size_t i = 0; i < text.size(); ++i) {
        CHECK(out[i].name == text[i].name);
        CHECK(std::to_string(out[i].value) == text[i].value);
      }
    }
  }
}

TEST_CASE("headers follow the engine's decisions") {
  auto clock = std::make_shared<ManualClock>(1'700'000'000s);
  Options o;
  o.clock = clock;
  Engine engine(o);
  const Limit limit(2, 10s, 1s);
  CHECK(headers(engine.try_acquire("k", limit))[1].value == "1");
  CHECK(headers(engine.try_acquire("k", limit))[1].value == "0");
  const auto rejected = headers(engine.try_acquire("k", limit));
  REQUIRE(rejected.size() == 4);
  // Both counts sit in the first subinterval, which leaves the window entirely 11 s on
  // (it is the trailing subinterval from 10 s to 11 s, its weight falling linearly), and
  // half of it has left at 10.5 s, when one more unit fits.
  CHECK(rejected[2] == HeaderField{"X-RateLimit-Reset", "11"});
  CHECK(rejected[3] == HeaderField{"Retry-After", "11"});
}

}  // namespace
}  // namespace ratewin::test
