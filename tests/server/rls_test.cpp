// Envoy's rate limit service without the wire: envoyproxy/ratelimit's configuration
// (every check, the matching order) and the decisions (rls_service.h), on a local engine
// with a manual clock.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/prometheus.h"
#include "ratewin/engine.h"
#include "rls/rls_config.h"
#include "rls/rls_service.h"

namespace ratewin::server::rls {
namespace {

struct Failure {
  int line = -1;
  std::string problem;
};

Failure failure_of(std::string_view yaml) {
  try {
    Config::parse(yaml, "config.yaml", ConfigOptions{});
  } catch (const RulesError& e) {
    return {e.line, e.problem};
  }
  return {};
}

Config parse(std::string_view yaml) { return Config::parse(yaml, "config.yaml", ConfigOptions{}); }

// The matched rule's name (or "-" for none) for entries "k=v,k=v".
std::string matched(const Config& config, std::string_view domain,
                    std::vector<std::pair<std::string, std::string>> pairs) {
  std::vector<Entry> entries;
  for (const auto& [k, v] : pairs) entries.push_back(Entry{k, v});
  Matched m;
  const Domain* d = config.domain(domain);
  REQUIRE(d != nullptr);
  Config::match(*d, entries, m);
  return m.rule == nullptr ? "-" : m.rule->name;
}

TEST_CASE("units are the reference's: a month is 30 days, a year 365, any case") {
  CHECK(parse_unit("second") == Unit::second);
  CHECK(parse_unit("SECOND") == Unit::second);
  CHECK(parse_unit("Week") == Unit::week);
  CHECK_FALSE(parse_unit("fortnight"));
  CHECK_FALSE(parse_unit(""));
  CHECK(unit_length(Unit::month) == std::chrono::hours(24 * 30));
  CHECK(unit_length(Unit::year) == std::chrono::hours(24 * 365));
  CHECK(unit_length(Unit::week) == std::chrono::hours(24 * 7));
  CHECK(unit_length(Unit::unknown).count() == 0);
}

TEST_CASE("wildcards: each '*' stands for any run of characters") {
  CHECK(wildcard_match("path_/foo*", "path_/foo"));
  CHECK(wildcard_match("path_/foo*", "path_/foo/bar"));
  CHECK_FALSE(wildcard_match("path_/foo*", "path_/fo"));
  CHECK(wildcard_match("a*c", "abc"));
  CHECK(wildcard_match("a*c", "ac"));
  CHECK_FALSE(wildcard_match("a*c", "ab"));
  CHECK(wildcard_match("*b*", "abc"));
  CHECK(wildcard_match("a*b*c", "aXbYc"));
  CHECK_FALSE(wildcard_match("a*b*c", "aXcYb"));
  CHECK_FALSE(wildcard_match("ab*ba", "aba"));  // the parts may not overlap
  CHECK(wildcard_match("*", ""));
  CHECK(wildcard_match("exact", "exact"));
  CHECK_FALSE(wildcard_match("exact", "exactly"));
}

TEST_CASE("every bad file is refused with its line and the problem") {
  struct Case {
    const char* yaml;
    int line;
    const char* problem;
  };
  const Case cases[] = {
      {"descriptors: []\n", 1, "empty domain"},
      {"domain: \"\"\n", 1, "empty domain"},
      {"", 0, "empty domain"},
      {"domain: d\ndescriptors:\n  - value: x\n", 3, "descriptor has empty key"},
      {"domain: d\ndescriptors:\n  - key: \"\"\n", 3, "descriptor has empty key"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: "
       "1}\n",
       4, "invalid rate limit unit \"fortnight\""},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", 4,
       "invalid rate limit unit \"\""},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n", 4,
       "should not specify rate limit unit when unlimited"},
      {"domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", 5,
       "duplicate descriptor composite key \"d.k_v\""},
      {"domain: d\ndescriptors:\n  - key: k_v\n  - key: k\n    value: v\n", 4,
       "duplicate descriptor composite key \"d.k_v\""},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n", 4,
       "unknown field \"rate_limt\""},
      {"domain: d\ndescriptor:\n  - key: k\n", 2, "unknown field \"descriptor\""},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, request_per_unit: 1}\n",
       4, "unknown field \"request_per_unit\""},
      {"domain: d\ndescriptors:\n  - just a string\n", 3, "a descriptor must be a mapping"},
      {"domain: d\ndescriptors: {key: k}\n", 2, "expected a list"},
      {"- domain: d\n", 1, "expected a mapping"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: "
       "-1}\n",
       4, "is not a whole number"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: "
       "4294967296}\n",
       4, "is not a whole number"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      "
       "requests_per_unit: 1\n"
       "      name: a\n      replaces: [{name: a}]\n",
       8, "replaces should not contain name of same descriptor"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      "
       "requests_per_unit: 1\n"
       "      replaces: [{name: \"\"}]\n",
       7, "should not have an empty replaces entry"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      "
       "requests_per_unit: 1\n"
       "      replaces: [{name: nobody}]\n",
       7, "replaces \"nobody\", but no rate_limit of domain \"d\" has that name"},
      {"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", 5,
       "share_threshold can only be used with wildcard values"},
      {"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", 4, "is not true or false"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, "
       "algorithm: leaky}\n",
       4, "\"leaky\" is not one of"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, "
       "burst: 10}\n",
       4, "burst"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 5, "
       "algorithm: fixed_window}\n",
       4, "fixed_window"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, "
       "failure_policy: maybe}\n",
       4, "\"maybe\" is not one of local, open, closed, partitioned"},
      {"domain: d\n  bad: indentation\n", 2, "YAML syntax"},
      {"domain: d\n---\ndomain: e\n", 2, "more than one YAML document"},
  };
  for (const Case& c : cases) {
    const std::string yaml = c.yaml;
    CAPTURE(yaml);
    const Failure f = failure_of(c.yaml);
    CHECK(f.line == c.line);
    CHECK_MESSAGE(f.problem.find(c.problem) != std::string::npos, f.problem);
  }
}

