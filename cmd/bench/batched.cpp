// ratewin-bench batched: what batched write mode costs against sync mode, in one run on a
// private redis-server: the allowed path's latency against a local engine's admission, the
// Redis commands per second at two request rates ten times apart, and Redis' CPU per
// admitted request.
#include <cxxopts.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "ratewin/engine.h"
#include "redis_bench.h"
#include "redis_server.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

Options store_options(const std::string& url, const std::string& prefix, WriteMode mode,
                      std::chrono::milliseconds flush) {
  Options o;
  o.redis = url;
  o.key_prefix = prefix;
  o.write_mode = mode;
  o.flush_interval = flush;
  o.command_timeout = 1s;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

// Waits until the engine has read the live count (batched mode starts then).
void wait_live(const Engine& engine) {
  const auto until = Steady::now() + 10s;
  while (engine.stats().live_nodes == 0 && Steady::now() < until) std::this_thread::sleep_for(10ms);
}

// The median and 99th percentile of `n` admissions (each timed), over `resources`.
std::pair<double, double> admission_ns(Engine& engine, const std::vector<std::string>& resources,
                                       const Limit& limit, int n) {
  std::vector<double> ns;
  ns.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::string& r = resources[static_cast<std::size_t>(i) % resources.size()];
    const auto t0 = Steady::now();
    const Decision d = engine.try_acquire(r, limit);
    ns.push_back(std::chrono::duration<double, std::nano>(Steady::now() - t0).count());
    keep(d);
  }
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 99 / 100]};
}

// Offers `rate` requests per second, spread over `resources`, for `duration`, in steps of
// a millisecond. Returns how many were admitted.
std::uint64_t paced(Engine& engine, const std::vector<std::string>& resources, const Limit& limit,
                    double rate, std::chrono::milliseconds duration) {
  std::uint64_t admitted = 0;
  std::size_t next = 0;
  const auto begin = Steady::now();
  double owed = 0;
  for (auto tick = begin; tick - begin < duration; tick += 1ms) {
    std::this_thread::sleep_until(tick);
    owed += rate / 1000.0;
    for (; owed >= 1; owed -= 1) {
      if (engine.try_acquire(resources[next++ % resources.size()], limit).allowed) ++admitted;
    }
  }
  return admitted;
}

}  // namespace

