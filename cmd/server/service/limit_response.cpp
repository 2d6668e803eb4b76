#include "service/limit_response.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

#include "common/json_writer.h"
#include "common/text.h"
#include "ratewin_internal/rate_limit_headers.h"

namespace ratewin::server {

namespace {

// Seconds with millisecond precision, rounded up, in the shortest form ("0.91", "2").
void append_seconds(std::string& out, std::chrono::nanoseconds d) {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.count()));
  const std::uint64_t ms = ns / 1'000'000 + (ns % 1'000'000 != 0 ? 1 : 0);
  append_number(out, ms / 1000);
  const std::uint64_t fraction = ms % 1000;
  if (fraction == 0) return;
  char digits[4] = {'.', static_cast<char>('0' + fraction / 100),
                    static_cast<char>('0' + fraction / 10 % 10), static_cast<char>('0' + fraction % 10)};
  std::size_t n = 4;
  while (digits[n - 1] == '0') --n;
  out.append(digits, n);
}

}  // namespace

const LimitResponses::RuleText& LimitResponses::text(const LimitRule& rule) {
  // A request's limits are mostly one rule, asked for twice: the last one is at hand.
  if (&rule == last_rule_) return *last_text_;
  const auto [it, added] = texts_.try_emplace(&rule);
  last_rule_ = &rule;
  last_text_ = &it->second;  // (a map's elements stay where they are)
  RuleText& t = it->second;
  if (!added) return t;
  internal::append_policy_head(t.policy_head, rule.name);
  internal::append_rate_limit_head(t.state_head, rule.name);
  // The 429 bodies' first members, up to the value a refusal adds (write() goes on).
  JsonWriter(t.refusal_head)
      .begin_object()
      .key("error")
      .string("rate limited")
      .key("limit")
      .string(rule.name)
      .key("retry_after_s");
  JsonWriter(t.excess_head)
      .begin_object()
      .key("error")
      .string("cost exceeds limit")
      .key("limit")
      .string(rule.name)
      .key("max");
  return t;
}

void LimitResponses::write(std::uint64_t rules_generation, const Match& match,
                           std::span<const Acquisition> items, std::span<const Decision> decisions,
                           const LimitOutcome& outcome, Response& response) {
  if (rules_generation != texts_generation_) {
    texts_.clear();
    last_rule_ = nullptr;
    texts_generation_ = rules_generation;
  }
  const Decision& d = decisions[outcome.shown];
  // Written straight into the response's formatted fields: no allocation once its room
  // has grown.
  std::string& h = response.fields;
  if (!outcome.headers) {  // only limits in shadow, which the client is not told of
    if (outcome.degraded) h += "\r\nX-RateLimit-Policy: degraded";
    return;
  }
  std::array<NumericHeader, 4> numeric;
  const std::size_t n = numeric_headers(d, numeric);
  for (std::size_t i = 0; i < n; ++i) {
    h += "\r\n";
    h += numeric[i].name;
    h += ": ";
    append_number(h, numeric[i].value);
  }
  h += "\r\nRateLimit-Policy: ";
  bool first = true;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!outcome.described(items, i)) continue;
    const RuleText& t = text(*match.limits[i]);
    if (!first) h += ", ";
    first = false;
    // From the limit asked for, which a multiplier may have scaled: q is the most it
    // admits at once (a token bucket's burst, else max), per w seconds.
    h += t.policy_head;
    internal::append_policy_quota(h, items[i].limit.burst(),
                                  internal::policy_window_seconds(items[i].limit));
  }
  const RuleText& shown = text(*match.limits[outcome.shown]);
  h += "\r\nRateLimit: ";
  h += shown.state_head;
  // (A degraded decision is said in X-RateLimit-Policy, below.)
  internal::append_rate_limit_state(h, d.remaining, ceil_seconds(d.reset_after), false);
  if (outcome.degraded) h += "\r\nX-RateLimit-Policy: degraded";
  if (outcome.allowed) return;

  response.status = 429;
  std::string& b = response.body;
  JsonWriter body(b, JsonWriter::Continuing{});
  if (d.can_ever_pass()) {
    b = shown.refusal_head;
    append_seconds(b, d.retry_after);
  } else {  // the request costs more than the limit allows: retrying cannot help
    const Acquisition& item = items[outcome.shown];
    b = shown.excess_head;
    append_number(b, item.limit.burst());  // the most a request may cost
    body.key("cost").number(item.cost).key("retry_after_s").null();
  }
  if (outcome.degraded) body.key("degraded").boolean(true);
  body.end_object();
  b += '\n';
}

void LimitResponses::uncounted(Action action, Response& response) {
  response.headers.emplace_back("X-RateLimit-Policy",
                                action == Action::allow ? "allow-list" : "none");
}

}  // namespace ratewin::server