TEST_CASE("the reference's own example files parse") {
  const Config c = parse(R"(
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
)");
  CHECK(c.domain_count() == 1);
  CHECK(c.rule_count() == 2);
  const Config d = parse(R"(
---
domain: rl
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        rate_limit:
          unit: minute
          requests_per_unit: 1
      - key: destination_cluster
        value: mock
        rate_limit:
          unit: minute
          requests_per_unit: 2
        shadow_mode: true
        detailed_metric: true
  - key: foo
    rate_limit:
      unlimited: true
  - key: bar
    value: "*"
    share_threshold: true
    metadata: {team: x}
    quota_mode: false
    value_to_metric: true
    rate_limit:
      unit: WEEK
      requests_per_unit: 1
)");
  CHECK(d.rule_count() == 4);
}

TEST_CASE(
    "matching: exact value, then wildcards in order, then the key alone; the last entry's node") {
  const Config c = parse(R"(
domain: d
descriptors:
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 1, name: exact}
  - key: k
    value: ex*
    rate_limit: {unit: second, requests_per_unit: 1, name: wild1}
  - key: k
    value: "*act"
    rate_limit: {unit: second, requests_per_unit: 1, name: wild2}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, name: default}
  - key: parent
    rate_limit: {unit: second, requests_per_unit: 1, name: parent}
    descriptors:
      - key: child
        value: c
        rate_limit: {unit: second, requests_per_unit: 1, name: child}
      - key: nolimit
        value: n
  - key: exactonly
    value: e
)");
  CHECK(matched(c, "d", {{"k", "exact"}}) == "exact");
  CHECK(matched(c, "d", {{"k", "extra"}}) == "wild1");
  CHECK(matched(c, "d", {{"k", "compact"}}) == "wild2");
  CHECK(matched(c, "d", {{"k", "exact2"}}) == "wild1");
  CHECK(matched(c, "d", {{"k", "other"}}) == "default");
  CHECK(matched(c, "d", {{"k", ""}}) == "default");
  CHECK(matched(c, "d", {{"parent", "x"}}) == "parent");
  CHECK(matched(c, "d", {{"parent", "x"}, {"child", "c"}}) == "child");
  // A limit on an intermediate node does not apply to a longer descriptor.
  CHECK(matched(c, "d", {{"parent", "x"}, {"child", "other"}}) == "-");
  CHECK(matched(c, "d", {{"parent", "x"}, {"nolimit", "n"}}) == "-");
  // More entries than the configuration is deep: no limit.
  CHECK(matched(c, "d", {{"k", "exact"}, {"more", "x"}}) == "-");
  // No backtracking: an exact match without a limit does not fall back to the default.
  CHECK(matched(c, "d", {{"exactonly", "e"}}) == "-");
  CHECK(matched(c, "d", {{"unknown", "x"}}) == "-");
  CHECK(c.domain("nope") == nullptr);
}

