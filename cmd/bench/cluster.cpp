// ratewin-bench cluster: the store on a local 3-primary Redis Cluster next to one Redis, in
// the same run: allowed-path throughput, boundary reads, how evenly the primaries share
// the work, and whether the capacity model (docs/redis.md) predicts what Redis spends.
#include <cxxopts.hpp>

#include <hiredis/hiredis.h>

#include <atomic>
#include <cmath>
#include <memory>

#include "bench.h"
#include "ratewin/engine.h"
#include "redis_bench.h"
#include "redis_cluster.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;

Options options_for(const std::string& url, const std::string& prefix) {
  Options o;
  o.redis = url;
  o.key_prefix = prefix;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

struct Target {
  const char* name;
  std::string url;
  std::vector<const test::RedisServer*> servers;  // the primaries
};

// The capacity model's constants (docs/redis.md, "Capacity"): Redis microseconds per
// first write of a node to a limiter in a subinterval (with its change-set entry), per
// later write, per key a boundary read fetches and per command it sends (an MGET: on a
// cluster one per slot, so a read sends many more).
struct Model {
  double first = 0;
  double later = 0;
  double key = 0;
  double command = 0;
  double writes(double firsts, double laters) const { return firsts * first + laters * later; }
  double read(double keys, double commands) const { return keys * key + commands * command; }
};

// MGET commands a boundary read of `keys` windows sends: 128 keys each on one Redis; on a
// cluster one per slot touched (keys spread evenly over 16384 slots), 128 at most.
double read_commands(double keys, bool cluster) {
  if (!cluster) return std::ceil(keys / 128);
  const double slots = 16384 * (1 - std::exp(-keys / 16384));
  return std::max(slots, std::ceil(keys / 128));
}

// Redis' CPU time per MGET command (beyond its keys'), from raw MGETs of 128 and of 6 keys
// over 100,000 populated strings on one Redis.
void calibrate_reads(const test::RedisServer& redis, Model& model) {
  redisContext* c = redisConnect("127.0.0.1", redis.port());
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect to the bench's Redis");
  constexpr int kKeys = 100'000;
  const std::string value(90, 'x');
  auto key = [](int i) { return "cal:{" + std::to_string(i) + "}"; };
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = key(i);
    redisAppendCommand(c, "SET %b %b", k.data(), k.size(), value.data(), value.size());
    if (i % 1000 == 999 || i == kKeys - 1) {
      for (int j = 0; j <= i % 1000; ++j) {
        void* r = nullptr;
        if (redisGetReply(c, &r) != REDIS_OK) throw std::runtime_error("bench: Redis failed");
        freeReplyObject(r);
      }
    }
  }
  auto run = [&](int per) {
    const RedisCpu cpu{redis};
    int sent = 0;
    for (int first = 0; first < kKeys; first += per) {
      std::vector<std::string> args = {"MGET"};
      for (int i = first; i < std::min(kKeys, first + per); ++i) args.push_back(key(i));
      std::vector<const char*> argv;
      std::vector<std::size_t> lens;
      for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
      ++sent;
    }
    for (int i = 0; i < sent; ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) throw std::runtime_error("bench: Redis failed");
      freeReplyObject(r);
    }
    double used = 0;
    for (const double x : cpu.process_cpu()) used += x;
    return std::pair{used, double(sent)};
  };
  std::vector<double> commands;
  for (int round = 0; round < 3; ++round) {
    const auto [big, big_n] = run(128);
    const auto [small, small_n] = run(6);
    // big = K key + big_n command; small = K key + small_n command.
    commands.push_back(std::max(0.0, (small - big) / (small_n - big_n)));
  }
  model.command = median(commands);
  redisFree(c);
  redis.command({"FLUSHALL"});
}