int run_batched(const cxxopts::ParseResult& /*args*/) {
  test::RedisServer redis;  // (its own: the figures are the server's counters)
  const std::string url = redis.url();
  const Limit limit(Limit::kMaxCount, 60s, 6s);  // never the reason for a refusal
  std::printf("ratewin-bench batched: write modes against each other, limit %s, Redis %s\n\n",
              limit.to_string().c_str(), url.c_str());

  // ---- the allowed path: a local engine, batched and sync, on 100 limiters ----
  std::vector<std::string> hot;
  for (int i = 0; i < 100; ++i) hot.push_back("hot" + std::to_string(i));
  Engine local;
  Engine batched(store_options(url, "cost-b", WriteMode::batched, 0ms));
  Engine sync(store_options(url, "cost-s", WriteMode::sync, 0ms));
  wait_live(batched);
  for (const std::string& r : hot) {  // warm: every limiter's first write is made
    (void)local.try_acquire(r, limit);
    (void)batched.try_acquire(r, limit);
    (void)sync.try_acquire(r, limit);
  }
  std::vector<double> local50, batched50, batched99, sync50;
  for (int round = 0; round < 5; ++round) {
    local50.push_back(admission_ns(local, hot, limit, 20'000).first);
    const auto [b50, b99] = admission_ns(batched, hot, limit, 20'000);
    batched50.push_back(b50);
    batched99.push_back(b99);
    sync50.push_back(admission_ns(sync, hot, limit, 2'000).first);
  }
  std::vector<double> ratio_b, ratio_s;
  for (std::size_t i = 0; i < local50.size(); ++i) {
    ratio_b.push_back(batched50[i] / local50[i]);
    ratio_s.push_back(sync50[i] / local50[i]);
  }
  std::printf("allowed path, p50 (5 rounds, medians)      %10s %12s\n", "ns", "x local");
  std::printf("  local engine                             %10.0f %12s\n", median(local50), "1.00");
  std::printf("  batched (p99 %.0f ns)                  %10.0f %12.2f\n", median(batched99),
              median(batched50), median(ratio_b));
  std::printf("  sync (one round trip)                    %10.0f %12.0f\n", median(sync50),
              median(ratio_s));
  std::printf("target: batched at most 3x the local engine's admission (%s)\n\n",
              verdict(median(ratio_b) <= 3).c_str());

  // ---- Redis commands per second: two request rates ten times apart ----
  const std::vector<std::string> limiters(hot.begin(), hot.begin() + 50);
  const auto processed = [&] { return redis.info_number("stats", "total_commands_processed"); };
  std::printf("Redis commands per second, 50 limiters, flush interval 20 ms (at most 50 x 50 = "
              "2500 limiter flushes a second, of a BITFIELD and a GETEX each, pipelined), 3 s "
              "each\n");
  std::printf("  %-28s %12s %14s %14s\n", "mode", "requests/s", "admitted", "commands/s");
  double batched_low = 0;
  double batched_high = 0;
  for (const WriteMode mode : {WriteMode::batched, WriteMode::sync}) {
    for (const double rate : {10'000.0, 100'000.0}) {
      if (mode == WriteMode::sync && rate > 10'000) continue;  // (one round trip each)
      static int run = 0;
      Engine engine(store_options(url, "rate" + std::to_string(++run), mode, 20ms));
      wait_live(engine);
      for (const std::string& r : limiters) (void)engine.try_acquire(r, limit);
      const long long before = processed();
      const std::uint64_t admitted = paced(engine, limiters, limit, rate, 3000ms);
      const double per_second = static_cast<double>(processed() - before - 1) / 3.0;
      std::printf("  %-28s %12.0f %14llu %14.0f\n", mode == WriteMode::batched ? "batched" : "sync",
                  rate, static_cast<unsigned long long>(admitted), per_second);
      if (mode == WriteMode::batched) (rate < 50'000 ? batched_low : batched_high) = per_second;
    }
  }
  std::printf("target: batched commands per second independent of the request rate "
              "(%.0f at 100,000/s over %.0f at 10,000/s: %.2f)\n\n",
              batched_high, batched_low, batched_low > 0 ? batched_high / batched_low : 0.0);

  // ---- Redis CPU per admitted request: 100 admissions per limiter per flush ----
  {
    std::printf("Redis CPU per admitted request, 50 limiters: the write commands' own time "
                "(INFO commandstats) and the process's (user + system, with its network I/O)\n");
    for (const WriteMode mode : {WriteMode::batched, WriteMode::sync}) {
      static int run = 0;
      // Batched: flushes every 100 ms, 100 admissions per limiter between them (50,000/s).
      Engine engine(store_options(url, "cpu" + std::to_string(++run), mode, 100ms));
      wait_live(engine);
      for (const std::string& r : limiters) (void)engine.try_acquire(r, limit);
      const RedisCpu cpu(redis);
      const double rate = mode == WriteMode::batched ? 50'000.0 : 5'000.0;
      const std::uint64_t admitted = paced(engine, limiters, limit, rate, 3000ms);
      (void)engine.flush();
      const double commands =
          double(RedisCpu::usec(cpu.since(kWriteCommands))) / static_cast<double>(admitted);
      const double process = cpu.process_cpu().front() / static_cast<double>(admitted);
      std::printf("  %-10s %8.0f requests/s: commands %8.3f us, process %8.3f us per admitted "
                  "request\n",
                  mode == WriteMode::batched ? "batched" : "sync", rate, commands, process);
      if (mode == WriteMode::batched)
        std::printf("  target: commands at most 0.05 us (%s)\n", verdict(commands <= 0.05).c_str());
    }
  }
  return 0;
}

}  // namespace ratewin::bench
