// ratewin-bench: speed, memory and accuracy figures, each a ratio to a baseline measured
// in the same run.
#include <cxxopts.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace ratewin::bench {
int run_local(const cxxopts::ParseResult& args);
int run_accuracy(const cxxopts::ParseResult& args);
int run_batched(const cxxopts::ParseResult& args);
int run_redis(const cxxopts::ParseResult& args);
int run_capi(const cxxopts::ParseResult& args);
int run_cluster(const cxxopts::ParseResult& args);
#ifdef RATEWIN_BENCH_RLS
int run_rls(const cxxopts::ParseResult& args);
#endif
}  // namespace ratewin::bench

int main(int argc, char** argv) {
  cxxopts::Options options("ratewin-bench",
                           "Measure ratewin against baselines taken in the same run.");
  options.positional_help("MODE");
  // clang-format off
  options.add_options()
    ("mode", "what to measure: local (decision path, memory per limiter), redis (the Redis-backed "
             "paths against raw hiredis), accuracy (K engines sharing one Redis against an exact "
             "sliding window; --write-mode), batched (batched write mode's cost against sync: "
             "latency, Redis commands and CPU), capi (the C ABI against the C++ calls it wraps), cluster (the store on a "
             "local 3-primary Redis Cluster next to one Redis, and the capacity model), rls "
             "(ratewin-server's Envoy rate limit service over gRPC against its HTTP forward-auth "
             "path, in one run)",
     cxxopts::value<std::string>()->default_value("local"))
    ("runs", "local, capi: rounds; figures are medians (rls: 3 unless given)",
     cxxopts::value<int>()->default_value("7"))
    ("server", "rls: the ratewin-server to run (default: the one beside ratewin-bench)",
     cxxopts::value<std::string>()->default_value(""))
    ("seconds", "rls: seconds per case and round", cxxopts::value<double>()->default_value("3"))
    ("run-ms", "local, capi: approximate duration of one run of one case, ms",
     cxxopts::value<double>()->default_value("150"))
    ("resources", "local: distinct resources in the distinct-resource cases",
     cxxopts::value<std::uint64_t>()->default_value("100000"))
    ("limiters", "local: limiters held for the memory figure",
     cxxopts::value<std::uint64_t>()->default_value("1000000"))
    ("subintervals", "local: subintervals per limiter for the memory figure",
     cxxopts::value<std::uint32_t>()->default_value("12"))
    ("redis", "Redis URL for the redis and accuracy modes; empty: start a private redis-server",
     cxxopts::value<std::string>()->default_value(""))
    ("tls", "redis: the private redis-server also serves TLS (certificates made for the run), and "
            "the report gains rows over TLS beside the plain ones")
    ("engines", "accuracy: numbers of engines to run, comma-separated",
     cxxopts::value<std::string>()->default_value("1,2,4,8"))
    ("scale", "accuracy: time scale (1 = 100 per 10 s at 1 s, for 40 s and 60 s)",
     cxxopts::value<double>()->default_value("1"))
    ("steady-seconds", "accuracy: how long scenario (c) runs, before --scale",
     cxxopts::value<double>()->default_value("60"))
    ("write-mode", "accuracy: sync, batched, or both comma-separated (batched: sliding_window "
                   "and fixed_window only)",
     cxxopts::value<std::string>()->default_value("sync"))
    ("algorithm", "accuracy: the limit's algorithm, a comma-separated list of them, or all",
     cxxopts::value<std::string>()->default_value("sliding_window"))
    ("csv", "accuracy: also write the figures as CSV to this file",
     cxxopts::value<std::string>()->default_value(""))
    ("plot", "accuracy: draw each algorithm's overload run into this .svg or .png (needs gnuplot)",
     cxxopts::value<std::string>()->default_value(""))
    ("outage", "accuracy: instead, the outage scenario: Redis killed, then paused, for this "
               "many seconds under 10x overload, once per failure policy (0: off)",
     cxxopts::value<double>()->default_value("0"))
    ("outage-engines", "accuracy --outage: engines sharing the limit",
     cxxopts::value<int>()->default_value("4"))
    ("h,help", "print this help");
  // clang-format on
  options.parse_positional({"mode"});
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help") != 0) {
      std::puts(options.help().c_str());
      return 0;
    }
    const std::string mode = args["mode"].as<std::string>();
    if (mode == "local") return ratewin::bench::run_local(args);
    if (mode == "accuracy") return ratewin::bench::run_accuracy(args);
    if (mode == "batched") return ratewin::bench::run_batched(args);
    if (mode == "redis") return ratewin::bench::run_redis(args);
    if (mode == "capi") return ratewin::bench::run_capi(args);
    if (mode == "cluster") return ratewin::bench::run_cluster(args);
    if (mode == "rls") {
#ifdef RATEWIN_BENCH_RLS
      return ratewin::bench::run_rls(args);
#else
      std::fprintf(stderr, "ratewin-bench: rls needs a build with gRPC (RATEWIN_BUILD_GRPC)\n");
      return 2;
#endif
    }
    std::fprintf(stderr, "ratewin-bench: unknown mode '%s' (try --help)\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratewin-bench: %s\n", e.what());
    return 2;
  }
}
