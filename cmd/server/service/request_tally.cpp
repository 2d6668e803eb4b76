#include "service/request_tally.h"

#include "common/prometheus.h"
#include "common/text.h"

namespace ratewin::server {

namespace {

void bump(std::map<std::string, std::uint64_t, std::less<>>& by_rule, std::string_view rule) {
  auto it = by_rule.find(rule);
  if (it == by_rule.end()) it = by_rule.emplace(std::string(rule), 0).first;
  ++it->second;
}

}  // namespace

RequestTally::Counter::Counter(RequestTally& tally) : tally_(tally) { tally_.add(this); }

RequestTally::Counter::~Counter() { tally_.remove(this); }

void RequestTally::Counter::count(int status, std::string_view rule) {
  std::lock_guard lock(stats_.mutex);
  bump(stats_.requests[status], rule);
}

void RequestTally::Counter::shadow_refusal(std::string_view rule) {
  std::lock_guard lock(stats_.mutex);
  bump(stats_.shadow_refusals, rule);
}

void RequestTally::Counter::latency(std::chrono::steady_clock::duration elapsed) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  const double seconds = static_cast<double>(ns) / 1e9;
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  stats_.latency[bucket].fetch_add(1, std::memory_order_relaxed);
  stats_.latency_sum_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
}

void RequestTally::add(Counter* counter) {
  std::lock_guard lock(counters_mutex_);
  counters_.push_back(counter);
}

void RequestTally::remove(Counter* counter) {
  std::lock_guard lock(counters_mutex_);
  std::erase(counters_, counter);
  // Its counts live on: counters never go down.
  const Stats& stats = counter->stats_;
  std::scoped_lock both(stats.mutex, retired_.mutex);
  for (const auto& [status, by_rule] : stats.requests)
    for (const auto& [rule, n] : by_rule) retired_.requests[status][rule] += n;
  for (const auto& [rule, n] : stats.shadow_refusals) retired_.shadow_refusals[rule] += n;
  for (std::size_t i = 0; i < stats.latency.size(); ++i)
    retired_.latency[i].fetch_add(stats.latency[i].load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
  retired_.latency_sum_ns.fetch_add(stats.latency_sum_ns.load(std::memory_order_relaxed),
                                    std::memory_order_relaxed);
}

RequestTally::Counts RequestTally::counts() const {
  Counts c;
  std::lock_guard lock(counters_mutex_);
  std::vector<const Stats*> all;
  all.reserve(counters_.size() + 1);
  for (const Counter* counter : counters_) all.push_back(&counter->stats_);
  all.push_back(&retired_);
  for (const Stats* w : all) {
    {
      std::lock_guard wl(w->mutex);
      for (const auto& [status, by_rule] : w->requests)
        for (const auto& [rule, n] : by_rule) c.requests[{status, rule}] += n;
      for (const auto& [rule, n] : w->shadow_refusals) c.shadow_refusals[rule] += n;
    }
    for (std::size_t i = 0; i < c.latency.size(); ++i)
      c.latency[i] += w->latency[i].load(std::memory_order_relaxed);
    c.latency_sum_ns += w->latency_sum_ns.load(std::memory_order_relaxed);
  }
  return c;
}

void RequestTally::sample_rates(std::chrono::steady_clock::time_point now) {
  RateSample sample;
  sample.at = now;
  const Counts c = counts();
  for (const auto& [key, n] : c.requests) {
    if (key.first == 200) sample.by_rule[key.second].first += n;
    if (key.first == 429) sample.by_rule[key.second].second += n;
  }
  std::lock_guard lock(rates_mutex_);
  rate_samples_.push_back(std::move(sample));
  while (rate_samples_.size() > kRateSamples) rate_samples_.pop_front();
}

RequestTally::RateSample RequestTally::oldest_sample() const {
  std::lock_guard lock(rates_mutex_);
  return rate_samples_.empty() ? RateSample{} : rate_samples_.front();
}

void write_request_metrics(PrometheusText& out, const RequestTally& tally) {
  const RequestTally::Counts counts = tally.counts();
  out.family("ratewin_server_requests_total", "counter",
             "Requests answered, by status and by the rule that decided (the refusing limit for "
             "429; the limit closest to refusing for 200; allow, deny, none, admin, not-a-check "
             "(--mode forward-auth) or no-rules (no --rules) otherwise).");
  for (const auto& [k, v] : counts.requests) {
    std::string labels = "status=\"" + std::to_string(k.first) + "\",";
    append_label(labels, "rule", k.second);
    out.sample(labels, as_sample(v));
  }
  out.family("ratewin_server_shadow_refusals_total", "counter",
             "Requests a limit in shadow (mode: shadow) would have refused, by its rule: they "
             "were allowed.");
  for (const auto& [rule, n] : counts.shadow_refusals) {
    std::string labels;
    append_label(labels, "rule", rule);
    out.sample(labels, as_sample(n));
  }
  out.family("ratewin_server_decision_seconds", "histogram",
             "Time taken by the engine to decide a rate-limited request (all its limits).");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < counts.latency.size(); ++i) {
    cumulative += counts.latency[i];
    std::string le = "le=\"";
    if (i < RequestTally::kLatencyBuckets.size()) {
      append_double(le, RequestTally::kLatencyBuckets[i]);
    } else {
      le += "+Inf";
    }
    le += '"';
    out.sample(le, as_sample(cumulative), "_bucket");
  }
  out.sample({}, static_cast<double>(counts.latency_sum_ns) / 1e9, "_sum");
  out.sample({}, as_sample(cumulative), "_count");
}

}  // namespace ratewin::server