TEST_CASE("counters: per value by default, per pattern with share_threshold") {
  const Config c = parse(R"(
domain: d
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value: u*
    rate_limit: {unit: second, requests_per_unit: 1}
)");
  const Domain& d = *c.domain("d");
  const auto resource = [&](std::string_view k, std::string_view v) {
    const Entry e{k, v};
    Matched m;
    Config::match(d, std::span(&e, 1), m);
    REQUIRE(m.rule != nullptr);
    return m.resource;
  };
  CHECK(resource("ip", "1.1.1.1") != resource("ip", "2.2.2.2"));
  CHECK(resource("path", "/api/a") == resource("path", "/api/b"));
  CHECK(resource("user", "u1") != resource("user", "u2"));
}

TEST_CASE("the example folder (docs/envoy.md's) loads, and matches as the docs say") {
  const Config c = Config::load(RATEWIN_RLS_EXAMPLE, ConfigOptions{});
  REQUIRE(c.domain("edge") != nullptr);
  const Domain& d = *c.domain("edge");
  const auto rule = [&](std::vector<Entry> entries) {
    Matched m;
    Config::match(d, entries, m);
    return m.rule;
  };
  REQUIRE(rule({{"remote_address", "10.0.0.1"}}) != nullptr);
  CHECK(rule({{"remote_address", "10.0.0.1"}})->requests_per_unit == 100);
  CHECK(rule({{"remote_address", "10.0.0.1"}, {"header_match", "login"}})->name == "login");
  CHECK(rule({{"api_key", "k"}})->limit->algorithm() == Algorithm::token_bucket);
  CHECK(rule({{"api_key", "partner-7f3a"}})->unlimited);
  CHECK(rule({{"header_match", "search"}})->shadow);
}

TEST_CASE("a folder: one domain a file, a domain twice refused naming both files") {
  const std::string dir = "/tmp/ratewin-rls-folder-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, std::string_view text) {
    REQUIRE(static_cast<bool>(std::ofstream(dir + "/" + name, std::ios::binary) << text));
  };
  write("a.yaml", "domain: a\n");
  write("b.yml", "domain: b\n");
  write("notes.txt", "not yaml: [");
  write(".hidden.yaml", "not yaml: [");
  const Config c = Config::load(dir, ConfigOptions{});
  CHECK(c.domain_count() == 2);
  CHECK(c.files().size() == 2);
  write("c.yaml", "domain: a\n");
  try {
    Config::load(dir, ConfigOptions{});
    FAIL("loaded");
  } catch (const RulesError& e) {
    CHECK(std::string(e.what()).find("c.yaml") != std::string::npos);
    CHECK(std::string(e.what()).find("duplicate domain \"a\" (also in " + dir + "/a.yaml)") !=
          std::string::npos);
  }
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(Config::load(dir, ConfigOptions{}), RulesError);  // no folder
}

// A service on a local engine whose clock the test moves.
struct Fixture {
  std::shared_ptr<ManualClock> clock =
      std::make_shared<ManualClock>(std::chrono::seconds(1'700'000'000));
  std::unique_ptr<Engine> engine;
  std::unique_ptr<RateLimitService> service;

  explicit Fixture(std::string_view yaml, ServiceOptions options = {}) {
    Options o;
    o.clock = clock;
    engine = std::make_unique<Engine>(o);
    dir = std::string("/tmp/ratewin-rls-test-") + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    write(yaml);
    options.folder = dir;
    service = std::make_unique<RateLimitService>(
        *engine, options, [this](LogLevel, std::string_view line) { logged.emplace_back(line); });
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
  void write(std::string_view yaml) const {
    REQUIRE(static_cast<bool>(std::ofstream(dir + "/config.yaml", std::ios::binary) << yaml));
  }
  // The lines logged that hold `text`.
  std::size_t log_count(std::string_view text) const {
    return static_cast<std::size_t>(std::count_if(
        logged.begin(), logged.end(),
        [text](const std::string& line) { return line.find(text) != std::string::npos; }));
  }
  // Whether /metrics has `line` (whole).
  bool metric_line(std::string_view line) const {
    PrometheusText out;
    service->write_metrics(out);
    return ("\n" + out.take()).find("\n" + std::string(line) + "\n") != std::string::npos;
  }

  // Decides at once (local mode answers before decide() returns).
  Response ask(std::string_view domain, std::vector<RequestDescriptor> descriptors,
               std::uint32_t hits = 0) {
    Request r;
    r.domain = domain;
    r.descriptors = std::move(descriptors);
    r.hits_addend = hits;
    std::optional<Response> out;
    const Status problem = service->decide(r, [&](Response&& answer) { out = std::move(answer); });
    REQUIRE_MESSAGE(problem.ok(), problem.message());
    REQUIRE(out);
    return std::move(*out);
  }
  std::string dir;
  std::vector<std::string> logged;  // by the service (its reloads), on this thread
};

RequestDescriptor one(std::string_view k, std::string_view v) {
  RequestDescriptor d;
  d.entries.push_back(Entry{k, v});
  return d;
}

std::vector<Code> codes(const Response& r) {
  std::vector<Code> out;
  for (const DescriptorStatus& s : r.statuses) out.push_back(s.code);
  return out;
}

constexpr std::string_view kTwo = R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3, name: a}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1, name: b}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: replacer
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{name: a}]
)";

