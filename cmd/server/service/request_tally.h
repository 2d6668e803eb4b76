// What the server's requests came to, counted by each handler (one per loop thread) and
// merged for /metrics and the status page: requests by status and rule, would-be refusals
// of limits in shadow by rule, the decision latency histogram; and the samples the status
// page's rates come from.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratewin::server {

class PrometheusText;

class RequestTally {
 public:
  static constexpr std::array<double, 14> kLatencyBuckets = {
      1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 5e-2, 1e-1};
  // sample_rates() keeps the counts of its last this many calls.
  static constexpr std::size_t kRateSamples = 11;

 private:
  struct Stats {
    mutable std::mutex mutex;  // for `requests`; uncontended but for scrapes
    std::map<int, std::map<std::string, std::uint64_t, std::less<>>> requests;  // status, rule
    // Requests a limit in shadow would have refused, by its rule.
    std::map<std::string, std::uint64_t, std::less<>> shadow_refusals;
    std::array<std::atomic<std::uint64_t>, kLatencyBuckets.size() + 1> latency{};
    std::atomic<std::uint64_t> latency_sum_ns{0};
  };

 public:
  RequestTally() = default;
  RequestTally(const RequestTally&) = delete;
  RequestTally& operator=(const RequestTally&) = delete;

  // One handler's counts, written by its thread only. Part of the tally while it lives;
  // what it counted stays in the tally after it (counters never go down).
  class Counter {
   public:
    explicit Counter(RequestTally& tally);
    ~Counter();
    Counter(const Counter&) = delete;
    Counter& operator=(const Counter&) = delete;

    // A request answered `status`, decided by `rule`.
    void count(int status, std::string_view rule);
    // A limit in shadow (its rule) would have refused a request.
    void shadow_refusal(std::string_view rule);
    // A rate-limited request's decision took `elapsed`.
    void latency(std::chrono::steady_clock::duration elapsed);

   private:
    friend class RequestTally;
    RequestTally& tally_;
    Stats stats_;
  };

  // What every handler has counted, merged. Thread-safe.
  struct Counts {
    std::map<std::pair<int, std::string>, std::uint64_t> requests;  // status, rule
    std::map<std::string, std::uint64_t> shadow_refusals;           // rule
    std::array<std::uint64_t, kLatencyBuckets.size() + 1> latency{};
    std::uint64_t latency_sum_ns = 0;
  };
  Counts counts() const;

  // The requests' counts now, kept (the last kRateSamples calls); the control loop calls it
  // every second, so that the status page gives each rule's allowed and refused rates over
  // the last 10 s. Thread-safe.
  void sample_rates(std::chrono::steady_clock::time_point now);
  // A sample: by rule, requests allowed (200) and refused (429).
  struct RateSample {
    std::chrono::steady_clock::time_point at;  // none taken: the epoch
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>, std::less<>> by_rule;
  };
  // The oldest sample kept (up to 10 s old). Thread-safe.
  RateSample oldest_sample() const;

 private:
  void add(Counter* counter);
  void remove(Counter* counter);

  mutable std::mutex counters_mutex_;
  std::vector<Counter*> counters_;
  Stats retired_;  // what counters that ended had counted
  mutable std::mutex rates_mutex_;
  std::deque<RateSample> rate_samples_;  // oldest first
};

// The requests' families of /metrics: requests by status and rule, shadow refusals by
// rule, the decision latency histogram.
void write_request_metrics(PrometheusText& out, const RequestTally& tally);

}  // namespace ratewin::server
