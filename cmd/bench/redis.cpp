// ratewin-bench redis: the Redis-backed paths against baselines in the same run.
#include <hiredis/hiredis.h>
#include <cxxopts.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include "bench.h"
#include "engine/engine_core.h"
#include "redis/loop_thread.h"
#include "ratewin/engine.h"
#include "redis_server.h"
#include "redis/redis_store.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

struct Latencies {
  std::vector<double> ns;  // every call of every thread
  double wall_ns = 0;
  double p(double q) {
    std::sort(ns.begin(), ns.end());
    return ns.empty() ? 0 : ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))];
  }
  double throughput() const { return static_cast<double>(ns.size()) / (wall_ns / 1e9); }
};

// Runs `call(thread)` on `threads` threads for `duration`, timing every call.
template <class Call>
Latencies measure_calls(int threads, std::chrono::milliseconds duration, Call call) {
  std::vector<std::vector<double>> per(static_cast<std::size_t>(threads));
  Latencies out;
  out.wall_ns = run_threads(threads, 0, [&](int t, std::uint64_t) {
    auto& mine = per[static_cast<std::size_t>(t)];
    const auto end = Steady::now() + duration;
    while (Steady::now() < end) {
      const auto t0 = Steady::now();
      call(t);
      mine.push_back(std::chrono::duration<double, std::nano>(Steady::now() - t0).count());
    }
  });
  for (auto& p : per) out.ns.insert(out.ns.end(), p.begin(), p.end());
  return out;
}

redisContext* connect(const test::RedisServer& redis) {
  redisContext* c = redisConnect("127.0.0.1", redis.port());
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect to the bench's Redis");
  return c;
}

std::string load_script(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %s", detail::kWriteScript));
  std::string sha(r->str, r->len);
  freeReplyObject(r);
  return sha;
}

}  // namespace