TEST_CASE("statuses: limit, remaining, reset; OVER_LIMIT past the limit, not at it") {
  Fixture f(kTwo);
  for (std::uint32_t remaining : {2U, 1U, 0U}) {
    const Response r = f.ask("d", {one("a", "x")});
    CHECK(r.overall_code == Code::ok);
    REQUIRE(r.statuses.size() == 1);
    CHECK(r.statuses[0].code == Code::ok);
    REQUIRE(r.statuses[0].current_limit);
    CHECK(r.statuses[0].current_limit->requests_per_unit == 3);
    CHECK(r.statuses[0].current_limit->unit == Unit::minute);
    CHECK(r.statuses[0].current_limit->name == "a");
    CHECK(r.statuses[0].limit_remaining == remaining);
    REQUIRE(r.statuses[0].duration_until_reset);
    CHECK(r.statuses[0].duration_until_reset->count() > 0);
    CHECK(r.statuses[0].duration_until_reset->count() <= 66);  // a window and a subinterval
  }
  const Response over = f.ask("d", {one("a", "x")});
  CHECK(over.overall_code == Code::over_limit);
  CHECK(over.statuses[0].code == Code::over_limit);
  CHECK(over.statuses[0].limit_remaining == 0);
  // Another value of the key has its own counter.
  CHECK(f.ask("d", {one("a", "y")}).overall_code == Code::ok);
  // The window slides: a minute and a subinterval later, it is all back.
  f.clock->advance(std::chrono::seconds(66));
  CHECK(f.ask("d", {one("a", "x")}).statuses[0].limit_remaining == 2);
}

TEST_CASE("unknown domain, no match, unlimited, and a limit of 0") {
  Fixture f(kTwo);
  const Response unknown = f.ask("nope", {one("a", "x")});
  CHECK(unknown.overall_code == Code::ok);
  CHECK_FALSE(unknown.statuses[0].current_limit);
  CHECK(unknown.statuses[0].limit_remaining == 0);
  const Response none = f.ask("d", {one("c", "x")});
  CHECK(none.overall_code == Code::ok);
  CHECK_FALSE(none.statuses[0].current_limit);
  const Response unlimited = f.ask("d", {one("free", "x")});
  CHECK(unlimited.statuses[0].code == Code::ok);
  CHECK_FALSE(unlimited.statuses[0].current_limit);
  CHECK(unlimited.statuses[0].limit_remaining == UINT32_MAX);
  const Response zero = f.ask("d", {one("zero", "x")});
  CHECK(zero.overall_code == Code::over_limit);
  REQUIRE(zero.statuses[0].current_limit);
  CHECK(zero.statuses[0].current_limit->requests_per_unit == 0);
}

TEST_CASE("requests the protocol forbids are INVALID_ARGUMENT") {
  Fixture f(kTwo);
  Request r;
  // The reason, and that it is one the caller answers INVALID_ARGUMENT (code invalid).
  const auto refused = [&] {
    const Status said = f.service->decide(r, [](Response&&) { FAIL("answered"); });
    CHECK(said.code() == Status::Code::invalid);
    return said.message();
  };
  r.domain = "";
  r.descriptors.push_back(one("a", "x"));
  CHECK(refused() == "rate limit domain must not be empty");
  r.domain = "d";
  r.descriptors.clear();
  CHECK(refused() == "rate limit descriptor list must not be empty");
  RequestDescriptor bad = one("a", "x");
  bad.limit = LimitOverride{5, Unit::unknown};
  r.descriptors.push_back(bad);
  CHECK(!refused().empty());
  r.descriptors[0].limit = LimitOverride{5, static_cast<Unit>(42)};
  CHECK(!refused().empty());
}

