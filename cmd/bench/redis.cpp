// ratewin-bench redis: the Redis-backed paths against baselines in the same run, and what
// they cost Redis (INFO commandstats).
#include <hiredis/hiredis.h>
#include <cxxopts.hpp>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "bench.h"
#include "certificates.h"
#include "ratewin/engine.h"
#include "ratewin_internal/introspection.h"
#include "redis_bench.h"
#include "redis_server.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

redisContext* connect(const test::RedisServer& redis) {
  redisContext* c = redisConnect("127.0.0.1", redis.port());
  if (c == nullptr || c->err != 0) throw std::runtime_error("cannot connect to the bench's Redis");
  return c;
}

// Sends `count` commands already in RESP as one pipeline and reads every reply.
void pipeline(redisContext* c, const std::string& resp, std::size_t count) {
  redisAppendFormattedCommand(c, resp.data(), resp.size());
  for (std::size_t i = 0; i < count; ++i) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK) throw std::runtime_error("bench: Redis failed");
    freeReplyObject(reply);
  }
}

// Sends the commands as one pipeline and reads every reply.
void pipeline(redisContext* c, const std::vector<std::vector<std::string>>& commands) {
  for (const auto& command : commands) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : command) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK) throw std::runtime_error("bench: Redis failed");
    freeReplyObject(reply);
  }
}