int run_redis(const cxxopts::ParseResult& args) {
  (void)args;
  test::RedisServer redis;
  const auto quiet = [](LogLevel, std::string_view) {};
  std::printf("ratewin-bench redis: a private redis-server on 127.0.0.1:%d (loopback)\n\n",
              redis.port());

  // ---- allowed path: engine vs raw hiredis running the same script, one round trip ----
  std::printf("allowed path (every call writes), %s\n", "2 s per case, rounds interleaved");
  std::printf("%-10s %8s %10s %10s %12s %10s %10s %12s %8s %8s\n", "threads", "", "raw p50 us",
              "raw p99 us", "raw calls/s", "p50 us", "p99 us", "calls/s", "x p50", "x calls");
  Options o;
  o.redis = redis.url();
  o.key_prefix = "bench";
  o.logger = quiet;
  Engine engine(o);
  const Limit unlimited(Limit::kMaxCount, 60s, 5s);  // N = 12, never full
  std::vector<std::string> names;
  for (int t = 0; t < 8; ++t) names.push_back("allow:" + std::to_string(t));
  for (const int threads : {1, 2, 8}) {
    // Raw: per thread a blocking hiredis connection running the write script with the
    // arguments the engine sends.
    std::vector<redisContext*> contexts;
    for (int t = 0; t < threads; ++t) contexts.push_back(connect(redis));
    const std::string sha = load_script(contexts.front());  // Redis keeps it for all
    std::vector<double> raw50, raw99, rawtp, eng50, eng99, engtp;
    for (int round = 0; round < 3; ++round) {
      Latencies raw = measure_calls(threads, 700ms, [&](int t) {
        auto* r = static_cast<redisReply*>(redisCommand(
            contexts[static_cast<std::size_t>(t)],
            "EVALSHA %s 1 bench:{raw%d}:5000x12 %lld 1 75000 64 12 4294967295 1048576", sha.c_str(),
            t, static_cast<long long>(SystemClock::read() / 5'000'000'000 % 64)));
        freeReplyObject(r);
      });
      Latencies mine = measure_calls(threads, 700ms, [&](int t) {
        keep(engine.try_acquire(names[static_cast<std::size_t>(t)], unlimited));
      });
      raw50.push_back(raw.p(0.5));
      raw99.push_back(raw.p(0.99));
      rawtp.push_back(raw.throughput());
      eng50.push_back(mine.p(0.5));
      eng99.push_back(mine.p(0.99));
      engtp.push_back(mine.throughput());
    }
    for (auto* c : contexts) redisFree(c);
    std::printf("%-10d %8s %10.1f %10.1f %12.0f %10.1f %10.1f %12.0f %8.2f %8.2f\n", threads, "",
                median(raw50) / 1e3, median(raw99) / 1e3, median(rawtp), median(eng50) / 1e3,
                median(eng99) / 1e3, median(engtp), median(eng50) / median(raw50),
                median(engtp) / median(rawtp));
  }
  const Stats after_writes = engine.stats();
  std::printf(
      "  (targets: p50 within 1.15x of raw, throughput at least 0.85x of raw; engine's own"
      " write p50/p99 from its stats: %.1f / %.1f us)\n",
      double(after_writes.write_p50.count()) / 1e3, double(after_writes.write_p99.count()) / 1e3);

  // ---- what funnelling writes through the loop thread would add ----
  {
    detail::LoopThread loop;
    Latencies handoff = measure_calls(1, 700ms, [&](int) {
      std::promise<void> done;
      loop.post([&] { done.set_value(); });
      done.get_future().wait();
    });
    Latencies rtt = measure_calls(1, 700ms, [&, c = connect(redis)](int) mutable {
      freeReplyObject(redisCommand(c, "PING"));
    });
    std::printf(
        "\nfunnel alternative: a hand-off to the loop thread and back costs %.1f us p50 (a PING"
        " round trip: %.1f us), i.e. +%.0f%% on every allowed request before any pipelining"
        " gain; per-thread pooled connections were chosen\n",
        handoff.p(0.5) / 1e3, rtt.p(0.5) / 1e3, 100 * handoff.p(0.5) / rtt.p(0.5));
  }

  // ---- rejected path: Redis mode vs local mode ----
  {
    Options local_options;
    local_options.logger = quiet;
    Engine local(local_options);
    // Saturated for the whole measurement (a minute's window): every call is a rejection.
    const Limit strict(1000, 60s, 5s);
    keep(local.try_acquire(77, strict, strict.max()));
    keep(engine.try_acquire(77, strict, strict.max()));
    std::vector<Case> cases;
    auto hammer = [&](const char* name, Engine* e) {
      cases.push_back({name, 1, [e, limit = &strict](std::uint64_t n) {
                         return run_threads(1, n, [&](int, std::uint64_t k) {
                           std::uint64_t allowed = 0;
                           for (std::uint64_t i = 0; i < k; ++i)
                             allowed += e->try_acquire(77, *limit).allowed ? 1U : 0U;
                           keep(allowed);
                         });
                       }});
    };
    hammer("reject, hot resource, local engine", &local);
    hammer("reject, hot resource, Redis engine", &engine);
    measure(cases, 7, 150);
    std::printf(
        "\nrejected path: local %.1f ns/call, with Redis %.1f ns/call: %.2fx (target within"
        " 1.1x); no network involved\n",
        cases[0].ns(), cases[1].ns(), cases[1].ratio_to(cases[0]));
  }

  // ---- boundary sync of 100,000 active limiters ----
  {
    Options so = o;
    so.key_prefix = "sync";
    Engine syncing(so);
    const Limit limit(100, 12s, 1s);
    constexpr std::uint64_t kActive = 100'000;
    // Make them active with traffic: one admitted request each, from 8 threads, so every
    // read returns counts to parse and merge, as in service (a limiter only asked about,
    // with nothing in Redis, reads back nils and is cheaper to sync).
    run_threads(8, 0, [&](int t, std::uint64_t) {
      for (std::uint64_t r = static_cast<std::uint64_t>(t); r < kActive; r += 8)
        keep(syncing.try_acquire(r, limit, 1));
    });
    // Watch six boundaries after the setup: each reads every active limiter.
    std::vector<double> rounds_ms;
    std::uint64_t seen = syncing.stats().sync_rounds;
    const long long redis_usec_before = redis.commandstat("hmget", "usec");
    const auto until = Steady::now() + 8s;
    while (rounds_ms.size() < 6 && Steady::now() < until) {
      std::this_thread::sleep_for(20ms);
      const Stats s = syncing.stats();
      if (s.sync_rounds != seen) {
        seen = s.sync_rounds;
        rounds_ms.push_back(double(s.sync_last_duration.count()) / 1e6);
      }
    }
    const long long redis_usec = redis.commandstat("hmget", "usec") - redis_usec_before;
    const Stats s = syncing.stats();
    std::printf(
        "\nboundary sync: %llu active limiters (N = 12, 1 s resolution); over %zu boundaries"
        " a read of all of them took %.1f ms median, %.1f ms max (target within 100 ms);"
        " Redis' own time executing those HMGETs: %.1f ms per boundary\n",
        static_cast<unsigned long long>(s.active_limiters), rounds_ms.size(), median(rounds_ms),
        *std::max_element(rounds_ms.begin(), rounds_ms.end()),
        double(redis_usec) / 1e3 / double(rounds_ms.size()));
  }

  // ---- Redis memory per active resource, N = 12 ----
  {
    redisContext* c = connect(redis);
    const std::string sha = load_script(c);
    redis.command({"FLUSHALL"});
    const long long before = redis.info_number("memory", "used_memory");
    constexpr int kResources = 100'000;
    const std::int64_t now_epoch = SystemClock::read() / 1'000'000'000;
    // Every resource written in 14 consecutive epochs (the most fields a hash holds).
    for (int r = 0; r < kResources; ++r) {
      char key[64];
      std::snprintf(key, sizeof(key), "mem:{%016llx}:1000x12",
                    static_cast<unsigned long long>(r) * 0x9e3779b97f4a7c15ULL);
      for (int e = 13; e >= 0; --e) {
        redisAppendCommand(c, "EVALSHA %s 1 %s %lld 7 15000 64 12 4294967295 1048576", sha.c_str(),
                           key, static_cast<long long>((now_epoch - e) % 64));
      }
      if (r % 200 == 199 || r == kResources - 1) {
        const int pending = (r % 200 + 1) * 14;
        for (int i = 0; i < pending; ++i) {
          void* reply = nullptr;
          redisGetReply(c, &reply);
          freeReplyObject(reply);
        }
      }
    }
    const long long after = redis.info_number("memory", "used_memory");
    redisFree(c);
    std::printf(
        "\nRedis memory: %.1f bytes per active resource (N = 12, 14 epochs written each,"
        " used_memory over %d resources; target at most 300)\n",
        double(after - before) / kResources, kResources);
  }
  return 0;
}

}  // namespace ratewin::bench
