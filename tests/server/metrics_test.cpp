#include "common/prometheus.h"

#include <doctest/doctest.h>

#include <map>
#include <sstream>
#include <string>

namespace ratewin::server {
namespace {

// The samples of a Prometheus text ("name{labels}" -> value) and each family's TYPE.
struct Parsed {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::map<std::string, int> helps;
};
Parsed parse(const std::string& text) {
  Parsed out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("# HELP ")) {
      ++out.helps[line.substr(7, line.find(' ', 7) - 7)];
    } else if (line.starts_with("# TYPE ")) {
      const std::size_t name_end = line.find(' ', 7);
      out.types[line.substr(7, name_end - 7)] = line.substr(name_end + 1);
    } else {
      const std::size_t space = line.rfind(' ');
      out.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  return out;
}

std::string key(const StatField& f) {
  return std::string(f.metric) + (f.labels.empty() ? "" : "{" + std::string(f.labels) + "}");
}

}  // namespace

TEST_CASE("/metrics shows every figure of the engine's stats, once, from kStatFields") {
  Stats s;
  s.store = true;
  s.store_available = true;
  std::uint64_t n = 1;
  for (const StatField& f : kStatFields) {
    if (f.count != nullptr) s.*f.count = n++;
    if (f.duration != nullptr) s.*f.duration = std::chrono::milliseconds(n++);
  }
  PrometheusText text;
  write_engine_metrics(text, s);
  const Parsed with_store = parse(text.take());
  for (const StatField& f : kStatFields) {
    CAPTURE(f.name);
    REQUIRE(with_store.samples.count(key(f)) == 1);
    CHECK(with_store.samples.at(key(f)) == f.sample_value(s));
    CHECK(with_store.types.at(std::string(f.metric)) ==
          (f.kind == StatKind::counter ? "counter" : "gauge"));
    CHECK(with_store.helps.at(std::string(f.metric)) == 1);
  }
  // And the store's failures by reason: the ten an operator acts on, 0 until seen.
  constexpr std::size_t kReasons = 10;
  CHECK(with_store.samples.size() == std::size(kStatFields) + kReasons);
  CHECK(with_store.samples.at("ratewin_store_errors_total{reason=\"NOPERM\"}") == 0);
  CHECK(with_store.types.at("ratewin_store_errors_total") == "counter");
  CHECK(with_store.samples.at("ratewin_engine_pinned_limiters") == s.pinned);
  CHECK(with_store.samples.at("ratewin_store_clock_rtt_seconds") ==
        static_cast<double>(s.clock_rtt.count()) / 1e9);

  // Local mode: the engine's figures, and the store's two flags (up: nothing degraded).
  const Stats local;
  PrometheusText local_text;
  write_engine_metrics(local_text, local);
  const Parsed without = parse(local_text.take());
  CHECK(without.samples.at("ratewin_store_up") == 1);
  CHECK(without.samples.at("ratewin_store_configured") == 0);
  CHECK(without.samples.count("ratewin_engine_limiters") == 1);
  CHECK(without.samples.count("ratewin_store_writes_total{result=\"ok\"}") == 0);
  CHECK(without.types.count("ratewin_store_errors_total") == 0);
}

TEST_CASE("store failures by reason: the usual ones always, others once seen") {
  Stats s;
  s.store = true;
  s.store_errors = {{"NOPERM", 7}, {"timeout", 2}, {"LOADING", 1}};
  PrometheusText text;
  write_engine_metrics(text, s);
  const Parsed p = parse(text.take());
  CHECK(p.samples.at("ratewin_store_errors_total{reason=\"NOPERM\"}") == 7);
  CHECK(p.samples.at("ratewin_store_errors_total{reason=\"timeout\"}") == 2);
  CHECK(p.samples.at("ratewin_store_errors_total{reason=\"LOADING\"}") == 1);
  CHECK(p.samples.at("ratewin_store_errors_total{reason=\"READONLY\"}") == 0);
  CHECK(p.helps.at("ratewin_store_errors_total") == 1);
}

}  // namespace ratewin::server