// Admissions of a mixed load inside one 5 s subinterval: `cold` resources once each and
// `hot` resources `times` each, from 8 threads. Returns Redis' time on the write commands
// (and per server), with the number of first and later writes.
struct WriteRun {
  double usec = 0;  // commandstats (wall time in commands)
  double cpu = 0;   // the processes' CPU time
  double firsts = 0;
  double laters = 0;
  std::vector<double> calls_per_server;
};
// Two threads: more would keep Redis from the cores, and its time per command (a wall
// time) would count waiting for them.
constexpr int kLoadThreads = 2;
WriteRun write_load(const Target& t, const std::string& prefix, std::uint64_t cold,
                    std::uint64_t hot, int times) {
  Engine engine(options_for(t.url, prefix));
  const Limit limit(Limit::kMaxCount, 60s, 5s);
  until_next_epoch(limit.resolution(), 50ms);
  const RedisCpu cpu{t.servers};
  std::atomic<std::uint64_t> admitted{0};
  run_threads(kLoadThreads, 0, [&](int th, std::uint64_t) {
    std::uint64_t mine = 0;
    for (std::uint64_t r = static_cast<std::uint64_t>(th); r < cold; r += kLoadThreads)
      mine += engine.try_acquire(1'000'000 + r, limit).allowed ? 1U : 0U;
    for (int k = 0; k < times; ++k)
      for (std::uint64_t r = static_cast<std::uint64_t>(th); r < hot; r += kLoadThreads)
        mine += engine.try_acquire(r, limit).allowed ? 1U : 0U;
    admitted += mine;
  });
  WriteRun out;
  out.usec = double(RedisCpu::usec(cpu.since(kWriteCommands)));
  for (const double x : cpu.process_cpu()) out.cpu += x;
  out.firsts = double(cold + hot);
  out.laters = double(admitted.load()) - out.firsts;
  for (std::size_t i = 0; i < t.servers.size(); ++i)
    out.calls_per_server.push_back(double(RedisCpu::calls(cpu.since_on(i, kWriteCommands))));
  return out;
}

double busiest_to_mean(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return sum > 0 ? *std::max_element(v.begin(), v.end()) / (sum / double(v.size())) : 0;
}

}  // namespace