TEST_CASE("hits_addend: the request's, a descriptor's own, and 0 to ask without counting") {
  Fixture f(kTwo);
  CHECK(f.ask("d", {one("a", "x")}, 2).statuses[0].limit_remaining == 1);
  RequestDescriptor peek = one("a", "x");
  peek.hits_addend = 0;
  CHECK(f.ask("d", {peek}, 5).statuses[0].limit_remaining == 1);
  CHECK(f.ask("d", {peek}).statuses[0].code == Code::ok);
  RequestDescriptor two = one("a", "x");
  two.hits_addend = 2;  // more than is left: over, and nothing counted
  const Response over = f.ask("d", {two});
  CHECK(over.statuses[0].code == Code::over_limit);
  CHECK(f.ask("d", {one("a", "x")}).statuses[0].code == Code::ok);
  // More hits than the limit can ever hold.
  CHECK(f.ask("d", {one("a", "z")}, 4).overall_code == Code::over_limit);
}

TEST_CASE("a descriptor's limit override makes a dynamic limit; the domain must exist") {
  Fixture f(kTwo);
  RequestDescriptor d = one("anything", "v");
  d.limit = LimitOverride{2, Unit::hour};
  for (const Code expected : {Code::ok, Code::ok, Code::over_limit}) {
    const Response r = f.ask("d", {d});
    CHECK(r.statuses[0].code == expected);
    REQUIRE(r.statuses[0].current_limit);
    CHECK(r.statuses[0].current_limit->requests_per_unit == 2);
    CHECK(r.statuses[0].current_limit->unit == Unit::hour);
  }
  CHECK_FALSE(f.ask("unknown", {d}).statuses[0].current_limit);
}

TEST_CASE("several descriptors: all or nothing by default, each on its own as the reference") {
  SUBCASE("all or nothing: nothing is counted when one is over") {
    Fixture f(kTwo);
    CHECK(codes(f.ask("d", {one("a", "x"), one("b", "x")})) == std::vector{Code::ok, Code::ok});
    const Response r = f.ask("d", {one("a", "x"), one("b", "x")});
    CHECK(r.overall_code == Code::over_limit);
    CHECK(r.statuses[1].code == Code::over_limit);
    // a was not counted by the refused call: 2 left of 3.
    CHECK(f.ask("d", {one("a", "x")}).statuses[0].limit_remaining == 1);
    // A limit of 0 refuses without any count either.
    CHECK(f.ask("d", {one("a", "y"), one("zero", "y")}).overall_code == Code::over_limit);
    CHECK(f.ask("d", {one("a", "y")}).statuses[0].limit_remaining == 2);
  }
  SUBCASE("each: every descriptor counted on its own") {
    ServiceOptions o;
    o.each_descriptor = true;
    Fixture f(kTwo, o);
    CHECK(f.ask("d", {one("a", "x"), one("b", "x")}).overall_code == Code::ok);
    const Response r = f.ask("d", {one("a", "x"), one("b", "x")});
    CHECK(codes(r) == std::vector{Code::ok, Code::over_limit});
    CHECK(r.overall_code == Code::over_limit);
    // a was counted by both calls: 1 left of 3.
    CHECK(f.ask("d", {one("a", "x")}).statuses[0].limit_remaining == 0);
  }
}

TEST_CASE("a refused call: each descriptor its own status, remaining and reset") {
  constexpr std::string_view kTenAndOne = R"(
domain: d
descriptors:
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
)";
  for (const bool each : {false, true}) {
    CAPTURE(each);
    ServiceOptions o;
    o.each_descriptor = each;
    Fixture f(kTenAndOne, o);
    CHECK(f.ask("d", {one("ten", "x")}, 3).overall_code == Code::ok);
    CHECK(f.ask("d", {one("one", "x")}).overall_code == Code::ok);
    // The descriptor over its limit first, then after the one within: either way only it
    // is OVER_LIMIT. The other is OK with what it has left (all or nothing counts nothing
    // in a refused call: 7 of 10 left, twice; each counts it: 6, then 5) and when its
    // window empties.
    std::uint32_t left = 7;
    for (const bool over_first : {true, false}) {
      CAPTURE(over_first);
      const Response r = over_first ? f.ask("d", {one("one", "x"), one("ten", "x")})
                                    : f.ask("d", {one("ten", "x"), one("one", "x")});
      const DescriptorStatus& over = r.statuses[over_first ? 0 : 1];
      const DescriptorStatus& within = r.statuses[over_first ? 1 : 0];
      CHECK(r.overall_code == Code::over_limit);
      CHECK(over.code == Code::over_limit);
      CHECK(over.limit_remaining == 0);
      CHECK(within.code == Code::ok);
      REQUIRE(within.current_limit);
      CHECK(within.current_limit->requests_per_unit == 10);
      if (each) --left;
      CHECK(within.limit_remaining == left);
      REQUIRE(within.duration_until_reset);
      CHECK(within.duration_until_reset->count() > 0);
      CHECK(within.duration_until_reset->count() <= 66);
    }
    RequestDescriptor ask_only = one("ten", "x");
    ask_only.hits_addend = 0;
    CHECK(f.ask("d", {ask_only}).statuses[0].limit_remaining == left);
    // The metrics count the descriptor within its limit as within_limit, not over_limit.
    CHECK(f.metric_line("ratewin_rls_within_limit_total{domain=\"d\",key=\"d.ten\"} 5"));
    CHECK(f.metric_line("ratewin_rls_over_limit_total{domain=\"d\",key=\"d.ten\"} 0"));
    CHECK(f.metric_line("ratewin_rls_over_limit_total{domain=\"d\",key=\"d.one\"} 2"));
  }
}

