// ratewin-bench capi: the C ABI (libratewin.so, ratewin.h) against the C++ call it
// wraps, in the same run: the same limits and resources on two engines of the same
// configuration, one opened through each API.
#include <ratewin.h>

#include <cxxopts.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include "bench.h"
#include "ratewin/engine.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;

void check(int rc, char* message, const char* what) {
  if (rc == RATEWIN_OK) return;
  std::string text =
      std::string(what) + ": " + ratewin_err_name(rc) + " " + (message ? message : "");
  ratewin_free(message);
  throw std::runtime_error(text);
}

ratewin_limit* c_limit(std::uint64_t max, std::uint64_t interval_ms, std::uint64_t resolution_ms) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  o.max = max;
  o.interval_ms = interval_ms;
  o.resolution_ms = resolution_ms;
  ratewin_limit* limit = nullptr;
  char* message = nullptr;
  check(ratewin_limit_new(&o, &limit, &message), message, "ratewin_limit_new");
  return limit;
}

}  // namespace

int run_capi(const cxxopts::ParseResult& args) {
  const int runs = args["runs"].as<int>();
  const double run_ms = args["run-ms"].as<double>();

  // C++: the engine and limits ratewin-bench local uses for its hot resources.
  Engine engine;
  const Limit strict(1000, 1s, 100ms);
  const Limit loose(Limit::kMaxCount, 60s, 5s);
  // C: the same, through the shared library.
  ratewin_engine* c_engine = nullptr;
  char* message = nullptr;
  check(ratewin_engine_open(nullptr, &c_engine, &message), message, "ratewin_engine_open");
  ratewin_limit* c_strict = c_limit(1000, 1000, 100);
  ratewin_limit* c_loose = c_limit(Limit::kMaxCount, 60000, 5000);

  const char* reject_name = "hot:reject";
  const char* allow_name = "hot:allow";
  const std::uint64_t hot_reject = hash(reject_name);
  const std::uint64_t hot_allow = hash(allow_name);
  LimiterHandle reject_handle = engine.limiter(hot_reject, strict);
  ratewin_limiter* c_reject_handle = nullptr;
  check(ratewin_limiter_open(c_engine, hot_reject, c_strict, &c_reject_handle, &message), message,
        "ratewin_limiter_open");

  std::vector<Case> cases;
  auto add = [&](const char* name, auto call) {
    cases.push_back({name, 1, [call](std::uint64_t n) {
                       return run_threads(1, n, [&](int, std::uint64_t k) {
                         std::uint64_t allowed = 0;
                         for (std::uint64_t i = 0; i < k; ++i) allowed += call() ? 1U : 0U;
                         keep(allowed);
                       });
                     }});
  };
  // A C caller's decision struct, initialised once and reused (as a loop in C would).
  auto c_call = [](auto fn) {
    return [fn] {
      thread_local ratewin_decision d = [] {
        ratewin_decision init;
        ratewin_decision_init(&init);
        return init;
      }();
      if (fn(&d) != RATEWIN_OK) throw std::runtime_error("C call failed");
      return d.allowed != 0;
    };
  };
  // Pairs: C++ then C, compared in order.
  add("reject, hot resource, by id: C++",
      [&] { return engine.try_acquire(hot_reject, strict).allowed; });
  add("reject, hot resource, by id: C", c_call([&](ratewin_decision* d) {
        return ratewin_engine_try_acquire(c_engine, hot_reject, c_strict, 1, d, nullptr);
      }));
  add("reject, hot resource, by name: C++",
      [&] { return engine.try_acquire(std::string_view(reject_name), strict).allowed; });
  add("reject, hot resource, by name: C", c_call([&](ratewin_decision* d) {
        return ratewin_engine_try_acquire_name(c_engine, reject_name, std::strlen(reject_name),
                                               c_strict, 1, d, nullptr);
      }));
  add("reject, hot resource, limiter handle: C++",
      [&] { return reject_handle.try_acquire().allowed; });
  add("reject, hot resource, limiter handle: C", c_call([&](ratewin_decision* d) {
        return ratewin_limiter_try_acquire(c_reject_handle, 1, d, nullptr);
      }));
  add("allow, hot resource, by id: C++",
      [&] { return engine.try_acquire(hot_allow, loose).allowed; });
  add("allow, hot resource, by id: C", c_call([&](ratewin_decision* d) {
        return ratewin_engine_try_acquire(c_engine, hot_allow, c_loose, 1, d, nullptr);
      }));

  measure(cases, runs, run_ms);

  std::printf(
      "ratewin-bench capi: medians of %d rounds; C / C++ = median of the per-round ratios of"
      " ns per call\n\n",
      runs);
  std::printf("%-44s %9s %9s %9s\n", "case", "C++ ns", "C ns", "C / C++");
  double worst = 0;
  for (std::size_t i = 0; i + 1 < cases.size(); i += 2) {
    const double ratio = cases[i + 1].ratio_to(cases[i]);
    worst = std::max(worst, ratio);
    std::string name = cases[i].name.substr(0, cases[i].name.rfind(':'));
    std::printf("%-44s %9.1f %9.1f %9.2f\n", name.c_str(), cases[i].ns(), cases[i + 1].ns(), ratio);
  }
  std::printf("\nsummary\n  C ABI over C++: at most %.2fx (target <= 1.1x): %s\n", worst,
              verdict(worst <= 1.1).c_str());

  ratewin_limiter_close(c_reject_handle);
  ratewin_limit_free(c_strict);
  ratewin_limit_free(c_loose);
  ratewin_engine_close(c_engine);
  return 0;
}

}  // namespace ratewin::bench