// The engines' way to the bench's Redis: plain TCP to its port, or, with `tls_ca` (the
// CA file of the certificates made for the run; --tls), TLS to its TLS port, verified.
Options bench_options(const test::RedisServer& redis, const std::string& prefix,
                      const std::string& tls_ca = "") {
  Options o;
  o.redis = tls_ca.empty() ? redis.url() : redis.tls_url();
  o.tls.ca_file = tls_ca;
  o.key_prefix = prefix;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

// What one round of admissions cost Redis: the commands named (INFO commandstats: their
// execution only) and the process' CPU time (INFO cpu: user + system, so the network
// reads and writes too, and with TLS the encryption).
struct WriteRound {
  std::map<std::string, test::RedisServer::CommandStat> commands;
  double process_us = 0;
  std::uint64_t admitted = 0;
  double commands_per() const { return double(RedisCpu::usec(commands)) / double(admitted); }
  double process_per() const { return process_us / double(admitted); }
};

// `resources` resources admitted `times` each through `engine`, from 8 threads (keeping
// Redis busy, as the native baselines do).
WriteRound admit_all(Engine& engine, const test::RedisServer& redis, const Limit& limit,
                     std::uint64_t resources, int times, const std::set<std::string>& commands) {
  const RedisCpu cpu{redis};
  std::atomic<std::uint64_t> admitted{0};
  run_threads(8, 0, [&](int t, std::uint64_t) {
    std::uint64_t mine = 0;
    for (int k = 0; k < times; ++k) {
      for (std::uint64_t r = static_cast<std::uint64_t>(t); r < resources; r += 8)
        mine += engine.try_acquire(r, limit).allowed ? 1U : 0U;
    }
    admitted += mine;
  });
  WriteRound out;
  out.commands = cpu.since(commands);
  out.process_us = cpu.process_cpu().front();
  out.admitted = admitted.load();
  return out;
}

// Redis CPU per admitted request on the write path: `resources` resources admitted
// `times` each, from 8 threads, inside one subinterval of `limit`; median of 3 rounds,
// each on new keys.
double write_cost(const test::RedisServer& redis, const char* name, const Limit& limit,
                  std::uint64_t resources, int times, double target) {
  std::vector<double> rounds;
  std::map<std::string, test::RedisServer::CommandStat> last;
  std::uint64_t admitted_last = 0;
  for (int round = 0; round < 3; ++round) {
    Engine engine(bench_options(redis, std::string("cost-") + std::to_string(round) + name));
    // (A token bucket or a log has no epochs, and runs one script.)
    const bool scripted = limit.algorithm() == Algorithm::token_bucket ||
                          limit.algorithm() == Algorithm::sliding_log;
    if (!scripted) until_next_epoch(limit.resolution(), 50ms);
    const WriteRound r = admit_all(engine, redis, limit, resources, times,
                                   scripted ? kScriptCommands : kWriteCommands);
    last = r.commands;
    admitted_last = r.admitted;
    rounds.push_back(r.commands_per());
  }
  const double per = median(rounds);
  std::printf(
      "  %-34s N = %-3u %8llu admissions  %6.2f us each, rounds %.2f-%.2f  (target <= %.1f: %s)\n",
      name, limit.subintervals(), static_cast<unsigned long long>(admitted_last), per,
      *std::min_element(rounds.begin(), rounds.end()),
      *std::max_element(rounds.begin(), rounds.end()), target, verdict(per <= target).c_str());
  std::printf("  %-34s last round: %s\n", "",
              RedisCpu::breakdown(last, double(admitted_last)).c_str());
  return per;
}

// Redis CPU per admitted request over TLS against plain TCP (--tls), hot (200 resources
// admitted 100 times each) and cold (20,000 resources admitted once each), at N = 12 in
// 10 s subintervals (so that the four runs of a round fit in one): from the process' CPU
// time (INFO cpu), which over TLS includes the encryption, and from commandstats (the
// commands alone, the same either way). Each round makes a new engine for each run, on new
// keys, opens their connections (the TLS handshakes) before it measures, then runs hot plain
// and TLS, cold plain and TLS inside one subinterval (TLS first in odd rounds). Prints the
// medians and the median of the per-round ratios; returns those ratios, hot and cold.
std::pair<double, double> tls_write_costs(const test::RedisServer& redis, const std::string& tls_ca,
                                          int rounds) {
  const Limit limit(Limit::kMaxCount, 120s, 10s);
  struct Figures {
    const char* name;
    std::uint64_t resources;
    int times;
    std::vector<double> plain_commands, tls_commands, plain_process, tls_process, ratios;
  };
  std::array<Figures, 2> cases = {
      Figures{"hot: 200 resources x 100 each", 200, 100, {}, {}, {}, {}, {}},
      Figures{"cold: 20,000 resources x 1 each", 20'000, 1, {}, {}, {}, {}, {}}};
  int crossed = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<Engine>> engines;  // hot plain, hot TLS, cold plain, cold TLS
    for (const Figures& c : cases) {
      for (const bool secure : {false, true}) {
        engines.push_back(std::make_unique<Engine>(bench_options(
            redis, "tls-cost-" + std::to_string(round) + c.name + (secure ? "-tls" : "-plain"),
            secure ? tls_ca : "")));
        Engine& e = *engines.back();
        run_threads(8, 0, [&](int t, std::uint64_t) {
          for (int k = 0; k < 50; ++k)
            keep(e.try_acquire(c.resources + static_cast<std::uint64_t>(t), limit));
        });
      }
    }
    until_next_epoch(limit.resolution(), 50ms);
    const std::int64_t resolution = std::chrono::nanoseconds(limit.resolution()).count();
    const std::int64_t epoch = SystemClock::read() / resolution;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      Figures& c = cases[i];
      const auto run = [&](bool secure) {
        return admit_all(*engines[2 * i + (secure ? 1 : 0)], redis, limit, c.resources, c.times,
                         kWriteCommands);
      };
      WriteRound p;
      WriteRound t;
      if (round % 2 == 0) {
        p = run(false);
        t = run(true);
      } else {
        t = run(true);
        p = run(false);
      }
      c.plain_commands.push_back(p.commands_per());
      c.tls_commands.push_back(t.commands_per());
      c.plain_process.push_back(p.process_per());
      c.tls_process.push_back(t.process_per());
      c.ratios.push_back(t.process_per() / p.process_per());
    }
    if (SystemClock::read() / resolution != epoch) ++crossed;
  }
  for (const Figures& c : cases) {
    std::printf(
        "  %-34s plain: process %5.2f us (commands %4.2f); TLS: process %5.2f us (commands %4.2f);"
        " TLS/plain process %.2fx, rounds %.2f-%.2f\n",
        c.name, median(c.plain_process), median(c.plain_commands), median(c.tls_process),
        median(c.tls_commands), median(c.ratios),
        *std::min_element(c.ratios.begin(), c.ratios.end()),
        *std::max_element(c.ratios.begin(), c.ratios.end()));
  }
  if (crossed > 0)
    std::printf(
        "  (%d of %d rounds ran past their subinterval: hot figures count more first writes)\n",
        crossed, rounds);
  return {median(cases[0].ratios), median(cases[1].ratios)};
}

// A token bucket as Lua scripts usually keep one: tokens and the time of the last refill
// in a hash, refilled by the time elapsed, one taken if there is one. The yardstick of the
// token_bucket algorithm's script.
constexpr const char* kPlainBucketScript =
    "local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')\n"
    "local capacity = tonumber(ARGV[1])\n"
    "local per_ms = tonumber(ARGV[2])\n"
    "local now = tonumber(ARGV[3])\n"
    "local tokens = tonumber(state[1]) or capacity\n"
    "local at = tonumber(state[2]) or now\n"
    "tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)\n"
    "local allowed = 0\n"
    "if tokens >= 1 then\n"
    "  tokens = tokens - 1\n"
    "  allowed = 1\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)\n"
    "redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / per_ms))\n"
    "return allowed\n";

// A sliding log as Lua scripts usually keep one: a sorted set of admission times, trimmed
// to the window, counted, and added to if there is room. The yardstick of the sliding_log
// algorithm's script.
constexpr const char* kPlainLogScript =
    "local now = tonumber(ARGV[1])\n"
    "local window = tonumber(ARGV[2])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)\n"
    "if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then\n"
    "  redis.call('ZADD', KEYS[1], now, ARGV[4])\n"
    "  redis.call('PEXPIRE', KEYS[1], window)\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

// The plain scripts' Redis us per call, measured by native_baselines().
struct PlainScripts {
  double bucket = 0;
  double log = 0;
};

// Native commands on populated keys, one round trip each from 8 threads (as the write
// path's figures): what Redis spends per call (INFO commandstats), their yardstick; and
// the plain Lua token bucket's and sliding log's scripts.
PlainScripts native_baselines(const test::RedisServer& redis) {
  constexpr int kKeys = 20'000;
  {
    redisContext* c = connect(redis);
    std::vector<std::vector<std::string>> fill;
    for (int i = 0; i < kKeys; ++i) {
      const std::string k = std::to_string(i);
      fill.push_back({"SET", "native:s:" + k, std::string(64, 'x')});
      fill.push_back({"SET", "native:b:" + k, std::string(90, '\0')});
      std::vector<std::string> h = {"HSET", "native:h:" + k};
      for (int f = 0; f < 14; ++f) {
        h.push_back(std::to_string(f));
        h.push_back("7");
      }
      fill.push_back(h);
      fill.push_back({"SADD", "native:set:" + k, "a", "b", "c"});
      if (fill.size() >= 2000) {
        pipeline(c, fill);
        fill.clear();
      }
    }
    pipeline(c, fill);
    redisFree(c);
  }
  struct Native {
    const char* label;
    const char* stat;
    std::function<std::vector<std::string>(const std::string&)> command;
  };
  const std::vector<Native> natives = {
      {"BITFIELD INCRBY", "bitfield",
       [](const std::string& k) -> std::vector<std::string> {
         return {"BITFIELD", "native:b:" + k, "OVERFLOW", "SAT", "INCRBY", "u32", "112", "1"};
       }},
      {"GET of 64 bytes", "get",
       [](const std::string& k) -> std::vector<std::string> {
         return {"GET", "native:s:" + k};
       }},
      {"HINCRBY", "hincrby",
       [](const std::string& k) -> std::vector<std::string> {
         return {"HINCRBY", "native:h:" + k, "5", "1"};
       }},
      {"HMGET of 13 fields", "hmget",
       [](const std::string& k) -> std::vector<std::string> {
         std::vector<std::string> out = {"HMGET", "native:h:" + k};
         for (int f = 0; f < 13; ++f) out.push_back(std::to_string(f));
         return out;
       }},
      {"SADD", "sadd",
       [](const std::string& k) -> std::vector<std::string> {
         return {"SADD", "native:set:" + k, "d"};
       }},
      {"PEXPIRE", "pexpire",
       [](const std::string& k) -> std::vector<std::string> {
         return {"PEXPIRE", "native:s:" + k, "600000"};
       }},
      // 1000 per second, room for 1000, on keys of its own.
      {"plain Lua token bucket", "evalsha",
       [sha = redis.command({"SCRIPT", "LOAD", kPlainBucketScript})](
           const std::string& k) -> std::vector<std::string> {
         return {"EVALSHA",
                 sha,
                 "1",
                 "native:tb:" + k,
                 "1000",
                 "1",
                 std::to_string(SystemClock::read() / 1'000'000)};
       }},
      // 4096 per minute, on keys of their own (a new member each: the key and a time).
      {"plain Lua sliding log", "evalsha",
       [sha = redis.command({"SCRIPT", "LOAD", kPlainLogScript})](
           const std::string& k) -> std::vector<std::string> {
         const std::string now = std::to_string(SystemClock::read() / 1'000'000);
         return {"EVALSHA", sha, "1", "native:log:" + k, now, "60000", "4096", k + ":" + now};
       }},
  };
  PlainScripts plain;
  std::printf(
      "native commands on populated keys (one round trip each, 8 threads; Redis us/call):\n ");
  for (const Native& n : natives) {
    const RedisCpu cpu{redis};
    run_threads(8, 0, [&](int t, std::uint64_t) {
      redisContext* c = connect(redis);
      for (int i = t; i < kKeys; i += 8) pipeline(c, {n.command(std::to_string(i))});
      redisFree(c);
    });
    const auto stat = cpu.since({n.stat});
    const auto it = stat.find(n.stat);
    const double per = it == stat.end() ? 0.0 : double(it->second.usec) / double(it->second.calls);
    std::printf(" %s %.2f;", n.label, per);
    if (std::string_view(n.label) == "plain Lua token bucket") plain.bucket = per;
    if (std::string_view(n.label) == "plain Lua sliding log") plain.log = per;
  }
  std::printf("\n");
  redis.command({"FLUSHALL"});
  return plain;
}

}  // namespace