TEST_CASE(
    "shadow_mode lets through what it would refuse; SHADOW_MODE keeps statuses, not the code") {
  {
    Fixture f(kTwo);
    CHECK(f.ask("d", {one("shadow", "x")}).statuses[0].limit_remaining == 0);
    const Response r = f.ask("d", {one("shadow", "x")});
    CHECK(r.overall_code == Code::ok);
    CHECK(r.statuses[0].code == Code::ok);
    CHECK(r.statuses[0].limit_remaining == 0);
  }
  ServiceOptions o;
  o.shadow = true;
  Fixture f(kTwo, o);
  f.ask("d", {one("b", "x")});
  const Response r = f.ask("d", {one("b", "x")});
  CHECK(r.statuses[0].code == Code::over_limit);
  CHECK(r.overall_code == Code::ok);
  // A limit Envoy gives stays enforced, as in the reference.
  RequestDescriptor given = one("b", "y");
  given.limit = LimitOverride{1, Unit::minute};
  f.ask("d", {given});
  CHECK(f.ask("d", {given}).overall_code == Code::over_limit);
}

TEST_CASE("replaces: a matched rule replaces another matched in the same request") {
  Fixture f(kTwo);
  const Response r = f.ask("d", {one("a", "x"), one("replacer", "x")});
  CHECK_FALSE(r.statuses[0].current_limit);  // a: replaced, not counted
  REQUIRE(r.statuses[1].current_limit);
  CHECK(f.ask("d", {one("a", "x")}).statuses[0].limit_remaining == 2);
}

TEST_CASE("response headers: draft and IETF forms, Retry-After when over") {
  {
    ServiceOptions o;
    o.headers = HeaderStyle::draft;
    Fixture f(kTwo, o);
    const Response r = f.ask("d", {one("a", "x"), one("b", "x")});
    REQUIRE(r.response_headers_to_add.size() == 3);
    CHECK(r.response_headers_to_add[0].key == "RateLimit-Limit");
    CHECK(r.response_headers_to_add[0].value == "1");  // b: the least remaining
    CHECK(r.response_headers_to_add[1].value == "0");
    const Response over = f.ask("d", {one("b", "x")});
    REQUIRE(over.response_headers_to_add.size() == 4);
    CHECK(over.response_headers_to_add[3].key == "Retry-After");
    CHECK(std::stoi(over.response_headers_to_add[3].value) >= 1);
    CHECK(f.ask("d", {one("c", "x")}).response_headers_to_add.empty());  // no limit
  }
  ServiceOptions o;
  o.headers = HeaderStyle::ietf;
  Fixture f(kTwo, o);
  const Response r = f.ask("d", {one("a", "x")});
  REQUIRE(r.response_headers_to_add.size() == 2);
  CHECK(r.response_headers_to_add[0].key == "RateLimit-Policy");
  CHECK(r.response_headers_to_add[0].value == "\"a\";q=3;w=60");
  CHECK(r.response_headers_to_add[1].key == "RateLimit");
  CHECK(r.response_headers_to_add[1].value.starts_with("\"a\";r=2;t="));
}

TEST_CASE("fixed_window: the reference's epoch-aligned windows") {
  Fixture f(R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
)");
  // 1'700'000'000 s is 20 s into a minute.
  const Response r = f.ask("d", {one("k", "x")});
  REQUIRE(r.statuses[0].duration_until_reset);
  CHECK(r.statuses[0].duration_until_reset->count() == 40);
  f.ask("d", {one("k", "x")});
  CHECK(f.ask("d", {one("k", "x")}).overall_code == Code::over_limit);
  f.clock->advance(std::chrono::seconds(40));  // the next minute: a fresh window
  CHECK(f.ask("d", {one("k", "x")}).statuses[0].limit_remaining == 1);
}

