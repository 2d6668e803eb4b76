// ratewin-bench: speed, memory and accuracy figures, each a ratio to a baseline measured
// in the same run.
#include <cxxopts.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace ratewin::bench {
int run_local(const cxxopts::ParseResult& args);
}

int main(int argc, char** argv) {
  cxxopts::Options options("ratewin-bench",
                           "Measure ratewin against baselines taken in the same run.");
  options.positional_help("MODE");
  options.add_options()("mode", "what to measure: local (decision path, memory per limiter)",
                        cxxopts::value<std::string>()->default_value("local"))(
      "runs", "runs per case; figures are medians", cxxopts::value<int>()->default_value("7"))(
      "run-ms", "approximate duration of one run of one case, ms",
      cxxopts::value<double>()->default_value("150"))(
      "resources", "distinct resources per thread in the distinct-resource cases",
      cxxopts::value<std::uint64_t>()->default_value("100000"))(
      "limiters", "limiters held for the memory figure",
      cxxopts::value<std::uint64_t>()->default_value("1000000"))(
      "subintervals", "subintervals per limiter for the memory figure",
      cxxopts::value<std::uint32_t>()->default_value("12"))("h,help", "print this help");
  options.parse_positional({"mode"});
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help") != 0) {
      std::puts(options.help().c_str());
      return 0;
    }
    const std::string mode = args["mode"].as<std::string>();
    if (mode == "local") return ratewin::bench::run_local(args);
    std::fprintf(stderr, "ratewin-bench: unknown mode '%s' (try --help)\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratewin-bench: %s\n", e.what());
    return 2;
  }
}