int run_redis(const cxxopts::ParseResult& args) {
  // --tls: certificates made for this run (removed at its end), the same redis-server
  // serving TLS on a second port, and rows over TLS beside the plain ones.
  const bool with_tls = args["tls"].as<bool>();
  std::optional<test::Certificates> certs;
  if (with_tls) certs.emplace();
  const std::string tls_ca = with_tls ? certs->path("ca.crt") : "";
  test::RedisServer redis({}, "", with_tls ? certs->server() : test::ServerTls{});
  std::printf("ratewin-bench redis: a private %s on 127.0.0.1:%d (loopback)",
              test::server_programs().server.c_str(), redis.port());
  if (with_tls)
    std::printf(", TLS on 127.0.0.1:%d (certificates made for this run; the engines verify them)",
                redis.tls_port());
  std::printf("\n\n");
  const PlainScripts plain = native_baselines(redis);
  const double plain_bucket = plain.bucket;

  // ---- what an admitted request costs Redis ----
  std::printf(
      "\nRedis CPU per admitted request, every command it causes (INFO commandstats; boundary "
      "reads excluded):\n");
  const double hot12 = write_cost(redis, "hot: 200 resources x 100 each",
                                  Limit(Limit::kMaxCount, 60s, 5s), 200, 100, 2.0);
  const double cold12 = write_cost(redis, "cold: 20,000 resources x 1 each",
                                   Limit(Limit::kMaxCount, 60s, 5s), 20'000, 1, 4.0);
  const double hot60 = write_cost(redis, "hot: 200 resources x 100 each",
                                  Limit(Limit::kMaxCount, 300s, 5s), 200, 100, 2.5);
  const double cold60 = write_cost(redis, "cold: 20,000 resources x 1 each",
                                   Limit(Limit::kMaxCount, 300s, 5s), 20'000, 1, 4.5);
  std::pair<double, double> tls_costs;  // TLS / plain, hot and cold
  if (with_tls) {
    std::printf(
        "\nthe same over TLS against plain TCP, N = 12 (10 s subintervals), 5 rounds of each:"
        " redis-server's process CPU time per admission (INFO cpu, user + system: its network"
        " reads and writes, and over TLS the encryption and decryption of every record, which"
        " commandstats leaves out), and its commands' own time (commandstats, as above):\n");
    tls_costs = tls_write_costs(redis, tls_ca, 5);
  }
  // The other algorithms of the ring send the same commands (strict_window) or the same
  // on a ring of one subinterval (fixed_window): measured all the same.
  std::printf("\nthe same per algorithm (sliding_window is the rows above):\n");
  const Limit strict_window =
      Limit(Limit::kMaxCount, 60s, 5s).with_algorithm(Algorithm::strict_window);
  const Limit fixed_window = Limit(Limit::kMaxCount, 5s).with_algorithm(Algorithm::fixed_window);
  const double strict_hot = write_cost(redis, "strict_window hot", strict_window, 200, 100, 2.0);
  const double strict_cold = write_cost(redis, "strict_window cold", strict_window, 20'000, 1, 4.0);
  const double fixed_hot = write_cost(redis, "fixed_window hot", fixed_window, 200, 100, 2.0);
  const double fixed_cold = write_cost(redis, "fixed_window cold", fixed_window, 20'000, 1, 4.0);
  // A scripted algorithm, hot and cold, against its plain Lua yardstick of this run.
  const auto scripted = [&](const Limit& limit, double target, double plain_us, const char* note) {
    const std::string name = algorithm_name(limit.algorithm());
    const double hot = write_cost(redis, (name + " hot").c_str(), limit, 200, 100, target);
    const double cold = write_cost(redis, (name + " cold").c_str(), limit, 20'000, 1, target);
    std::printf("  %s against the plain Lua script's %.2f us, measured above in this run: "
                "%.2fx hot, %.2fx cold (%s)\n",
                name.c_str(), plain_us, hot / plain_us, cold / plain_us, note);
    return std::pair{hot, cold};
  };
  // A token bucket that never refuses (its burst is the most there is), and a log that
  // never does (100 per resource here; a log of 128 takes 1 KiB a limiter, so the 20,000
  // of the cold case fit the engine's default memory bound), against the plain script.
  const auto [bucket_hot, bucket_cold] =
      scripted(Limit(Limit::kMaxCount, 60s).with_algorithm(Algorithm::token_bucket), 4.0,
               plain_bucket, "the issue's 4.0 us against 4.4: at most 0.91x");
  const auto [log_hot, log_cold] =
      scripted(Limit(128, 60s).with_algorithm(Algorithm::sliding_log), plain.log, plain.log,
               "a hot log holds 100 entries; the plain script's keys, one");
  redis.command({"FLUSHALL"});

  // ---- allowed path: engine vs raw hiredis sending the same commands ----
  // (With --tls, an engine over TLS runs in every round too, alternately before and after the
  // plain one, and 5 rounds instead of 3.)
  const int allow_rounds = with_tls ? 5 : 3;
  std::printf("\nallowed path (every call writes), %.1f s per case, rounds interleaved\n",
              0.7 * allow_rounds);
  std::printf("%-10s %10s %10s %12s %10s %10s %12s %8s %8s\n", "threads", "raw p50 us",
              "raw p99 us", "raw calls/s", "p50 us", "p99 us", "calls/s", "x p50", "x calls");
  Engine engine(bench_options(redis, "bench"));
  std::optional<Engine> engine_tls;
  if (with_tls) engine_tls.emplace(bench_options(redis, "bench-tls", tls_ca));
  const Limit unlimited(Limit::kMaxCount, 60s, 5s);  // N = 12, never full
  std::vector<std::string> names;
  for (int t = 0; t < 8; ++t) names.push_back(std::string("allow:").append(std::to_string(t)));
  // Their connections opened (and TLS handshakes made) before anything is timed.
  for (Engine* e : {&engine, engine_tls ? &*engine_tls : nullptr}) {
    if (e == nullptr) continue;
    run_threads(8, 0, [&](int t, std::uint64_t) {
      for (int k = 0; k < 50; ++k)
        keep(e->try_acquire(names[static_cast<std::size_t>(t)], unlimited));
    });
  }
  struct TlsRow {
    int threads;
    double plain50, plain99, plaintp, tls50, tls99, tlstp, x50, xtp;
  };
  std::vector<TlsRow> tls_rows;
  for (const int threads : {1, 2, 8}) {
    // Raw: per thread a blocking hiredis connection sending what the engine sends for its
    // resource: the first write of each subinterval with its bookkeeping, then plain ones.
    std::vector<redisContext*> contexts;
    std::vector<std::int64_t> last_epoch(8, 0);
    for (int t = 0; t < threads; ++t) contexts.push_back(connect(redis));
    std::vector<double> raw50, raw99, rawtp, eng50, eng99, engtp;
    std::vector<double> tls50, tls99, tlstp, x50, xtp;  // --tls; x: TLS / plain, per round
    for (int round = 0; round < allow_rounds; ++round) {
      Latencies raw = measure_calls(threads, 700ms, [&](int t) {
        const auto i = static_cast<std::size_t>(t);
        const std::int64_t epoch = SystemClock::read() / 5'000'000'000;
        const internal::StoreWriteCommands write = internal::store_write_commands(
            "raw", 1000 + i, unlimited, epoch, 1, epoch != last_epoch[i]);
        pipeline(contexts[i], write.resp, write.count);
        last_epoch[i] = epoch;
      });
      const auto over = [&](Engine& e) {
        return measure_calls(threads, 700ms, [&](int t) {
          keep(e.try_acquire(names[static_cast<std::size_t>(t)], unlimited));
        });
      };
      Latencies mine;
      if (engine_tls) {
        Latencies secure;
        if (round % 2 == 0) {
          mine = over(engine);
          secure = over(*engine_tls);
        } else {
          secure = over(*engine_tls);
          mine = over(engine);
        }
        tls50.push_back(secure.p(0.5));
        tls99.push_back(secure.p(0.99));
        tlstp.push_back(secure.throughput());
        x50.push_back(secure.p(0.5) / mine.p(0.5));
        xtp.push_back(secure.throughput() / mine.throughput());
      } else {
        mine = over(engine);
      }
      raw50.push_back(raw.p(0.5));
      raw99.push_back(raw.p(0.99));
      rawtp.push_back(raw.throughput());
      eng50.push_back(mine.p(0.5));
      eng99.push_back(mine.p(0.99));
      engtp.push_back(mine.throughput());
    }
    for (auto* c : contexts) redisFree(c);
    std::printf("%-10d %10.1f %10.1f %12.0f %10.1f %10.1f %12.0f %8.2f %8.2f\n", threads,
                median(raw50) / 1e3, median(raw99) / 1e3, median(rawtp), median(eng50) / 1e3,
                median(eng99) / 1e3, median(engtp), median(eng50) / median(raw50),
                median(engtp) / median(rawtp));
    if (engine_tls) {
      tls_rows.push_back({threads, median(eng50), median(eng99), median(engtp), median(tls50),
                          median(tls99), median(tlstp), median(x50), median(xtp)});
    }
  }
  const Stats after_writes = engine.stats();
  std::printf(
      "  (targets: p50 within 1.15x of raw, throughput at least 0.85x of raw; engine's own"
      " write p50/p99 from its stats: %.1f / %.1f us)\n",
      double(after_writes.write_p50.count()) / 1e3, double(after_writes.write_p99.count()) / 1e3);
  if (engine_tls) {
    std::printf(
        "\nallowed path over TLS against plain TCP (the same rounds; TLS/plain: median of"
        " the per-round ratios)\n");
    std::printf("%-10s %10s %10s %12s %10s %10s %12s %9s %9s\n", "threads", "plain p50",
                "plain p99", "plain c/s", "TLS p50", "TLS p99", "TLS c/s", "TLS x p50",
                "TLS x c/s");
    for (const TlsRow& r : tls_rows) {
      std::printf("%-10d %10.1f %10.1f %12.0f %10.1f %10.1f %12.0f %9.2f %9.2f\n", r.threads,
                  r.plain50 / 1e3, r.plain99 / 1e3, r.plaintp, r.tls50 / 1e3, r.tls99 / 1e3,
                  r.tlstp, r.x50, r.xtp);
    }
    const Stats tls_writes = engine_tls->stats();
    bool met = true;
    for (const TlsRow& r : tls_rows) met = met && r.x50 <= 1.15;
    std::printf(
        "  (target: TLS p50 at most 1.15x plain at every thread count: %s; the TLS"
        " engine's own write p50/p99 from its stats: %.1f / %.1f us)\n",
        verdict(met).c_str(), double(tls_writes.write_p50.count()) / 1e3,
        double(tls_writes.write_p99.count()) / 1e3);
  }

  // ---- rejected path: Redis mode vs local mode ----
  {
    Options local_options;
    local_options.logger = [](LogLevel, std::string_view) {};
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

  // ---- boundary reads: what changed, not everything ----
  std::printf("\nboundary reads (node A active on every resource; node B writes some of them):\n");
  // 20,000 resources A admits on in every 2 s subinterval; B writes 1% of them. Both nodes
  // over TLS if `ca` is given.
  const auto one_percent = [&](const std::string& prefix, int boundaries, const std::string& ca) {
    const Limit limit(Limit::kMaxCount, 24s, 2s);
    Engine a(bench_options(redis, prefix, ca));
    Engine b(bench_options(redis, prefix, ca));
    constexpr std::uint64_t kActive = 20'000;
    return watch_boundaries({&redis}, a, limit, boundaries, 300ms, [&] {
      run_threads(8, 0, [&](int t, std::uint64_t) {
        for (std::uint64_t r = static_cast<std::uint64_t>(t); r < kActive; r += 8)
          keep(a.try_acquire(r, limit));
        for (std::uint64_t r = static_cast<std::uint64_t>(t) * 100; r < kActive; r += 800)
          keep(b.try_acquire(r, limit));
      });
    });
  };
  // With --tls, in blocks of 3 boundaries, new nodes each, alternating plain, TLS, TLS,
  // plain, so that the two never read at the same boundary: the plain figures are the
  // plain blocks'.
  BoundaryFigures reads;
  BoundaryFigures tls_reads;
  if (with_tls) {
    const auto add = [](BoundaryFigures& to, const BoundaryFigures& from) {
      for (auto [a, b] :
           {std::pair{&to.ms, &from.ms}, std::pair{&to.windows, &from.windows},
            std::pair{&to.change_sets, &from.change_sets}, std::pair{&to.redis_ms, &from.redis_ms},
            std::pair{&to.cpu_ms, &from.cpu_ms}})
        a->insert(a->end(), b->begin(), b->end());
      // (Redis' microseconds per key read, over every read so far.)
      double usec = 0;
      double keys = 0;
      for (std::size_t i = 0; i < to.ms.size(); ++i) {
        usec += to.redis_ms[i] * 1e3;
        keys += to.windows[i] + to.change_sets[i];
      }
      to.redis_us_per_key = keys > 0 ? usec / keys : 0;
    };
    for (int block = 0; block < 4; ++block) {
      const bool tls = block == 1 || block == 2;
      add(tls ? tls_reads : reads,
          one_percent("sync-a" + std::to_string(block), 3, tls ? tls_ca : ""));
    }
    if (reads.ms.empty() || tls_reads.ms.empty())
      throw std::runtime_error("bench: no boundary read seen");
  } else {
    reads = one_percent("sync-a", 5, "");
  }
  {
    const double keys = median(reads.windows) + median(reads.change_sets);
    std::printf(
        "  20,000 active, 1%% changed: %zu boundaries; windows read %.0f, change sets read %.0f"
        " (target <= 1,000 keys: %s); %.2f ms median, %.2f ms max (target <= 5 ms: %s); Redis"
        " %.2f ms per read, %.2f us per key read\n",
        reads.ms.size(), median(reads.windows), median(reads.change_sets),
        verdict(keys <= 1000).c_str(), median(reads.ms),
        *std::max_element(reads.ms.begin(), reads.ms.end()), verdict(median(reads.ms) <= 5).c_str(),
        median(reads.redis_ms), reads.redis_us_per_key);
  }
  double tls_boundary = 0;
  if (with_tls) {
    tls_boundary = median(tls_reads.ms) / median(reads.ms);
    for (const BoundaryFigures* r : {&reads, &tls_reads}) {
      std::printf(
          "  20,000 active, 1%% changed, %-6s %zu boundaries; windows read %.0f, change sets %.0f;"
          " %.2f ms median, %.2f ms max; Redis' commands %.2f ms, its process CPU %.2f ms per"
          " read%s\n",
          r == &tls_reads ? "TLS:" : "plain:", r->ms.size(), median(r->windows),
          median(r->change_sets), median(r->ms), *std::max_element(r->ms.begin(), r->ms.end()),
          median(r->redis_ms), median(r->cpu_ms), r == &tls_reads ? " (encryption included)" : "");
    }
    std::printf(
        "  the same, TLS/plain: %.2fx the median read (blocks of 3 boundaries: plain, TLS, TLS,"
        " plain), %.2fx Redis' process CPU\n",
        tls_boundary, median(tls_reads.cpu_ms) / median(reads.cpu_ms));
  }
  {
    // 100,000 resources A is active on (one admission each), all written by B in every
    // 5 s subinterval.
    const Limit limit(Limit::kMaxCount, 60s, 5s);
    Engine a(bench_options(redis, "sync-b"));
    Engine b(bench_options(redis, "sync-b"));
    constexpr std::uint64_t kActive = 100'000;
    run_threads(8, 0, [&](int t, std::uint64_t) {
      for (std::uint64_t r = static_cast<std::uint64_t>(t); r < kActive; r += 8)
        keep(a.try_acquire(r, limit));
    });
    const BoundaryFigures f = watch_boundaries({&redis}, a, limit, 3, 500ms, [&] {
      run_threads(8, 0, [&](int t, std::uint64_t) {
        for (std::uint64_t r = static_cast<std::uint64_t>(t); r < kActive; r += 8)
          keep(b.try_acquire(r, limit));
      });
    });
    std::printf(
        "  100,000 active, all changed: %zu boundaries; windows read %.0f, change sets %.0f;"
        " %.1f ms median, %.1f ms max (target <= 100 ms: %s); Redis' own time executing the"
        " reads %.1f ms median per read, %.2f us per key read\n",
        f.ms.size(), median(f.windows), median(f.change_sets), median(f.ms),
        *std::max_element(f.ms.begin(), f.ms.end()), verdict(median(f.ms) <= 100).c_str(),
        median(f.redis_ms), f.redis_us_per_key);
  }

  // ---- Redis memory per active resource, N = 12, change sets included ----
  {
    redisContext* c = connect(redis);
    redis.command({"FLUSHALL"});
    const long long before = redis.info_number("memory", "used_memory");
    constexpr std::uint64_t kResources = 100'000;
    // Minute subintervals, so that nothing the writes below make expires while they run.
    const Limit limit(Limit::kMaxCount, 12min, 1min);
    const std::int64_t now_epoch = SystemClock::read() / 60'000'000'000LL;
    // Every resource written in 14 consecutive subintervals up to now (each a first write
    // with its bookkeeping, as a node that writes each subinterval sends): the change sets
    // of the last ones are still there, as in service.
    for (std::int64_t e = now_epoch - 13; e <= now_epoch; ++e) {
      std::string batch;
      std::size_t commands = 0;
      for (std::uint64_t r = 0; r < kResources; ++r) {
        const internal::StoreWriteCommands write =
            internal::store_write_commands("mem", r * 0x9e3779b97f4a7c15ULL, limit, e, 1, true);
        batch += write.resp;
        commands += write.count;
        if (commands >= 4000) {
          pipeline(c, batch, commands);
          batch.clear();
          commands = 0;
        }
      }
      pipeline(c, batch, commands);
    }
    const long long after = redis.info_number("memory", "used_memory");
    redisFree(c);
    const double per = double(after - before) / double(kResources);
    std::printf(
        "\nRedis memory: %.1f bytes per active resource (N = 12, written in 14 subintervals,"
        " change sets included; used_memory over %llu resources; target at most 300: %s)\n",
        per, static_cast<unsigned long long>(kResources), verdict(per <= 300).c_str());
  }
  std::printf(
      "\nsummary: Redis CPU per admitted request %.2f hot / %.2f cold at N = 12 (targets 2.0 / "
      "4.0), %.2f / %.2f at N = 60 (2.5 / 4.5)\n",
      hot12, cold12, hot60, cold60);
  std::printf(
      "per algorithm, hot / cold: sliding_window %.2f / %.2f (N = 12), strict_window %.2f / %.2f"
      " (N = 12), fixed_window %.2f / %.2f (N = 1), token_bucket %.2f / %.2f (%.2fx / %.2fx the"
      " plain Lua token bucket's %.2f), sliding_log %.2f / %.2f (%.2fx / %.2fx the plain Lua"
      " sliding log's %.2f)\n",
      hot12, cold12, strict_hot, strict_cold, fixed_hot, fixed_cold, bucket_hot, bucket_cold,
      bucket_hot / plain_bucket, bucket_cold / plain_bucket, plain_bucket, log_hot, log_cold,
      log_hot / plain.log, log_cold / plain.log, plain.log);
  if (with_tls) {
    std::printf(
        "over TLS against plain TCP: allowed path p50 %.2f / %.2f / %.2fx and calls/s %.2f / %.2f /"
        " %.2fx at 1 / 2 / 8 threads; Redis process CPU per admission %.2fx hot, %.2fx cold"
        " (encryption included); boundary read of 20,000 limiters, 1%% changed, %.2fx\n",
        tls_rows[0].x50, tls_rows[1].x50, tls_rows[2].x50, tls_rows[0].xtp, tls_rows[1].xtp,
        tls_rows[2].xtp, tls_costs.first, tls_costs.second, tls_boundary);
  }
  return 0;
}

}  // namespace ratewin::bench