TEST_CASE("metrics: hits by the reference's names, by domain and configured key") {
  Fixture f(kTwo);
  for (int i = 0; i < 5; ++i) f.ask("d", {one("a", std::to_string(i % 2))});
  PrometheusText out;
  f.service->write_metrics(out);
  const std::string text = out.take();
  CHECK(text.find("ratewin_rls_total_hits_total{domain=\"d\",key=\"d.a\"} 5") != std::string::npos);
  CHECK(text.find("ratewin_rls_over_limit_total{domain=\"d\",key=\"d.a\"} 0") != std::string::npos);
  CHECK(text.find("ratewin_rls_near_limit_total{domain=\"d\",key=\"d.a\"} 1") != std::string::npos);
  CHECK(text.find("ratewin_rls_within_limit_total{domain=\"d\",key=\"d.a\"} 5") !=
        std::string::npos);
  // The values of the request appear nowhere (no detailed_metric).
  CHECK(text.find("d.a_0") == std::string::npos);
}

TEST_CASE(
    "reload: a bad file keeps the last good configuration; unchanged files are no new version") {
  Fixture f(kTwo);
  const std::string v1 = f.service->config()->version();
  CHECK(f.service->reload("test"));
  CHECK(f.service->config()->version() == v1);
  f.write("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n");
  CHECK_FALSE(f.service->reload("test"));
  CHECK(f.service->config()->version() == v1);
  CHECK(f.service->last_reload_error().find("config.yaml:4:") != std::string::npos);
  f.write(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: "
      "7}\n");
  CHECK(f.service->reload("test"));
  CHECK(f.service->config()->version() != v1);
  CHECK(f.service->last_reload_error().empty());
  CHECK(f.ask("d", {one("a", "x")}).statuses[0].current_limit->requests_per_unit == 7);
  // Counted as the rules' loads are: every good load (the first, at start, and the
  // unchanged one included: 3; before, only loads that changed the version, 1) and every
  // rejected one.
  CHECK(f.metric_line("ratewin_rls_config_reloads_total{outcome=\"ok\"} 3"));
  CHECK(f.metric_line("ratewin_rls_config_reloads_total{outcome=\"rejected\"} 1"));
  CHECK(f.metric_line("ratewin_rls_config_error 0"));
}

TEST_CASE(
    "reload by the watch: unchanged files are no load; a bad edit is counted and logged once") {
  Fixture f(kTwo);
  const std::string v1 = f.service->config()->version();
  const auto counted = [&f](int ok, int rejected) {
    return f.metric_line("ratewin_rls_config_reloads_total{outcome=\"ok\"} " + std::to_string(ok)) &&
           f.metric_line("ratewin_rls_config_reloads_total{outcome=\"rejected\"} " +
                         std::to_string(rejected));
  };
  REQUIRE(counted(1, 0));  // the first load
  // The files read at start, unchanged; then a file beside them that is not read.
  CHECK(f.service->reload("file changed", ReloadCause::watch));
  REQUIRE(static_cast<bool>(std::ofstream(f.dir + "/notes.txt") << "not configuration\n"));
  CHECK(f.service->reload("file changed", ReloadCause::watch));
  CHECK(counted(1, 0));
  CHECK(f.log_count("configuration reloaded") == 0);

  // A bad edit: one load, however often the watch sees the folder change after it.
  f.write("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n");
  for (int i = 0; i < 3; ++i) CHECK_FALSE(f.service->reload("file changed", ReloadCause::watch));
  CHECK(counted(1, 1));
  CHECK(f.log_count("configuration not reloaded (file changed)") == 1);
  CHECK(f.metric_line("ratewin_rls_config_error 1"));
  // SIGHUP always loads: counted again; the same error is not logged again.
  CHECK_FALSE(f.service->reload("SIGHUP"));
  CHECK(counted(1, 2));
  CHECK(f.log_count("configuration not reloaded") == 1);

  // Fixed: the watch loads it, once.
  f.write(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: "
      "7}\n");
  CHECK(f.service->reload("file changed", ReloadCause::watch));
  CHECK(f.service->reload("file changed", ReloadCause::watch));
  CHECK(counted(2, 2));
  CHECK(f.service->config()->version() != v1);
  CHECK(f.log_count("configuration reloaded (file changed)") == 1);
  CHECK(f.metric_line("ratewin_rls_config_error 0"));
  // SIGHUP of the same files: a good load, no new version (nothing logged).
  CHECK(f.service->reload("SIGHUP"));
  CHECK(counted(3, 2));
  CHECK(f.log_count("configuration reloaded") == 1);
}

