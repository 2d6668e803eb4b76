// ratewin-bench accuracy: K engines sharing one Redis, compared with the exact model of
// their limit's algorithm over the requests they admitted, and drawn (--plot).
#include <cxxopts.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "bench.h"
#include "ratewin/engine.h"
#include "recording_clock.h"
#include "redis_server.h"
#include "sliding.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;

struct Event {
  std::int64_t t;
  bool allowed;
};

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// Max admitted in any sliding window of `interval` that starts at or after `from`.
std::size_t max_admitted(const std::vector<Event>& events, std::int64_t interval,
                         std::int64_t from = std::numeric_limits<std::int64_t>::min()) {
  std::vector<std::int64_t> times;
  for (const auto& e : events) {
    if (e.allowed && e.t >= from) times.push_back(e.t);
  }
  return test::max_in_window(std::move(times), interval);
}

// Max admitted in any fixed window [j x interval, (j + 1) x interval) on the shared clock.
std::size_t max_per_fixed_window(const std::vector<Event>& events, std::int64_t interval) {
  std::map<std::int64_t, std::size_t> per;
  std::size_t best = 0;
  for (const auto& e : events) {
    if (e.allowed) best = std::max(best, ++per[e.t / interval]);
  }
  return best;
}

// Rejections made while the exact window (t - interval, t] held fewer than max.
std::size_t false_rejections(const std::vector<Event>& events, std::int64_t interval,
                             std::uint64_t max) {
  std::size_t count = 0;
  std::size_t lo = 0;
  std::size_t admitted_in_window = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    while (events[lo].t <= events[i].t - interval) {
      if (events[lo].allowed) --admitted_in_window;
      ++lo;
    }
    if (events[i].allowed) {
      ++admitted_in_window;
    } else if (admitted_in_window + 1 <= max) {
      ++count;
    }
  }
  return count;
}

// Rejections made while the request's fixed window held fewer than max: the exact model
// of fixed_window.
std::size_t false_rejections_fixed(const std::vector<Event>& events, std::int64_t interval,
                                   std::uint64_t max) {
  std::size_t count = 0;
  std::int64_t window = std::numeric_limits<std::int64_t>::min();
  std::uint64_t admitted = 0;
  for (const auto& e : events) {
    if (e.t / interval != window) {
      window = e.t / interval;
      admitted = 0;
    }
    if (e.allowed) {
      ++admitted;
    } else if (admitted + 1 <= max) {
      ++count;
    }
  }
  return count;
}

// Rejections made while the token bucket that the admitted requests drew from had room
// for one: its level, in ns of refill, rises by the emission interval per admission and
// falls 1 ns per ns.
std::size_t false_rejections_bucket(const std::vector<Event>& events, const Limit& limit) {
  const std::int64_t emission = limit.emission_ns();
  const std::int64_t tolerance = limit.tolerance_ns();
  std::size_t count = 0;
  std::int64_t level = 0;
  std::int64_t last = events.empty() ? 0 : events.front().t;
  for (const auto& e : events) {
    level = std::max<std::int64_t>(0, level - (e.t - last));
    last = e.t;
    if (e.allowed) {
      level += emission;
    } else if (level + emission <= tolerance) {
      ++count;
    }
  }
  return count;
}

// The token bucket's bound, burst + d / emission admitted in any span d: the most
// admitted in a span beyond d / emission, over the burst (at most 1).
double bucket_excess(const std::vector<Event>& events, const Limit& limit) {
  std::vector<std::int64_t> times;
  for (const auto& e : events) {
    if (e.allowed) times.push_back(e.t);
  }
  const std::int64_t emission = limit.emission_ns();
  std::int64_t worst = 0;
  for (std::size_t a = 0; a < times.size(); ++a) {
    for (std::size_t b = a; b < times.size(); ++b) {
      const auto admitted = static_cast<std::int64_t>(b - a + 1);
      worst = std::max(worst, admitted - (times[b] - times[a]) / emission);
    }
  }
  return double(worst) / double(limit.burst());
}

// The false rejections of `events` against the exact model of `limit`'s algorithm: an
// exact sliding window, for fixed_window the fixed window itself, for token_bucket the
// bucket.
std::size_t false_rejections_for(const Limit& limit, const std::vector<Event>& events) {
  const std::int64_t interval = std::chrono::nanoseconds(limit.interval()).count();
  switch (limit.algorithm()) {
    case Algorithm::fixed_window:
      return false_rejections_fixed(events, interval, limit.max());
    case Algorithm::token_bucket:
      return false_rejections_bucket(events, limit);
    case Algorithm::sliding_window:
    case Algorithm::strict_window:
    case Algorithm::sliding_log:
      break;
  }
  return false_rejections(events, interval, limit.max());
}

