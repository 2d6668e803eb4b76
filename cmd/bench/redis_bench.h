// Shared pieces of ratewin-bench's Redis modes (redis, cluster): timed calls from
// several threads, Redis' own time from INFO commandstats, subinterval alignment.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"
#include "redis_server.h"

namespace ratewin::bench {

using Steady = std::chrono::steady_clock;

// Every call's latency, from several threads.
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

// Redis' own time (INFO commandstats) spent on some commands between two snapshots, over
// one server or several (a cluster's primaries).
struct RedisCpu {
  using Stats = std::map<std::string, test::RedisServer::CommandStat>;
  std::vector<const test::RedisServer*> servers;
  std::vector<Stats> before;
  std::vector<double> cpu_before;  // process CPU time, us

  explicit RedisCpu(const test::RedisServer& redis) : RedisCpu(std::vector{&redis}) {}
  explicit RedisCpu(std::vector<const test::RedisServer*> all) : servers(std::move(all)) {
    for (const auto* s : servers) {
      before.push_back(s->commandstats());
      cpu_before.push_back(s->cpu_us());
    }
  }
  // The CPU time the servers' processes used since the snapshot (INFO cpu, user +
  // system: commands, network and housekeeping; unlike commandstats' usec, which is wall
  // time, it does not grow while a server waits for a core), us, per server.
  std::vector<double> process_cpu() const {
    std::vector<double> out;
    for (std::size_t i = 0; i < servers.size(); ++i)
      out.push_back(servers[i]->cpu_us() - cpu_before[i]);
    return out;
  }
  // Microseconds and calls since the snapshot, per command, for the commands named, on
  // server `i`.
  Stats since_on(std::size_t i, const std::set<std::string>& names) const {
    Stats out;
    for (const auto& [name, now] : servers[i]->commandstats()) {
      if (!names.contains(name)) continue;
      const auto it = before[i].find(name);
      const test::RedisServer::CommandStat was =
          it == before[i].end() ? test::RedisServer::CommandStat{} : it->second;
      if (now.calls > was.calls) out[name] = {now.calls - was.calls, now.usec - was.usec};
    }
    return out;
  }
  // The same, summed over every server.
  Stats since(const std::set<std::string>& names) const {
    Stats out;
    for (std::size_t i = 0; i < servers.size(); ++i) {
      for (const auto& [name, s] : since_on(i, names)) {
        out[name].calls += s.calls;
        out[name].usec += s.usec;
      }
    }
    return out;
  }
  static long long usec(const Stats& stats) {
    long long total = 0;
    for (const auto& [name, s] : stats) total += s.usec;
    return total;
  }
  static long long calls(const Stats& stats) {
    long long total = 0;
    for (const auto& [name, s] : stats) total += s.calls;
    return total;
  }
  static std::string breakdown(const Stats& stats, double per) {
    std::string out;
    for (const auto& [name, s] : stats) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%s %.2f/%.2f", out.empty() ? "" : ", ", name.c_str(),
                    double(s.calls) / per, double(s.usec) / per);
      out += buf;
    }
    return out + " (calls/us per unit)";
  }
};

// Sleeps until `offset` into the next subinterval of `resolution`.
inline void until_next_epoch(std::chrono::milliseconds resolution,
                             std::chrono::milliseconds offset) {
  const std::int64_t r = std::chrono::nanoseconds(resolution).count();
  const std::int64_t now = SystemClock::read();
  std::this_thread::sleep_for(std::chrono::nanoseconds(r - now % r) + offset);
}

// The commands an admitted request causes (boundary reads are GETs, counted apart).
inline const std::set<std::string> kWriteCommands = {"bitfield", "getex", "append", "pexpireat"};
// A token bucket's: its script, by SHA or (after NOSCRIPT) by text. (The commands the script
// calls are in its time, and counted apart as well: not added again.)
inline const std::set<std::string> kScriptCommands = {"evalsha", "eval"};

struct BoundaryFigures {
  std::vector<double> ms;
  std::vector<double> windows;
  std::vector<double> change_sets;
  std::vector<double> redis_ms;  // Redis' own time executing each read's commands
  std::vector<double> cpu_ms;    // the servers' process CPU time during each read
  double redis_us_per_key = 0;
};

// Watches `boundaries` boundary reads of `reader`, while `drive(epoch)` runs once per
// subinterval, `offset` after its start.
inline BoundaryFigures watch_boundaries(const std::vector<const test::RedisServer*>& servers,
                                        Engine& reader, const Limit& limit, int boundaries,
                                        std::chrono::milliseconds offset,
                                        const std::function<void()>& drive) {
  BoundaryFigures out;
  long long read_usec = 0;
  double keys = 0;
  for (int i = 0; i < boundaries; ++i) {
    until_next_epoch(limit.resolution(), offset);
    drive();
    const std::uint64_t seen = reader.stats().sync_rounds;
    const RedisCpu cpu{servers};
    const auto deadline = Steady::now() + limit.resolution() * 2;
    while (reader.stats().sync_rounds == seen && Steady::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const Stats s = reader.stats();
    if (s.sync_rounds == seen) continue;
    out.ms.push_back(double(s.sync_last_duration.count()) / 1e6);
    out.windows.push_back(double(s.sync_last_keys));
    out.change_sets.push_back(double(s.sync_last_change_sets));
    // The boundary read's commands: GET (change sets) and MGET (windows).
    const long long usec = RedisCpu::usec(cpu.since({"get", "mget"}));
    out.redis_ms.push_back(double(usec) / 1e3);
    double process = 0;
    for (const double c : cpu.process_cpu()) process += c;
    out.cpu_ms.push_back(process / 1e3);
    read_usec += usec;
    keys += double(s.sync_last_keys) + double(s.sync_last_change_sets);
  }
  out.redis_us_per_key = keys > 0 ? double(read_usec) / keys : 0;
  return out;
}

}  // namespace ratewin::bench