TEST_CASE("a folder that defines no rate limit is refused, at start and on reload") {
  constexpr std::string_view kGood =
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
      "requests_per_unit: 7}\n";
  SUBCASE("at start, unless allowed") {
    for (const std::string_view empty :
         {std::string_view("domain: edge\n"), std::string_view("domain: edge\ndescriptors: []\n")}) {
      const auto start = [&] { const Fixture f(empty); };
      CHECK_THROWS_WITH_AS(start(), doctest::Contains("defines no rate limit: refused"),
                           RulesError);
    }
    ServiceOptions allowed;
    allowed.allow_empty_config = true;
    Fixture f("domain: edge\n", allowed);
    CHECK(f.service->config()->rule_count() == 0);
  }
  SUBCASE("on reload: the last good one serves") {
    Fixture f(kGood);
    const std::string v1 = f.service->config()->version();
    f.write("domain: d\n");
    CHECK_FALSE(f.service->reload("SIGHUP"));
    CHECK(f.service->config()->version() == v1);
    CHECK(f.service->last_reload_error().find("defines no rate limit") != std::string::npos);
  }
}

TEST_CASE("a FIFO or a dangling link named *.yaml is reported, not skipped") {
  const std::string dir = "/tmp/ratewin-rls-special-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  REQUIRE(static_cast<bool>(std::ofstream(dir + "/a.yaml") << "domain: a\n"));
  SUBCASE("a FIFO") { REQUIRE(::mkfifo((dir + "/x.yaml").c_str(), 0600) == 0); }
  SUBCASE("a dangling link") {
    std::filesystem::create_symlink(dir + "/gone.txt", dir + "/x.yaml");
  }
  CHECK_THROWS_WITH_AS(Config::read(dir), doctest::Contains("x.yaml: not a regular file"),
                       RulesError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a call's bounds: descriptors and an entry's bytes are INVALID_ARGUMENT past them") {
  ServiceOptions options;
  options.max_descriptors = 3;
  options.max_entry_bytes = 100;
  Fixture f(kTwo, options);
  Request r;
  r.domain = "d";
  for (int i = 0; i < 4; ++i) r.descriptors.push_back(one("a", "x"));
  const auto said = [&] { return f.service->decide(r, [](Response&&) { FAIL("answered"); }); };
  CHECK(said().code() == Status::Code::invalid);
  CHECK(said().message().find("at most 3 descriptors") != std::string::npos);
  r.descriptors.resize(1);
  const std::string long_value(100, 'v');  // and the key's byte: 101
  r.descriptors[0] = one("a", long_value);
  CHECK(said().code() == Status::Code::invalid);
  CHECK(said().message().find("over 100") != std::string::npos);
  CHECK(f.ask("d", {one("a", std::string_view(long_value).substr(0, 98))}).overall_code ==
        Code::ok);
}

TEST_CASE("stats: long keys hashed, override series by keys, counters saturate") {
  const std::string long_key = "d.k_" + std::string(5000, 'x');
  const std::string bounded = HitStats::bounded(long_key);
  CHECK(bounded.size() <= HitStats::kMaxKeyBytes);
  CHECK(bounded != HitStats::bounded(long_key + "y"));
  CHECK(HitStats::bounded("d.k_short") == "d.k_short");
  // Not cut inside a character.
  const std::string wide = "d.k_" + std::string(4000, 'a').replace(236, 2, "\xc3\xa9");
  const std::string cut = HitStats::bounded(wide);
  CHECK((static_cast<unsigned char>(cut[cut.find('~') - 1]) & 0xc0) != 0xc0);

  std::atomic<std::uint64_t> c{UINT64_MAX - 2};
  HitCounters::add(c, 1);
  CHECK(c == UINT64_MAX - 1);
  HitCounters::add(c, UINT64_MAX);
  CHECK(c == UINT64_MAX);

  Fixture f(kTwo);
  for (const char* value : {"v1", "v2", "v3"}) {
    RequestDescriptor d = one("a", value);
    d.limit = LimitOverride{5, Unit::minute};
    f.ask("d", {d});
  }
  CHECK(f.metric_line("ratewin_rls_total_hits_total{domain=\"d\",key=\"d.a\"} 3"));
}

}  // namespace
}  // namespace ratewin::server::rls