// An exact sliding window (a log of admission times) deciding the same arrivals: what the
// plots draw next to each algorithm.
std::vector<Event> replay_exact(const Limit& limit, const std::vector<Event>& trace) {
  const std::int64_t interval = std::chrono::nanoseconds(limit.interval()).count();
  std::deque<std::int64_t> log;
  std::vector<Event> out;
  out.reserve(trace.size());
  for (const Event& e : trace) {
    while (!log.empty() && log.front() <= e.t - interval) log.pop_front();
    const bool allowed = log.size() < limit.max();
    if (allowed) log.push_back(e.t);
    out.push_back({e.t, allowed});
  }
  return out;
}

// The estimator alone, for comparison with (c): one local engine on a manual clock,
// `arrivals` Poisson arrivals at `load` x the limit's rate starting at a random phase,
// with exact arrival times. Returns its false-rejection rate in percent.
double estimator_false_rejections(const Limit& limit, double load, int arrivals) {
  const std::int64_t interval = std::chrono::nanoseconds(limit.interval()).count();
  auto clock = std::make_shared<ManualClock>(std::chrono::seconds(1'700'000'000));
  Options o;
  o.clock = clock;
  Engine engine(o);
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> gap(load * double(limit.max()) / (double(interval) / 1e9));
  std::uniform_int_distribution<std::int64_t> phase(0, interval);
  std::vector<Event> events;
  events.reserve(static_cast<std::size_t>(arrivals));
  std::int64_t t = clock->now().count() + phase(rng);
  for (int i = 0; i < arrivals; ++i) {
    t += static_cast<std::int64_t>(gap(rng) * 1e9);
    clock->set(std::chrono::nanoseconds(t));
    events.push_back({t, engine.try_acquire(std::uint64_t{1}, limit).allowed});
  }
  return 100.0 * double(false_rejections_for(limit, events)) / double(arrivals);
}

// The estimator alone on the very arrivals of a run with K engines: one local engine on a
// manual clock decides the same request times. Its false rejections on that trace are
// what a single node would have made; the difference to the K engines' is what sharing
// adds, without the sampling noise of comparing two different traces.
std::vector<Event> replay_alone(const Limit& limit, const std::vector<Event>& trace) {
  auto clock = std::make_shared<ManualClock>(std::chrono::nanoseconds(trace.front().t));
  Options o;
  o.clock = clock;
  Engine engine(o);
  std::vector<Event> out;
  out.reserve(trace.size());
  for (const Event& e : trace) {
    clock->set(std::chrono::nanoseconds(e.t));
    out.push_back({e.t, engine.try_acquire(std::uint64_t{1}, limit).allowed});
  }
  return out;
}

class Scenario {
 public:
  // The engines share this machine's clock and do not sync it with Redis (which runs on
  // the same machine): they decide on the very times recorded (RecordingClock), so the
  // exact models are checked exactly. Each scenario has a key prefix of its own, so that
  // its engines count only each other live; in batched mode it starts once every engine
  // has (until then they write as sync mode does).
  Scenario(const std::string& url, int engines, const Limit& limit, WriteMode mode = WriteMode::sync)
      : limit_(limit) {
    static int made = 0;
    Options o;
    o.redis = url;
    o.key_prefix = "accuracy" + std::to_string(++made);
    o.write_mode = mode;
    o.clock = std::make_shared<test::RecordingClock>();
    o.sync_clock = false;
    // A write that times out is decided on local counts (the local failure policy), which
    // is not the algorithm's accuracy: generous, so that a loaded machine does not stall
    // one that long.
    o.command_timeout = std::chrono::seconds(1);
    o.logger = [](LogLevel, std::string_view) {};
    for (int i = 0; i < engines; ++i) engines_.push_back(std::make_unique<Engine>(o));
    if (mode == WriteMode::batched) {
      const auto ready_by = std::chrono::steady_clock::now() + 10s;
      const auto all_live = [&] {
        for (const auto& e : engines_)
          if (e->stats().live_nodes != static_cast<std::uint64_t>(engines)) return false;
        return true;
      };
      while (!all_live() && std::chrono::steady_clock::now() < ready_by)
        std::this_thread::sleep_for(20ms);
    }
  }
  // Each engine's thread offers requests with Poisson arrivals at `rate_per_engine` per
  // second for `duration`, on `resource`. Returns every decision at its engine's time,
  // sorted by time.
  std::vector<Event> poisson(const std::string& resource, double rate_per_engine,
                             std::chrono::nanoseconds duration) {
    return poisson_shared(resource, rate_per_engine * static_cast<double>(engines_.size()),
                          1.0 / static_cast<double>(engines_.size()), duration);
  }
  // As poisson(), `total_rate` per second in all, engine 0 taking `first` of it and the
  // others the rest evenly (with one engine, all of it).
  std::vector<Event> poisson_shared(const std::string& resource, double total_rate, double first,
                                    std::chrono::nanoseconds duration) {
    const auto k = static_cast<double>(engines_.size());
    const auto rate_of = [&](std::size_t i) {
      if (engines_.size() == 1) return total_rate;
      return i == 0 ? total_rate * first : total_rate * (1 - first) / (k - 1);
    };
    std::vector<std::vector<Event>> per(engines_.size());
    std::barrier start(static_cast<std::ptrdiff_t>(engines_.size()));
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      threads.emplace_back([&, i] {
        std::mt19937_64 rng(1000 + i);  // the same arrivals every run
        std::exponential_distribution<double> gap(rate_of(i));
        start.arrive_and_wait();
        const auto begin = std::chrono::steady_clock::now();
        auto next = begin;
        while (true) {
          next += std::chrono::nanoseconds(static_cast<std::int64_t>(gap(rng) * 1e9));
          if (next - begin > duration) break;
          std::this_thread::sleep_until(next);
          const bool allowed = engines_[i]->try_acquire(resource, limit_).allowed;
          per[i].push_back({test::RecordingClock::last(), allowed});
        }
      });
    }
    for (auto& t : threads) t.join();
    return merge(per);
  }
  // The attack on the interpolation: once the engines' clock is within `lead` of a
  // subinterval's end, the engines send `count` requests between them at once, then one
  // every R / 100 between them, for `duration`. Returns every decision at its engine's
  // time, sorted by time.
  std::vector<Event> timed_bursts(const std::string& resource, int count,
                                  std::chrono::nanoseconds lead, std::chrono::nanoseconds duration) {
    const std::int64_t r = limit_.resolution_ns();
    const auto k = static_cast<int>(engines_.size());
    // The start: the next subinterval end at least 2 leads away, less the lead.
    const std::int64_t now = SystemClock::read();
    std::int64_t end = (now / r + 1) * r;
    if (end - now < 2 * lead.count()) end += r;
    const auto begin = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(end - lead.count() - now);
    std::vector<std::vector<Event>> per(engines_.size());
    std::vector<std::thread> threads;
    for (int i = 0; i < k; ++i) {
      threads.emplace_back([&, i] {
        Engine& engine = *engines_[static_cast<std::size_t>(i)];
        std::vector<Event>& out = per[static_cast<std::size_t>(i)];
        std::this_thread::sleep_until(begin);
        for (int n = i; n < count; n += k) {
          const bool allowed = engine.try_acquire(resource, limit_).allowed;
          out.push_back({test::RecordingClock::last(), allowed});
        }
        const std::chrono::nanoseconds gap(r / 100 * k);
        auto next = begin + std::chrono::nanoseconds(r / 100 * i);
        while ((next += gap) - begin < duration) {
          std::this_thread::sleep_until(next);
          const bool allowed = engine.try_acquire(resource, limit_).allowed;
          out.push_back({test::RecordingClock::last(), allowed});
        }
      });
    }
    for (auto& t : threads) t.join();
    return merge(per);
  }
  // Every engine offered `count` requests at once, as fast as it can. `took` is how long
  // that took, from the common start.
  // Returns every decision at its engine's time, sorted by time.
  std::vector<Event> burst(const std::string& resource, int count, std::chrono::nanoseconds& took) {
    const auto begin = std::chrono::steady_clock::now();
    std::vector<std::vector<Event>> per(engines_.size());
    std::barrier start(static_cast<std::ptrdiff_t>(engines_.size()));
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        for (int k = 0; k < count; ++k) {
          const bool allowed = engines_[i]->try_acquire(resource, limit_).allowed;
          per[i].push_back({test::RecordingClock::last(), allowed});
        }
      });
    }
    for (auto& t : threads) t.join();
    took = std::chrono::steady_clock::now() - begin;
    return merge(per);
  }

 private:
  static std::vector<Event> merge(std::vector<std::vector<Event>>& per) {
    std::vector<Event> all;
    for (auto& p : per) all.insert(all.end(), p.begin(), p.end());
    std::sort(all.begin(), all.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
    return all;
  }

  Limit limit_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

// What a plot panel draws: the overload run of one algorithm with K engines, and an exact
// sliding window deciding the same arrivals.
struct Panel {
  Limit limit;
  int engines;
  const char* mode;  // the write mode
  std::vector<Event> overload;
  std::vector<Event> exact;
};

// "seconds count" rows: how many were admitted in the sliding window (t - interval, t],
// at every instant it changes (an admission enters, or leaves `interval` later), up to the
// run's last decision.
void write_series(std::string& out, const std::vector<Event>& events, std::int64_t interval,
                  std::int64_t origin) {
  std::vector<std::int64_t> times;
  for (const Event& e : events) {
    if (e.allowed) times.push_back(e.t);
  }
  const std::int64_t end = events.back().t;
  std::size_t in = 0;
  std::size_t out_of = 0;
  char row[64];
  while (in < times.size()) {
    // At an instant where one admission leaves and another enters, the leaving goes first.
    const bool leaves = times[out_of] + interval <= times[in];
    const std::int64_t t = leaves ? times[out_of++] + interval : times[in++];
    if (t > end) break;
    std::snprintf(row, sizeof row, "%.6f %zu\n", double(t - origin) / 1e9, in - out_of);
    out += row;
  }
  out += "EOD\n";
}

// Draws every panel into one SVG (or PNG, by the path's extension) with gnuplot (Debian's
// gnuplot-nox). False if it failed.
bool plot(const std::vector<Panel>& panels, const std::string& path) {
  std::string script;
  const bool png = path.size() > 4 && path.compare(path.size() - 4, 4, ".png") == 0;
  script += (png ? "set terminal pngcairo size 900," : "set terminal svg dynamic size 900,") +
            std::to_string(260 * panels.size() + 40) + " font 'sans,10'\n";
  script += "set output '" + path + "'\n";
  script += "set multiplot layout " + std::to_string(panels.size()) + ",1\n";
  script += "set termoption noenhanced\nset key inside bottom right horizontal\nset grid ytics\n";
  script += "set xlabel 'seconds'\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const Panel& p = panels[i];
    const std::int64_t interval = std::chrono::nanoseconds(p.limit.interval()).count();
    const std::int64_t origin = p.overload.front().t;
    const std::string n = std::to_string(i);
    script += "$run" + n + " << EOD\n";
    write_series(script, p.overload, interval, origin);
    script += "$exact" + n + " << EOD\n";
    write_series(script, p.exact, interval, origin);
    const std::string seconds = std::to_string(double(interval) / 1e9);
    script += "set title '" + std::string(algorithm_name(p.limit.algorithm())) + ", " +
              std::to_string(p.engines) + " engines, " + p.mode +
              " writes, 10x overload: admitted in the last " +
              seconds.substr(0, seconds.find_last_not_of('0') + 1) + " s'\n";
    script +=
        "set ylabel 'admitted'\nset yrange [0:" + std::to_string(p.limit.max() * 22 / 10) + "]\n";
    script += "plot $run" + n + " using 1:2 with steps lw 1.5 lc rgb '#1f77b4' title '" +
              std::string(algorithm_name(p.limit.algorithm())) + "', $exact" + n +
              " using 1:2 with steps lw 1 lc rgb '#2ca02c' title 'exact window, same arrivals', " +
              std::to_string(p.limit.max()) + " with lines dt 2 lc rgb '#d62728' title 'limit'\n";
  }
  script += "unset multiplot\n";
  FILE* gnuplot = popen("gnuplot", "w");
  if (gnuplot == nullptr) return false;
  const bool wrote = std::fwrite(script.data(), 1, script.size(), gnuplot) == script.size();
  return pclose(gnuplot) == 0 && wrote;
}

