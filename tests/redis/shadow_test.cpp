// Shadow mode through Redis, shared by several engines: a limit in shadow decides and
// counts in the store as the same limit enforcing, for every algorithm (the store's own
// refusals included), a switch to enforce decides from those shared counts, and the
// failure policies apply to it as to any limit.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "eventually.h"
#include "ratewin/engine.h"
#include "redis_server.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

Options options_for(const RedisServer& redis) {
  Options o;
  o.redis = redis.url();
  o.key_prefix = "shadow";
  o.connect_timeout = 1s;
  o.command_timeout = 1s;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

TEST_CASE("a limit in shadow counts in Redis as the same limit enforcing, on every algorithm") {
  RedisServer redis;
  REQUIRE(redis.start());
  // Long windows: the engines' clocks do not move anything on during the test, so both
  // limits see the same traffic at the same state.
  const std::vector<Limit> limits = {
      Limit(5, 1h),
      Limit(5, 1h).with_algorithm(Algorithm::strict_window),
      Limit(5, 1h).with_algorithm(Algorithm::fixed_window),
      Limit(5, 1h).with_algorithm(Algorithm::token_bucket),
      Limit(5, 1h).with_algorithm(Algorithm::sliding_log),
  };
  Engine a(options_for(redis));
  Engine b(options_for(redis));
  REQUIRE(eventually([&] { return a.stats().store_available && b.stats().store_available; }));
  for (const Limit& enforcing : limits) {
    CAPTURE(enforcing.to_string());
    const Limit shadow = enforcing.with_mode(Mode::shadow);
    const std::string name = algorithm_name(enforcing.algorithm());
    int would_reject = 0;
    // The engines take turns: each learns the other's admissions from the store (a
    // refusal by the store's counts, for the one that did not see them yet).
    for (int i = 0; i < 12; ++i) {
      Engine& engine = i % 3 == 0 ? b : a;
      const Decision e = engine.try_acquire("enforced-" + name, enforcing);
      const Decision s = engine.try_acquire("shadowed-" + name, shadow);
      REQUIRE_FALSE(e.degraded);
      REQUIRE_FALSE(s.degraded);
      CHECK(s.allowed);
      CHECK(s.would_reject == !e.allowed);
      CHECK(s.remaining == e.remaining);
      if (s.would_reject) ++would_reject;
    }
    CHECK(would_reject == 7);
    // A third engine reads both from the store: the same counts, and the shadow's, now
    // enforced, refuse as the enforcing limit does.
    Engine c(options_for(redis));
    REQUIRE(eventually([&] { return c.stats().store_available; }));
    const Decision e = c.try_acquire("enforced-" + name, enforcing);
    const Decision s = c.try_acquire("shadowed-" + name, shadow.with_mode(Mode::enforce));
    CHECK_FALSE(e.allowed);
    CHECK_FALSE(s.allowed);
    CHECK_FALSE(s.would_reject);
  }
  CHECK(a.stats().would_reject + b.stats().would_reject == 5 * 7);
}

TEST_CASE("a limit in shadow under the closed policy allows while Redis is away, and says so") {
  RedisServer redis;
  REQUIRE(redis.start());
  Engine engine(options_for(redis));
  REQUIRE(eventually([&] { return engine.stats().store_available; }));
  const Limit closed = Limit(100, 1s).with_failure_policy(FailurePolicy::closed);
  const Limit shadow = closed.with_mode(Mode::shadow);
  CHECK(engine.try_acquire("k", shadow).allowed);
  redis.stop();
  REQUIRE(eventually([&] { return engine.try_acquire("k", closed).degraded; }));
  const Decision d = engine.try_acquire("k", shadow);
  CHECK(d.allowed);
  CHECK(d.degraded);
  CHECK(d.would_reject);
  const Decision enforced = engine.try_acquire("k", closed);
  CHECK_FALSE(enforced.allowed);
  CHECK_FALSE(enforced.would_reject);
}

}  // namespace
}  // namespace ratewin::test
