#include "service/limit_response.h"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <string>

#include "ratewin_internal/rate_limit_headers.h"

namespace ratewin::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// The response LimitResponses writes for one refused limit.
Response refusal(nanoseconds retry_after, std::uint64_t cost = 1, bool degraded = false) {
  static const LimitRule rule{"tier:free/per-second", Limit(5, seconds(1)), Scope::key, 1, true};
  Match match;
  match.limits = {&rule};
  const std::array<Acquisition, 1> items{Acquisition{42, rule.limit, cost}};
  Decision d;
  d.limit = 5;
  d.reset_after = milliseconds(992);
  d.retry_after = retry_after;
  d.degraded = degraded;
  LimitOutcome outcome;
  outcome.degraded = degraded;
  LimitResponses responses;
  Response r;
  responses.write(1, match, items, std::span<const Decision>(&d, 1), outcome, r);
  return r;
}

TEST_CASE("a refusal's body names the limit and the wait in seconds, to the ms, rounded up") {
  const auto body = [](nanoseconds wait) { return refusal(wait).body; };
  CHECK(body(milliseconds(912)) ==
        "{\"error\":\"rate limited\",\"limit\":\"tier:free/per-second\",\"retry_after_s\":0.912}\n");
  CHECK(body(nanoseconds(911'000'001)).find("\"retry_after_s\":0.912}") != std::string::npos);
  CHECK(body(nanoseconds(1)).find("\"retry_after_s\":0.001}") != std::string::npos);
  CHECK(body(milliseconds(100)).find("\"retry_after_s\":0.1}") != std::string::npos);
  CHECK(body(milliseconds(1'020)).find("\"retry_after_s\":1.02}") != std::string::npos);
  CHECK(body(seconds(2)).find("\"retry_after_s\":2}") != std::string::npos);
  CHECK(body(seconds(3600) + milliseconds(5)).find("\"retry_after_s\":3600.005}") !=
        std::string::npos);
  CHECK(refusal(milliseconds(912)).status == 429);
}

TEST_CASE("a request costing more than the limit's max is told so, with no wait") {
  const Response r = refusal(Decision::kNever, 7);
  CHECK(r.status == 429);
  CHECK(r.body ==
        "{\"error\":\"cost exceeds limit\",\"limit\":\"tier:free/per-second\",\"max\":5,"
        "\"cost\":7,\"retry_after_s\":null}\n");
  CHECK(r.fields.find("Retry-After") == std::string::npos);
}

TEST_CASE("RateLimit-Policy is a quota per window whatever the limit's algorithm") {
  // Every algorithm admits at most max per window (a fixed_window's windows are aligned):
  // q and w describe each of them. A fixed_window's one subinterval changes nothing.
  for (const Algorithm algorithm :
       {Algorithm::sliding_window, Algorithm::strict_window, Algorithm::fixed_window}) {
    CAPTURE(algorithm_name(algorithm));
    const LimitRule rule{"tier:free/per-minute",
                         Limit(5, std::chrono::minutes(1)).with_algorithm(algorithm), Scope::key, 1,
                         true};
    Match match;
    match.limits = {&rule};
    const std::array<Acquisition, 1> items{Acquisition{42, rule.limit, 1}};
    Decision d;
    d.allowed = true;
    d.limit = 5;
    d.remaining = 4;
    d.reset_after = seconds(60);
    LimitOutcome outcome;
    outcome.allowed = true;
    LimitResponses responses;
    Response r;
    responses.write(1, match, items, std::span<const Decision>(&d, 1), outcome, r);
    CHECK(r.fields.find("\r\nRateLimit-Policy: \"tier:free/per-minute\";q=5;w=60\r\n") !=
          std::string::npos);
    CHECK(r.fields.find("\r\nRateLimit: \"tier:free/per-minute\";r=4;t=60") != std::string::npos);
  }
}

TEST_CASE("limits in shadow are left out of the headers unless the rules ask for them") {
  const LimitRule shadow{"tier:free/new", Limit(2, seconds(1)).with_mode(Mode::shadow),
                         Scope::key, 1, true};
  const LimitRule enforced{"tier:free/old", Limit(10, seconds(1)), Scope::key, 1, true};
  Match match;
  match.limits = {&shadow, &enforced};
  const std::array<Acquisition, 2> items{Acquisition{1, shadow.limit, 1},
                                         Acquisition{2, enforced.limit, 1}};
  std::array<Decision, 2> decisions{};
  decisions[0].allowed = true;
  decisions[0].would_reject = true;
  decisions[0].limit = 2;
  decisions[0].retry_after = milliseconds(400);
  decisions[1].allowed = true;
  decisions[1].limit = 10;
  decisions[1].remaining = 6;
  const auto write = [&](std::span<const Acquisition> asked, bool shadow_headers) {
    const LimitOutcome outcome =
        LimitStep::conclude(asked, std::span<const Decision>(decisions).first(asked.size()),
                            asked.size(), shadow_headers);
    LimitResponses responses;
    Response r;
    responses.write(1, match, asked, decisions, outcome, r);
    CHECK(r.status != 429);
    return r.fields;
  };
  // The enforcing limit is described, though the shadow one is closer to refusing.
  const std::string hidden = write(items, false);
  CHECK(hidden.find("X-RateLimit-Remaining: 6\r\n") != std::string::npos);
  CHECK(hidden.find("\r\nRateLimit-Policy: \"tier:free/old\";q=10;w=1\r\n") != std::string::npos);
  CHECK(hidden.find("tier:free/new") == std::string::npos);
  CHECK(hidden.find("Retry-After") == std::string::npos);
  // Asked for, the shadow limit is described as any other (a would-be refusal has 0 left).
  const std::string shown = write(items, true);
  CHECK(shown.find("X-RateLimit-Remaining: 0\r\n") != std::string::npos);
  CHECK(shown.find("\"tier:free/new\";q=2;w=1, \"tier:free/old\";q=10;w=1") != std::string::npos);
  // Only a shadow limit: no rate-limit headers at all.
  CHECK(write(std::span<const Acquisition>(items).first(1), false).empty());
}

TEST_CASE("RateLimit-Policy gives a token bucket's burst per the time it takes to refill it") {
  // q / w is the bucket's rate; w is whole seconds, rounded up.
  const auto policy = [](const Limit& rule_limit, const Limit& asked) {
    const LimitRule rule{"tier:api/rate", rule_limit, Scope::key, 1, true};
    Match match;
    match.limits = {&rule};
    const std::array<Acquisition, 1> items{Acquisition{42, asked, 1}};
    Decision d;
    d.allowed = true;
    d.limit = asked.burst();  // as the engine says: a token bucket's limit is its burst
    d.remaining = asked.burst() - 1;
    d.reset_after = nanoseconds(asked.emission_ns());
    LimitOutcome outcome;
    outcome.allowed = true;
    LimitResponses responses;
    Response r;
    responses.write(1, match, items, std::span<const Decision>(&d, 1), outcome, r);
    return r.fields;
  };
  const auto bucket = [](std::uint64_t max, milliseconds window, std::uint64_t burst) {
    return Limit(max, window).with_algorithm(Algorithm::token_bucket, burst);
  };
  const Limit api = bucket(600, std::chrono::minutes(1), 50);  // 50 refill in 5 s
  std::string fields = policy(api, api);
  CHECK(fields.find("\r\nRateLimit-Policy: \"tier:api/rate\";q=50;w=5\r\n") != std::string::npos);
  CHECK(fields.find("\r\nX-RateLimit-Limit: 50\r\n") != std::string::npos);
  CHECK(fields.find("\r\nRateLimit: \"tier:api/rate\";r=49;t=1") != std::string::npos);
  // Its burst left to be max: it refills in its window.
  const Limit full = bucket(600, std::chrono::minutes(1), 0);
  CHECK(policy(full, full).find(";q=600;w=60\r\n") != std::string::npos);
  // 3 refill in 300 ms, 25 in 2.5 s.
  CHECK(policy(bucket(10, seconds(1), 3), bucket(10, seconds(1), 3)).find(";q=3;w=1\r\n") !=
        std::string::npos);
  CHECK(policy(bucket(10, seconds(1), 25), bucket(10, seconds(1), 25)).find(";q=25;w=3\r\n") !=
        std::string::npos);
  // w is the limit's own, burst x interval / max, computed exactly: 3 per second with a
  // burst of 3 refill in 1 s, though the engine's refill (interval / max rounded up to a
  // whole nanosecond) takes 1,000,000,002 ns. (w was 2 here before the headers were
  // formatted once, as the Python middleware had it.)
  CHECK(policy(bucket(3, seconds(1), 3), bucket(3, seconds(1), 3)).find(";q=3;w=1\r\n") !=
        std::string::npos);
  // The limit asked for, as a multiplier scaled it, not the rule's.
  const Limit doubled = with_scaled_max(api, 1200);
  fields = policy(api, doubled);
  CHECK(fields.find(";q=100;w=5\r\n") != std::string::npos);
  CHECK(fields.find("\r\nX-RateLimit-Limit: 100\r\n") != std::string::npos);
}

TEST_CASE("w is exact where interval x burst exceeds 64 bits") {
  // (A year's interval with the largest max: 3.2e10 ms x 4.3e9.)
  const auto year = std::chrono::duration_cast<milliseconds>(std::chrono::days(366));
  CHECK(internal::policy_window_seconds(Limit(Limit::kMaxCount, year)) == 366U * 86'400U);
  CHECK(internal::policy_window_seconds(
            Limit(Limit::kMaxCount, year).with_algorithm(Algorithm::token_bucket, 4'294'967)) ==
        31'623U);  // 366 days x 4,294,967 / 4,294,967,295, rounded up
  CHECK(internal::policy_window_seconds(Limit(1, milliseconds(1))) == 1U);  // at least 1
}

TEST_CASE("a name's characters outside printable ASCII are one ? each in the IETF headers") {
  // é (2 bytes), € (3), 😀 (4): one "?" per character, as the Python middleware writes
  // them (each byte was one before the headers were formatted once); a byte that is not
  // UTF-8 (a stray 0xff, a sequence cut short) one each; the quote and the backslash
  // escaped. The JSON body keeps the name as it is.
  const LimitRule rule{"caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80 \"q\\ \xff\xe2\x82",
                       Limit(5, seconds(1)), Scope::key, 1, true};
  Match match;
  match.limits = {&rule};
  const std::array<Acquisition, 1> items{Acquisition{42, rule.limit, 1}};
  Decision d;
  d.limit = 5;
  d.reset_after = milliseconds(992);
  d.retry_after = milliseconds(912);
  LimitOutcome outcome;
  LimitResponses responses;
  Response r;
  responses.write(1, match, items, std::span<const Decision>(&d, 1), outcome, r);
  CHECK(r.fields.find("\r\nRateLimit-Policy: \"caf? ?? \\\"q\\\\ ???\";q=5;w=1\r\n") !=
        std::string::npos);
  CHECK(r.fields.find("\r\nRateLimit: \"caf? ?? \\\"q\\\\ ???\";r=0;t=1") != std::string::npos);
  CHECK(r.body.find("\"limit\":\"caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80 \\\"q\\\\ ") !=
        std::string::npos);
}

TEST_CASE("a request costing more than a token bucket's burst is told the burst") {
  const LimitRule rule{
      "tier:api/rate",
      Limit(600, std::chrono::minutes(1)).with_algorithm(Algorithm::token_bucket, 50), Scope::key,
      1, true};
  Match match;
  match.limits = {&rule};
  const std::array<Acquisition, 1> items{Acquisition{42, rule.limit, 60}};
  Decision d;
  d.limit = 50;
  d.remaining = 50;
  d.retry_after = Decision::kNever;
  LimitOutcome outcome;
  LimitResponses responses;
  Response r;
  responses.write(1, match, items, std::span<const Decision>(&d, 1), outcome, r);
  CHECK(r.status == 429);
  CHECK(r.body ==
        "{\"error\":\"cost exceeds limit\",\"limit\":\"tier:api/rate\",\"max\":50,"
        "\"cost\":60,\"retry_after_s\":null}\n");
}

TEST_CASE("a degraded refusal says so in the body and the headers") {
  const Response r = refusal(milliseconds(50), 1, true);
  CHECK(r.body.find(",\"degraded\":true}") != std::string::npos);
  CHECK(r.fields.find("\r\nX-RateLimit-Policy: degraded") != std::string::npos);
}

}  // namespace
}  // namespace ratewin::server