std::vector<WriteMode> write_modes_of(const std::string& text) {
  std::vector<WriteMode> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "sync") {
      out.push_back(WriteMode::sync);
    } else if (item == "batched") {
      out.push_back(WriteMode::batched);
    } else {
      throw std::invalid_argument("unknown write mode '" + item + "' (sync, batched)");
    }
  }
  return out;
}

std::vector<Algorithm> algorithms_of(const std::string& text) {
  if (text == "all")
    return {Algorithm::sliding_window, Algorithm::strict_window, Algorithm::fixed_window,
            Algorithm::token_bucket, Algorithm::sliding_log};
  std::vector<Algorithm> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    Algorithm a{};
    if (!parse_algorithm(item, a)) {
      throw std::invalid_argument("unknown algorithm '" + item +
                                  "' (sliding_window, strict_window, fixed_window, token_bucket, "
                                  "sliding_log or all)");
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

// The outage scenario: K engines under 10x overload on one limit, Redis killed (or
// paused) for `outage`, then back; one run per failure policy. The figures: the most
// admitted in any sliding window over the whole run (the outage and its edges included),
// over the limit; the same from two windows after Redis is back (recovery); the longest
// call (never past the command timeout); the share of degraded decisions.
void run_outage(const cxxopts::ParseResult& args, double scale, test::RedisServer& redis,
               Algorithm algorithm) {
  const auto outage =
      std::chrono::milliseconds(std::llround(1000.0 * args["outage"].as<double>()));
  const int k = args["outage-engines"].as<int>();
  if (k < 1) throw std::invalid_argument("--outage-engines must be at least 1");
  const auto ms = [&](double v) { return std::chrono::milliseconds(std::llround(v * scale)); };
  const auto seconds = [](std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1e3; };
  const std::uint64_t max = 100;
  const double limit_rate = double(max) / (10.0 * scale);  // per second
  const auto warm = std::max<std::chrono::milliseconds>(ms(30'000), 2500ms);
  const auto recovery = std::max<std::chrono::milliseconds>(ms(50'000), 3000ms);
  constexpr auto kDeadline = 100ms;
  std::printf("ratewin-bench accuracy --outage: %d engines, 10x overload of 100 per %lld ms "
              "(%s), Redis down for %.1f s after %.1f s, then %.1f s back; command "
              "timeout %lld ms\n\n",
              k, static_cast<long long>(ms(10'000).count()), algorithm_name(algorithm),
              seconds(outage), seconds(warm),
              seconds(recovery), static_cast<long long>(kDeadline.count()));
  std::printf("%-8s %-12s %12s %12s %14s %12s %10s %10s %10s\n", "outage", "policy",
              "worst window", "until back", "after recovery", "longest call", "degraded", "live nodes", "requests");
  const FailurePolicy policies[] = {FailurePolicy::local, FailurePolicy::open,
                                    FailurePolicy::closed, FailurePolicy::partitioned};
  const char* const names[] = {"local", "open", "closed", "partitioned"};
  int run = 0;
  bool missed = false;
  for (const bool pause : {false, true}) {
    for (std::size_t p = 0; p < std::size(policies); ++p) {
      const Limit limit = Limit(max, ms(10'000), ms(1'000))
                              .with_algorithm(algorithm)
                              .with_failure_policy(policies[p]);
      const std::int64_t interval = std::chrono::nanoseconds(limit.interval()).count();
      Options o;
      o.redis = redis.url();
      o.key_prefix = "outage" + std::string(algorithm_name(algorithm)) +
                     std::to_string(++run);  // (live counts apart)
      o.clock = std::make_shared<test::RecordingClock>();
      o.sync_clock = false;
      o.command_timeout = kDeadline;
      o.logger = [](LogLevel, std::string_view) {};
      std::vector<std::unique_ptr<Engine>> engines;
      for (int i = 0; i < k; ++i) engines.push_back(std::make_unique<Engine>(o));
      // Every engine has counted the others live before the outage.
      const auto ready_by = std::chrono::steady_clock::now() + 10s;
      std::uint64_t live = 0;
      while (std::chrono::steady_clock::now() < ready_by) {
        live = UINT64_MAX;
        for (const auto& e : engines) live = std::min(live, e->stats().live_nodes);
        if (live == static_cast<std::uint64_t>(k)) break;
        std::this_thread::sleep_for(20ms);
      }
      std::vector<std::vector<Event>> per(engines.size());
      std::vector<std::int64_t> longest(engines.size(), 0);
      std::vector<std::uint64_t> degraded(engines.size(), 0);
      std::barrier start(static_cast<std::ptrdiff_t>(engines.size()) + 1);
      const auto total = warm + outage + recovery;
      std::vector<std::thread> threads;
      for (std::size_t i = 0; i < engines.size(); ++i) {
        threads.emplace_back([&, i] {
          std::mt19937_64 rng(2000 + i);
          std::exponential_distribution<double> gap(10 * limit_rate / k);
          start.arrive_and_wait();
          const auto begin = std::chrono::steady_clock::now();
          auto next = begin;
          while (true) {
            next += std::chrono::nanoseconds(static_cast<std::int64_t>(gap(rng) * 1e9));
            if (next - begin > total) break;
            std::this_thread::sleep_until(next);
            const auto called = std::chrono::steady_clock::now();
            const Decision d = engines[i]->try_acquire("hot", limit);
            longest[i] = std::max<std::int64_t>(
                longest[i], (std::chrono::steady_clock::now() - called).count());
            if (d.degraded) ++degraded[i];
            per[i].push_back({test::RecordingClock::last(), d.allowed});
          }
        });
      }
      start.arrive_and_wait();
      std::this_thread::sleep_for(warm);
      if (pause) {
        redis.pause();
      } else {
        redis.stop(true);
      }
      std::this_thread::sleep_for(outage);
      if (pause) {
        redis.resume();
      } else if (!redis.start()) {
        throw std::runtime_error(test::server_programs().server + " did not start again");
      }
      const std::int64_t back = SystemClock::read();
      for (auto& t : threads) t.join();
      std::vector<Event> all;
      for (auto& e : per) all.insert(all.end(), e.begin(), e.end());
      std::sort(all.begin(), all.end(), [](const Event& a, const Event& b) { return a.t < b.t; });
      const double worst = double(max_admitted(all, interval, INT64_MIN)) / double(max);
      std::vector<Event> until_back;
      for (const Event& e : all)
        if (e.t < back) until_back.push_back(e);
      const double during = double(max_admitted(until_back, interval, INT64_MIN)) / double(max);
      const double after = double(max_admitted(all, interval, back + 2 * interval)) / double(max);
      const std::int64_t call = *std::max_element(longest.begin(), longest.end());
      std::uint64_t down = 0;
      for (const std::uint64_t d : degraded) down += d;
      std::printf("%-8s %-12s %12.3f %12.3f %14.3f %9.1f ms %9.1f%% %10llu %10zu\n",
                  pause ? "paused" : "killed", names[p], worst, during, after,
                  static_cast<double>(call) / 1e6,
                  100.0 * double(down) / double(all.size()), static_cast<unsigned long long>(live),
                  all.size());
      if (policies[p] == FailurePolicy::partitioned && worst > 1.15) missed = true;
    }
  }
  std::printf("\ntarget: partitioned's worst window at most 1.15x the limit (%s); a call never "
              "much past the %lld ms deadline\n\n",
              missed ? "MISSES target" : "meets target", static_cast<long long>(kDeadline.count()));
}

int run_accuracy(const cxxopts::ParseResult& args) {
  const double scale = args["scale"].as<double>();
  const std::vector<int> counts = parse_list(args["engines"].as<std::string>());
  const std::vector<Algorithm> algorithms = algorithms_of(args["algorithm"].as<std::string>());
  std::unique_ptr<test::RedisServer> own;
  std::string url = args["redis"].as<std::string>();
  if (url.empty()) {
    own = std::make_unique<test::RedisServer>();
    url = own->url();
  }
  if (args["outage"].as<double>() > 0) {
    // (It stops and starts Redis: only its own.)
    if (own == nullptr) throw std::invalid_argument("--outage needs a private Redis: leave --redis out");
    for (const Algorithm algorithm : algorithms_of(args["algorithm"].as<std::string>()))
      run_outage(args, scale, *own, algorithm);
    return 0;
  }
  // The scenario: 100 per 10 s at 1 s resolution, time scaled by --scale.
  const auto ms = [&](double v) { return std::chrono::milliseconds(std::llround(v * scale)); };
  const std::uint64_t max = 100;
  const double limit_rate = double(max) / (10.0 * scale);  // per second
  const auto overload_for = ms(40'000);
  const auto steady_for = ms(1000.0 * args["steady-seconds"].as<double>());

  std::ostringstream csv;
  csv << "algorithm,scenario,engines,value,target,requests,write_mode\n";
  std::vector<Panel> panels;
  std::vector<std::string> exceeded;
  int run = 0;
  for (const WriteMode mode : write_modes_of(args["write-mode"].as<std::string>())) {
    const bool batched = mode == WriteMode::batched;
    const char* mode_name = batched ? "batched" : "sync";
    for (const Algorithm algorithm : algorithms) {
      const Limit limit = Limit(max, ms(10'000), ms(1'000)).with_algorithm(algorithm);
      const char* name = algorithm_name(algorithm);
      if (batched && algorithm != Algorithm::sliding_window && algorithm != Algorithm::fixed_window) {
        std::printf("ratewin-bench accuracy: %s is written as in sync mode in batched mode: "
                    "not run again\n\n", name);
        continue;
      }
      const bool fixed = algorithm == Algorithm::fixed_window;
      const bool bucket = algorithm == Algorithm::token_bucket;
      // The exact algorithms' promise: never more than max in their windows (a token
      // bucket: burst + d x rate in any span d).
      const bool exact = algorithm != Algorithm::sliding_window;
      const std::int64_t interval = std::chrono::nanoseconds(limit.interval()).count();
      std::printf("ratewin-bench accuracy: %s, limit %s, %s write mode, time scale %.2f, Redis %s\n\n",
                  name, limit.to_string().c_str(), mode_name, scale, url.c_str());
      std::printf("%-44s %8s %10s %8s %10s\n", "scenario", "engines", "value", "target", "requests");
      const auto row = [&](const char* what, int k, double value, const std::string& target,
                           std::size_t requests, const char* unit = "") {
        std::printf("%-44s %8d %9.3f%1s %8s %10s\n", what, k, value, unit, target.c_str(),
                    requests != 0 ? std::to_string(requests).c_str() : "");
      };
      const auto record = [&](const std::string& scenario, int k, double value,
                              const std::string& target, std::size_t requests) {
        csv << name << ',' << scenario << ',' << k << ',' << value << ',' << target << ',' << requests
            << ',' << mode_name << "\n";
      };
      const auto bound = [&](const std::string& what, int k, double value, double most = 1.0) {
        if (value > most)
          exceeded.push_back(std::string(name) + " (" + mode_name + "): " + what + " with " +
                             std::to_string(k) + " engines: " + std::to_string(value));
      };
      for (const int k : counts) {
        Scenario scenario(url, k, limit, mode);
        const std::string tag = std::string(name) + ":" + std::to_string(++run);
        const auto overload = scenario.poisson("overload:" + tag, 10 * limit_rate / k, overload_for);
        const std::vector<Event> overload_alone = replay_alone(limit, overload);
        // (a) the most admitted in any window of the algorithm's model, over the limit (a
        // token bucket: beyond the rate in any span, over the burst).
        const auto worst = [&](const std::vector<Event>& events, std::int64_t from) {
          if (bucket) {
            std::vector<Event> after;
            for (const Event& e : events)
              if (e.t >= from) after.push_back(e);
            return bucket_excess(after, limit);
          }
          return double(fixed ? max_per_fixed_window(events, interval)
                              : max_admitted(events, interval, from)) /
                 double(max);
        };
        const std::int64_t past_start = overload.front().t + 2 * interval;
        const double a = worst(overload, std::numeric_limits<std::int64_t>::min());
        const double a_steady = worst(overload, past_start);
        const double a_alone = worst(overload_alone, std::numeric_limits<std::int64_t>::min());
        const double a_sliding = double(max_admitted(overload, interval)) / double(max);
        // (b) what K x max requests at once admitted, over the limit (a token bucket: over
        // its burst and what refilled while the burst ran).
        // (A fixed window's: in any one fixed window, as a burst may cross a boundary.)
        std::chrono::nanoseconds took{0};
        const std::vector<Event> burst = scenario.burst("burst:" + tag, static_cast<int>(max), took);
        const auto burst_admitted = double(
            fixed ? max_per_fixed_window(burst, interval)
                  : static_cast<std::size_t>(std::count_if(
                        burst.begin(), burst.end(), [](const Event& e) { return e.allowed; })));
        const std::uint64_t burst_bound =
            bucket ? limit.burst() + static_cast<std::uint64_t>(took.count() / limit.emission_ns())
                   : max;
        const double b = burst_admitted / double(burst_bound);
        const auto steady = scenario.poisson("steady:" + tag, 0.8 * limit_rate / k, steady_for);
        const double c = 100.0 * double(false_rejections_for(limit, steady)) / double(steady.size());
        const double c_alone = 100.0 *
                               double(false_rejections_for(limit, replay_alone(limit, steady))) /
                               double(steady.size());
        const double c_steady_worst = worst(steady, std::numeric_limits<std::int64_t>::min());
        // (c) again with 90% of the traffic on one engine (the rest spread evenly).
        const auto skewed =
            scenario.poisson_shared("skewed:" + tag, 0.8 * limit_rate, 0.9, steady_for);
        const double c_skewed =
            100.0 * double(false_rejections_for(limit, skewed)) / double(skewed.size());
        // (d) the quota at once, a quarter of a subinterval before one ends (so that even
        // through Redis it is in before the end), then R / 100 apart: the interpolation took
        // the quota for spread over its subinterval and admitted up to 1.75 x max.
        const auto timed = scenario.timed_bursts("timed:" + tag, static_cast<int>(max),
                                                 ms(250), 2 * limit.interval());
        const double d = worst(timed, std::numeric_limits<std::int64_t>::min());
        const double d_alone = worst(replay_alone(limit, timed), std::numeric_limits<std::int64_t>::min());
        const std::string a_target = batched ? "sync+0.05" : exact ? "<= 1" : "<= 1.05";
        row(bucket  ? "(a) 10x overload: excess over rate / burst"
            : fixed ? "(a) 10x overload: max fixed window / limit"
                    : "(a) 10x overload: max window / limit",
            k, a, a_target, overload.size());
        row("    same, windows after the first two", k, a_steady, "", 0);
        row("    one engine alone, same arrivals", k, a_alone, "", 0);
        if (fixed || bucket) row("    max in any sliding window / limit", k, a_sliding, "", 0);
        row(bucket  ? "(b) cold burst: admitted / (burst + refill)"
            : fixed ? "(b) cold burst: max fixed window / limit"
                    : "(b) cold burst: admitted / limit",
            k, b, batched ? "<= 1.10" : "<= 1", static_cast<std::size_t>(k) * max);
        row("(c) 0.8x Poisson: false rejections", k, c,
            batched ? "sync+0.5" : exact ? "" : "<= 0.1%", steady.size(), "%");
        row("    one engine alone, same arrivals", k, c_alone, "", 0, "%");
        row(bucket ? "    excess over rate / burst at 0.8x" : "    max window / limit at 0.8x", k,
            c_steady_worst, exact ? "<= 1" : "", 0);
        row("    90% on one engine: false rejections", k, c_skewed, batched ? "sync+1" : "",
            skewed.size(), "%");
        row(bucket  ? "(d) timed bursts: excess over rate / burst"
            : fixed ? "(d) timed bursts: max fixed window / limit"
                    : "(d) timed bursts: max window / limit",
            k, d, exact ? "<= 1" : "<= 1.25", timed.size());
        row("    one engine alone, same arrivals", k, d_alone, "", 0);
        record("overload_max_window_over_limit", k, a, exact ? "1" : "1.05", overload.size());
        record("overload_steady_max_window_over_limit", k, a_steady, "", overload.size());
        record("overload_max_window_over_limit_alone_same_arrivals", k, a_alone, "", overload.size());
        record("overload_max_sliding_window_over_limit", k, a_sliding, "", overload.size());
        record("cold_burst_admitted_over_limit", k, b, "1", static_cast<std::size_t>(k) * max);
        record("poisson_false_rejection_percent", k, c, exact ? "" : "0.1", steady.size());
        record("poisson_false_rejection_percent_alone_same_arrivals", k, c_alone, "", steady.size());
        record("poisson_max_window_over_limit", k, c_steady_worst, exact ? "1" : "", steady.size());
        record("poisson_skewed_false_rejection_percent", k, c_skewed, "", skewed.size());
        record("timed_bursts_max_window_over_limit", k, d, exact ? "1" : "1.25", timed.size());
        record("timed_bursts_max_window_over_limit_alone_same_arrivals", k, d_alone, "", timed.size());
        // Every algorithm admits a cold burst exactly (each admission stands on its own
        // write's shared counts); the exact ones never exceed their windows.
        bound("(b) cold burst", k, b, batched ? 1.10 : 1.0);
        if (exact && !batched) {
          bound("(a) 10x overload", k, a);
          bound("(c) 0.8x Poisson", k, c_steady_worst);
          bound("(d) timed bursts", k, d);
        }
        if (k == counts.back()) panels.push_back({limit, k, mode_name, overload, replay_exact(limit, overload)});
      }
      constexpr int kSimulated = 2'000'000;
      const double intrinsic = estimator_false_rejections(limit, 0.8, kSimulated);
      std::printf("%-44s %8s %9.3f%% %8s %10d\n\n", "(c) the algorithm alone (manual clock)", "-",
                  intrinsic, "", kSimulated);
      record("estimator_false_rejection_percent", 0, intrinsic, "", kSimulated);
    }
  }
  std::printf(
      "(a) is the most admitted in any sliding window of the interval (for fixed_window, in any"
      " fixed window; for token_bucket, admitted in any span d beyond d x rate, over the burst),"
      " (c) counts rejections the algorithm's exact model would have admitted (an exact sliding"
      " window; for fixed_window the fixed window; for token_bucket the bucket the admitted"
      " requests drew from). (c) with K engines"
      " against one alone: the target is at most 0.1 percentage points more, compared on the"
      " same arrivals (a run of n requests at rate p counts about p n +- 2 sqrt(p n) false"
      " rejections: use --scale 0.1 --steady-seconds 1200 for about 9,500 requests per K)\n");
  const std::string csv_path = args["csv"].as<std::string>();
  if (!csv_path.empty()) {
    std::ofstream(csv_path) << csv.str();
    std::printf("\nCSV written to %s\n", csv_path.c_str());
  }
  const std::string plot_path = args["plot"].as<std::string>();
  if (!plot_path.empty()) {
    if (!plot(panels, plot_path)) {
      std::fprintf(stderr, "ratewin-bench: gnuplot failed to draw %s (Debian: gnuplot-nox)\n",
                   plot_path.c_str());
      return 2;
    }
    std::printf("Plot written to %s\n", plot_path.c_str());
  }
  for (const std::string& e : exceeded) std::printf("BOUND EXCEEDED: %s\n", e.c_str());
  return exceeded.empty() ? 0 : 1;
}

}  // namespace ratewin::bench