int run_cluster(const cxxopts::ParseResult& args) {
  (void)args;
  test::RedisServer single;
  test::RedisCluster cluster(3, 0);
  std::vector<const test::RedisServer*> primaries;
  for (test::RedisServer* p : cluster.primaries()) primaries.push_back(p);
  const std::vector<Target> targets = {{"one Redis", single.url(), {&single}},
                                       {"cluster, 3 primaries", cluster.url(), primaries}};
  std::printf(
      "ratewin-bench cluster: one %s and a 3-primary Redis Cluster (%s --cluster create), all "
      "on this machine's loopback\n\n",
      test::server_programs().server.c_str(), test::server_programs().cli.c_str());

  // ---- the model's write constants, on each target: cold and hot loads apart ----
  std::vector<Model> models(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    std::vector<double> first, later;
    for (int round = 0; round < 3; ++round) {
      const std::string r = std::to_string(round);
      const WriteRun cold = write_load(targets[i], "m-cold" + r, 20'000, 0, 0);
      first.push_back(cold.cpu / cold.firsts);
      const WriteRun hot = write_load(targets[i], "m-hot" + r, 0, 200, 100);
      later.push_back((hot.cpu - hot.firsts * first.back()) / hot.laters);
    }
    models[i].first = median(first);
    models[i].later = median(later);
  }
  Model& model = models[0];
  calibrate_reads(single, model);
  models[1].command = model.command;

  // ---- allowed path, 8 threads ----
  std::printf("allowed path, 8 threads, every call writes (3 rounds of 1 s, medians):\n");
  std::vector<double> throughput;
  for (const Target& t : targets) {
    Engine engine(options_for(t.url, "allow"));
    const Limit unlimited(Limit::kMaxCount, 60s, 5s);
    std::vector<double> p50, tp;
    for (int round = 0; round < 3; ++round) {
      std::vector<std::uint64_t> next(8, 0);
      Latencies l = measure_calls(8, 1000ms, [&](int th) {
        // Each thread cycles over 64 resources of its own: spread over the slots.
        auto& n = next[static_cast<std::size_t>(th)];
        keep(engine.try_acquire(static_cast<std::uint64_t>(th) * 1000 + n++ % 64, unlimited));
      });
      p50.push_back(l.p(0.5));
      tp.push_back(l.throughput());
    }
    throughput.push_back(median(tp));
    std::printf("  %-22s %10.0f calls/s  p50 %6.1f us\n", t.name, median(tp),
                median(p50) / 1e3);
  }
  std::printf("  cluster / one Redis: %.2fx calls/s (every server shares this machine's %u cores)\n",
              throughput[1] / throughput[0], std::thread::hardware_concurrency());

  // ---- write load: spread and the model ----
  std::printf(
      "\nmixed write load (20,000 resources once, 200 resources 50 times, 2 threads): Redis CPU "
      "time (INFO cpu, every primary), against the model with each target's constants (from "
      "its cold and hot loads apart; one Redis: %.2f us a first write, %.2f a later one; the "
      "cluster: %.2f and %.2f, %.2fx and %.2fx)\n",
      model.first, model.later, models[1].first, models[1].later, models[1].first / model.first,
      models[1].later / model.later);
  double spread_calls = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    const WriteRun w = write_load(t, std::string("load-") + t.name, 20'000, 200, 50);
    const double predicted = models[i].writes(w.firsts, w.laters);
    const double from_single = model.writes(w.firsts, w.laters);
    std::printf("  %-22s measured %8.0f us, model %8.0f us: %+.0f%% (one Redis' constants: "
                "%+.0f%%; in commands: %.0f us)",
                t.name, w.cpu, predicted, (w.cpu / predicted - 1) * 100,
                (w.cpu / from_single - 1) * 100, w.usec);
    if (t.servers.size() > 1) {
      spread_calls = busiest_to_mean(w.calls_per_server);
      std::printf("; commands per primary:");
      for (const double c : w.calls_per_server) std::printf(" %.0f", c);
      std::printf(" (busiest %.2fx the mean, target <= 1.2: %s)", spread_calls,
                  verdict(spread_calls <= 1.2).c_str());
    }
    std::printf("\n");
  }

  // ---- boundary reads, 100,000 active, all changed ----
  std::printf("\nboundary reads, 100,000 active resources all written by another node:\n");
  std::vector<double> read_ms;
  for (const Target& t : targets) {
    const Limit limit(Limit::kMaxCount, 60s, 5s);
    Engine a(options_for(t.url, "sync"));
    Engine b(options_for(t.url, "sync"));
    constexpr std::uint64_t kActive = 100'000;
    run_threads(8, 0, [&](int th, std::uint64_t) {
      for (std::uint64_t r = static_cast<std::uint64_t>(th); r < kActive; r += 8)
        keep(a.try_acquire(r, limit));
    });
    const BoundaryFigures f = watch_boundaries(t.servers, a, limit, 3, 500ms, [&] {
      run_threads(8, 0, [&](int th, std::uint64_t) {
        for (std::uint64_t r = static_cast<std::uint64_t>(th); r < kActive; r += 8)
          keep(b.try_acquire(r, limit));
      });
    });
    if (f.ms.empty()) {
      std::printf("  %-22s no boundary read seen\n", t.name);
      continue;
    }
    const double keys = median(f.windows) + median(f.change_sets);
    const double commands =
        read_commands(median(f.windows), t.servers.size() > 1) + median(f.change_sets);
    // One Redis sets the per-key constant: what it spent beyond the commands' own cost.
    if (model.key == 0) model.key = (median(f.cpu_ms) * 1e3 - commands * model.command) / keys;
    const double predicted = model.read(keys, commands) / 1e3;
    read_ms.push_back(median(f.ms));
    std::printf(
        "  %-22s %.1f ms median, %.1f ms max; %0.f windows, %.0f change sets; Redis CPU %.1f ms, "
        "model %.1f ms: %+.0f%% (in commands: %.1f ms)\n",
        t.name, median(f.ms), *std::max_element(f.ms.begin(), f.ms.end()), median(f.windows),
        median(f.change_sets), median(f.cpu_ms), predicted,
        (median(f.cpu_ms) / predicted - 1) * 100, median(f.redis_ms));
  }

  // ---- memory per primary ----
  {
    std::vector<long long> before;
    for (const auto* p : primaries) before.push_back(p->info_number("memory", "used_memory"));
    Engine engine(options_for(cluster.url(), "mem"));
    const Limit limit(Limit::kMaxCount, 12min, 1min);
    run_threads(8, 0, [&](int th, std::uint64_t) {
      for (std::uint64_t r = static_cast<std::uint64_t>(th); r < 60'000; r += 8)
        keep(engine.try_acquire(r * 0x9e3779b97f4a7c15ULL, limit));
    });
    std::vector<double> grew;
    std::printf("\nmemory, 60,000 resources written once on the cluster: per primary");
    for (std::size_t i = 0; i < primaries.size(); ++i) {
      grew.push_back(double(primaries[i]->info_number("memory", "used_memory") - before[i]));
      std::printf(" %.1f MB", grew.back() / 1e6);
    }
    const double spread = busiest_to_mean(grew);
    std::printf(" (busiest %.2fx the mean, target <= 1.2: %s)\n", spread,
                verdict(spread <= 1.2).c_str());
  }
  std::printf(
      "\nmodel constants (one Redis, this run): first write %.2f us, later write %.2f us, "
      "boundary read %.2f us a key + %.2f us a command\n",
      model.first, model.later, model.key, model.command);
  return 0;
}

}  // namespace ratewin::bench
