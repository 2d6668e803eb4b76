#include "rules/rules.h"

#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>
#include <chrono>
#include <functional>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/published.h"
#include "common/yaml_reader.h"
#include "common/text.h"

#ifndef RATEWIN_RULES_EXAMPLE
#error "define RATEWIN_RULES_EXAMPLE as the path of cmd/server/rules.example.yaml"
#endif

namespace ratewin::server {
namespace {

using std::chrono::milliseconds;

struct Failure {
  int line = -1;
  int column = -1;
  std::string problem;
  std::string what;
};

// The RulesError that parsing `yaml` throws; line -1 if it parses.
Failure failure_of(std::string_view yaml) {
  try {
    Rules::parse(yaml, "rules.yaml");
  } catch (const RulesError& e) {
    return {e.line, e.column, e.problem, e.what()};
  }
  return {};
}

Match match(const Rules& rules, std::string_view key, std::string_view method = "GET",
            std::string_view path = "/") {
  Match m;
  rules.match(key, method, path, m);
  return m;
}

std::vector<std::string> names(const Match& m) {
  std::vector<std::string> out;
  for (const LimitRule* r : m.limits) out.push_back(r->name);
  return out;
}

using Names = std::vector<std::string>;

// A valid head that the error cases below build on (lines 1 to 7).
constexpr std::string_view kHead =
    "tiers:\n"                                              // 1
    "  free:\n"                                             // 2
    "    limits:\n"                                         // 3
    "      - name: a\n"                                     // 4
    "        max: 5\n"                                      // 5
    "        window: 1s\n"                                  // 6
    "  pro: {limits: [{name: a, max: 50, window: 1s}]}\n";  // 7

}  // namespace

TEST_CASE("the shipped example parses and does what its comments say") {
  const Rules rules = Rules::load(RATEWIN_RULES_EXAMPLE);
  CHECK(rules.version().starts_with("2024-06-example@"));
  CHECK(rules.limit_count() == 15);

  // The default tier, no endpoint.
  Match m = match(rules, "someone", "GET", "/other");
  CHECK(m.action == Action::limit);
  CHECK(m.tier == "free");
  CHECK(m.endpoint == "");
  CHECK(names(m) == Names{"tier:free/per-second", "tier:free/per-hour"});
  // Scoped by the rule's name: a reload that changes max keeps its counts.
  CHECK(m.limits[1]->limit == Limit(1000, std::chrono::hours(1), std::chrono::minutes(1))
                                  .with_scope("tier:free/per-hour"));

  // A glob-mapped tier plus a glob endpoint with two windows.
  m = match(rules, "pro_x", "GET", "/api/v1/search");
  CHECK(m.tier == "pro");
  CHECK(m.endpoint == "search");
  CHECK(names(m) == Names{"tier:pro/per-second", "tier:pro/per-hour", "tier:pro/all-pro-keys",
                          "endpoint:search/burst", "endpoint:search/sustained"});
  CHECK(m.limits[2]->scope == Scope::global);

  // The search endpoint is GET only: a POST falls through to the upload prefix.
  m = match(rules, "pro-legacy-abcd", "POST", "/api/v1/search");
  CHECK(m.tier == "pro");
  CHECK(m.endpoint == "upload");
  CHECK(m.limits.back()->cost == 10);
  CHECK(match(rules, "pro-legacy-abcde").tier == "free");

  CHECK(m.limits[0]->limit.algorithm() == Algorithm::sliding_window);

  m = match(rules, "x", "POST", "/auth/login");
  CHECK(m.endpoint == "login");
  CHECK(m.limits[2]->limit.failure_policy() == FailurePolicy::closed);
  CHECK(m.limits[2]->limit.algorithm() == Algorithm::strict_window);
  CHECK(m.limits[2]->limit.subintervals() == 10);
  CHECK(m.limits[3]->scope == Scope::global);
  CHECK(match(rules, "x", "GET", "/auth/login").endpoint == "");
  CHECK(match(rules, "x", "GET", "/healthz").endpoint == "health");

  m = match(rules, "pro_acme");
  CHECK(m.multiplier == 3.0);
  CHECK(match(rules, "partner-42").tier == "enterprise");
  m = match(rules, "ent_x");
  CHECK(names(m) == Names{"tier:enterprise/per-second", "tier:enterprise/per-day"});
  CHECK(m.limits[1]->limit == Limit(10'000'000, std::chrono::hours(24), std::chrono::hours(24))
                                  .with_algorithm(Algorithm::fixed_window)
                                  .with_scope("tier:enterprise/per-day"));
  m = match(rules, "api_x");
  CHECK(m.tier == "metered");
  REQUIRE(names(m) == Names{"tier:metered/rate", "tier:metered/per-hour"});
  CHECK(m.limits[1]->limit.mode() == Mode::shadow);
  CHECK(m.limits[0]->limit.mode() == Mode::enforce);
  CHECK(m.limits[0]->limit == Limit(600, std::chrono::minutes(1))
                                  .with_algorithm(Algorithm::token_bucket, 50)
                                  .with_scope("tier:metered/rate"));
  CHECK(m.limits[0]->limit.tolerance_ns() == 5'000'000'000);  // "5 s to refill them"
  CHECK(names(match(rules, "free-batch-job")) == Names{"override:free-batch-job/per-minute"});
  CHECK(match(rules, "internal-metrics").action == Action::allow);
  CHECK(match(rules, "internal-compromised").action == Action::deny);
  CHECK(match(rules, "revoked_1").action == Action::deny);
  CHECK(match(rules, "ip:192.0.2.66").action == Action::deny);
  CHECK(match(rules, "ip:2001:db8:bad::1").action == Action::deny);
  CHECK(match(rules, "ip:2001:db8:bad0::1").action == Action::limit);
}

TEST_CASE("empty rules limit nothing") {
  for (const Rules& rules : {Rules(), Rules::parse(""), Rules::parse("# nothing\n"),
                             Rules::parse("---\n"), Rules::parse("version: v1\n")}) {
    const Match m = match(rules, "k", "GET", "/x");
    CHECK(m.action == Action::limit);
    CHECK(m.limits.empty());
    CHECK(m.tier == "");
    CHECK(m.endpoint == "");
    CHECK(rules.limit_count() == 0);
  }
  CHECK(Rules().version() == "unversioned@2d06800538d394c2");  // XXH3-64 of no bytes
  CHECK(Rules::parse("").version() == Rules().version());
}

TEST_CASE("a limit as one string, as every front end reads it, beside max and window") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  t:\n"
      "    limits:\n"
      "      - {name: s, limit: 10/second}\n"
      "      - {name: l, max: 10, window: 1s}\n"
      "      - {name: b, limit: 100 per 5 minutes, algorithm: token_bucket, burst: 20}\n"
      "default_tier: t\n");
  const Match m = match(rules, "k");
  REQUIRE(m.limits.size() == 3);
  // The same limit as the long form (each counted in its own rule's scope).
  CHECK(m.limits[0]->limit == m.limits[1]->limit.with_scope("tier:t/s"));
  CHECK(m.limits[0]->limit.subintervals() == 10);
  CHECK(m.limits[2]->limit.max() == 100);
  CHECK(m.limits[2]->limit.interval() == std::chrono::minutes(5));
  CHECK(m.limits[2]->limit.burst() == 20);

  const auto problem = [](std::string_view limit) {
    return failure_of("tiers: {t: {limits: [{name: a, " + std::string(limit) + "}]}}\n");
  };
  const Failure grammar = problem("limit: 10/fortnight");
  CHECK(grammar.line == 1);
  CHECK(grammar.problem ==
        "tiers.t.limits[0].limit: unknown unit 'fortnight' in '10/fortnight'; use second, minute, "
        "hour, day, month or year");
  CHECK(problem("limit: 0/second").problem ==
        "tiers.t.limits[0].limit: '0/second' allows nothing; the count must be at least 1");
  CHECK(problem("limit: 10/second, max: 5").problem ==
        "tiers.t.limits[0].limit: give limit or max and window, not both");
  CHECK(problem("limit: 5000/second, algorithm: sliding_log").problem.find(
            "tiers.t.limits[0].limit: max: 5000 is more than 4096 for sliding_log") == 0);
  CHECK(problem("limit: 1/second").line == -1);
}

TEST_CASE("tiers by key glob: first match wins, then default_tier") {
  const std::string yaml = std::string(kHead) +
                           "keys:\n"
                           "  - {match: \"p_*\", tier: pro}\n"
                           "  - {match: \"*\", tier: free}\n";
  const Rules rules = Rules::parse(yaml);
  CHECK(match(rules, "p_1").tier == "pro");
  CHECK(names(match(rules, "p_1")) == Names{"tier:pro/a"});
  CHECK(match(rules, "q").tier == "free");

  const Rules with_default = Rules::parse(std::string(kHead) +
                                          "keys: [{match: \"p_*\", tier: pro}]\n"
                                          "default_tier: free\n");
  CHECK(match(with_default, "zzz").tier == "free");
  CHECK(names(match(with_default, "")) == Names{"tier:free/a"});

  const Rules no_default =
      Rules::parse(std::string(kHead) + "keys: [{match: \"p_*\", tier: pro}]\n");
  const Match m = match(no_default, "zzz");
  CHECK(m.tier == "");
  CHECK(m.limits.empty());
}

TEST_CASE("endpoints: prefix on segment boundaries, glob on the whole path, methods, first wins") {
  const Rules rules = Rules::parse(
      "endpoints:\n"
      "  - {name: items, path: \"/api/*/items\", limits: [{name: l, max: 1, window: 1s}]}\n"
      "  - {name: write, path: /api, methods: [POST, DELETE], limits: []}\n"
      "  - {name: api, path: /api/, limits: [{name: l, max: 2, window: 1s}]}\n"
      "  - {name: one, path: \"/x?\", limits: []}\n"
      "  - {name: root, path: /, limits: [{name: l, max: 3, window: 1s}]}\n");
  const auto endpoint = [&](std::string_view method, std::string_view path) {
    return std::string(match(rules, "k", method, path).endpoint);
  };
  CHECK(endpoint("GET", "/api/v1/items") == "items");
  CHECK(endpoint("POST", "/api/v1/items") == "items");
  CHECK(endpoint("GET", "/api/v1/items/3") == "api");  // the glob spans the whole path
  CHECK(endpoint("GET", "/api") == "api");
  CHECK(endpoint("GET", "/api/") == "api");
  CHECK(endpoint("GET", "/api/x/y") == "api");
  CHECK(endpoint("POST", "/api/x") == "write");
  CHECK(endpoint("DELETE", "/api") == "write");
  CHECK(endpoint("post", "/api/x") == "api");  // methods are case-sensitive
  CHECK(endpoint("GET", "/apix") == "root");
  CHECK(endpoint("GET", "/xy") == "one");
  CHECK(endpoint("GET", "/xyz") == "root");
  CHECK(endpoint("GET", "/") == "root");
  CHECK(names(match(rules, "k", "GET", "/api/1/items")) == Names{"endpoint:items/l"});
  CHECK(names(match(rules, "k", "POST", "/api/1")).empty());

  // HEAD counts wherever GET does (it is GET without the body), and only there.
  const Rules reads = Rules::parse(
      "endpoints:\n"
      "  - {name: search, path: \"/v1/*/search\", methods: [GET], limits: []}\n"
      "  - {name: upload, path: /v1, methods: [POST], limits: []}\n"
      "  - {name: heads, path: /h, methods: [HEAD], limits: []}\n"
      "  - {name: rest, path: /, limits: []}\n");
  CHECK(match(reads, "k", "HEAD", "/v1/x/search").endpoint == "search");
  CHECK(match(reads, "k", "HEAD", "/v1/x").endpoint == "rest");
  CHECK(match(reads, "k", "HEAD", "/h").endpoint == "heads");
  CHECK(match(reads, "k", "GET", "/h").endpoint == "rest");  // not the other way round

  // Without a catch-all, a path can match nothing.
  const Rules narrow = Rules::parse("endpoints: [{name: a, path: /a, limits: []}]\n");
  CHECK(match(narrow, "k", "GET", "/b").endpoint == "");
  CHECK(match(narrow, "k", "GET", "/a/b").endpoint == "a");
}

TEST_CASE("path_match: loose compares paths as a case-insensitive backend that drops trailing dots sees them") {
  const Rules rules = Rules::parse(
      "endpoints:\n"
      "  - {name: api, path: /API/v1, path_match: loose, limits: []}\n"
      "  - {name: files, path: \"/Files/*.TXT\", path_match: loose, limits: []}\n"
      "  - {name: exact, path: /Exact, path_match: exact, limits: []}\n"
      "  - {name: plain, path: /plain, limits: []}\n");
  for (const char* path : {"/api/v1", "/API/V1/x", "/api./v1", "/api%20/v1.", "/Api.%20./v1/",
                           "/api/v1./users"}) {
    CAPTURE(path);
    CHECK(match(rules, "k", "GET", path).endpoint == "api");
  }
  CHECK(match(rules, "k", "GET", "/files/a.txt").endpoint == "files");
  CHECK(match(rules, "k", "GET", "/FILES/dir/B.Txt.").endpoint == "files");
  CHECK(match(rules, "k", "GET", "/apiv1").endpoint == "");
  // Exact (the default) is as written.
  CHECK(match(rules, "k", "GET", "/Exact").endpoint == "exact");
  CHECK(match(rules, "k", "GET", "/exact").endpoint == "");
  CHECK(match(rules, "k", "GET", "/PLAIN").endpoint == "");
  CHECK(match(rules, "k", "GET", "/plain.").endpoint == "");
  CHECK(match(rules, "k", "GET", "/plain").endpoint == "plain");
  CHECK_THROWS_WITH_AS(Rules::parse("endpoints: [{name: a, path: /a, path_match: nocase, limits: []}]\n"),
                       doctest::Contains("nocase"), RulesError);
  CHECK(rules.describe_json().find("\"path_match\":\"loose\"") != std::string::npos);
}

TEST_CASE("an endpoint with several windows counts the request against all of them") {
  const Rules rules = Rules::parse(
      "tiers: {t: {limits: [{name: s, max: 10, window: 1s}]}}\n"
      "default_tier: t\n"
      "endpoints:\n"
      "  - name: search\n"
      "    path: /search\n"
      "    limits:\n"
      "      - {name: per-second, max: 5, window: 1s}\n"
      "      - {name: per-hour, max: 100, window: 1h, subintervals: 60, per: endpoint}\n"
      "      - {name: per-day, max: 1000, window: 1d, per: global, failure_policy: open}\n");
  const Match m = match(rules, "k", "GET", "/search");
  REQUIRE(m.limits.size() == 4);
  CHECK(names(m) == Names{"tier:t/s", "endpoint:search/per-second", "endpoint:search/per-hour",
                          "endpoint:search/per-day"});
  CHECK(m.limits[1]->limit.interval() == milliseconds(1000));
  CHECK(m.limits[2]->limit.interval() == std::chrono::hours(1));
  CHECK(m.limits[2]->limit.subintervals() == 60);
  CHECK(m.limits[2]->scope == Scope::endpoint);
  CHECK(m.limits[3]->limit.interval() == std::chrono::hours(24));
  CHECK(m.limits[3]->limit.failure_policy() == FailurePolicy::open);
  CHECK(m.limits[3]->scope == Scope::global);
  CHECK(m.limits[0]->limit.failure_policy() == FailurePolicy::local);
}

TEST_CASE("YAML anchors and aliases share text, and cycles cannot loop") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  free: {limits: &l [{name: s, max: 5, window: 1s}]}\n"
      "  pro: {limits: *l}\n"
      "default_tier: pro\n");
  CHECK(names(match(rules, "k")) == Names{"tier:pro/s"});
  CHECK(rules.limit_count() == 2);
  CHECK(failure_of("tiers: &t {free: *t}\n").problem ==
        "tiers.free: unknown field \"free\" (expected one of: limits, mode)");
  CHECK(failure_of("allow: &a [*a]\n").problem == "allow[0]: expected a string, got a list");
}

TEST_CASE("YAML aliases cannot multiply a small file past the node bound (both parsers)") {
  // Seven levels of ten aliases each: 10^7 nodes from under a kilobyte.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char level = 'b'; level <= 'g'; ++level) {
    bomb += std::string(1, level) + ": &" + std::string(1, level) + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i == 0 ? "*" : ", *") + static_cast<char>(level - 1);
    bomb += "]\n";
  }
  YamlReader reader("bomb.yaml");
  const YAML::Node root = reader.document(bomb);
  std::size_t scalars = 0;
  std::function<void(const YamlReader&, const YamlItem&)> walk = [&](const YamlReader& r,
                                                                     const YamlItem& item) {
    if (item.node.IsSequence()) {
      for (const YamlItem& e : r.list(item)) walk(r, e);
    } else if (item.node.IsMap()) {
      for (const YamlReader::Entry& e : r.entries(item)) walk(r, e.value);
    } else {
      ++scalars;
    }
  };
  CHECK_THROWS_WITH_AS(walk(reader, YamlItem{root, root.Mark(), ""}),
                       doctest::Contains("YAML nodes for a file of this size"), RulesError);
  CHECK(scalars <= 10'000 + 4 * bomb.size());
  // A file as large without aliases reads whole.
  std::string plain = "a: [";
  for (std::size_t i = 0; plain.size() < bomb.size(); ++i) plain += (i == 0 ? "x" : ", x");
  plain += "]\n";
  YamlReader fine("plain.yaml");
  const YAML::Node doc = fine.document(plain);
  scalars = 0;
  walk(fine, YamlItem{doc, doc.Mark(), ""});
  CHECK(scalars > 100);
}

TEST_CASE("defaults.failure_policy applies where a limit says nothing") {
  const Rules rules = Rules::parse(
      "defaults: {failure_policy: closed}\n"
      "tiers: {t: {limits: [{name: a, max: 1, window: 1s}, {name: b, max: 1, window: 1s, "
      "failure_policy: local}]}}\n"
      "default_tier: t\n");
  const Match m = match(rules, "k");
  CHECK(m.limits[0]->limit.failure_policy() == FailurePolicy::closed);
  CHECK(m.limits[1]->limit.failure_policy() == FailurePolicy::local);
  const Rules split = Rules::parse(
      "defaults: {failure_policy: partitioned}\n"
      "tiers: {t: {limits: [{name: a, max: 1, window: 1s}]}}\ndefault_tier: t\n");
  CHECK(match(split, "k").limits[0]->limit.failure_policy() == FailurePolicy::partitioned);
  CHECK(YAML::Load(split.describe_json())["defaults"]["failure_policy"].as<std::string>() ==
        "partitioned");
}

TEST_CASE("mode: enforce by default, shadow per limit, per tier and in defaults") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  free: {mode: shadow, limits: [{name: a, max: 1, window: 1s},\n"
      "                               {name: b, max: 1, window: 1s, mode: enforce}]}\n"
      "  paid: {limits: [{name: a, max: 1, window: 1s}, {name: b, max: 1, window: 1s, mode: shadow}]}\n"
      "keys: [{match: 'paid-*', tier: paid}]\n"
      "default_tier: free\n");
  const Match free = match(rules, "k");
  CHECK(free.limits[0]->limit.mode() == Mode::shadow);
  CHECK(free.limits[1]->limit.mode() == Mode::enforce);
  const Match paid = match(rules, "paid-1");
  CHECK(paid.limits[0]->limit.mode() == Mode::enforce);
  CHECK(paid.limits[1]->limit.mode() == Mode::shadow);
  CHECK_FALSE(rules.shadow_headers());
  // A multiplier or an override scales a limit in shadow, which stays in shadow.
  for (const Algorithm a : {Algorithm::sliding_window, Algorithm::token_bucket,
                            Algorithm::sliding_log}) {
    const Limit scaled =
        with_scaled_max(Limit(10, std::chrono::seconds(1)).with_algorithm(a).with_mode(Mode::shadow), 30);
    CHECK(scaled.max() == 30);
    CHECK(scaled.mode() == Mode::shadow);
  }
  const YAML::Node described = YAML::Load(rules.describe_json());
  CHECK(described["tiers"]["free"]["limits"][0]["mode"].as<std::string>() == "shadow");
  CHECK(described["defaults"]["mode"].as<std::string>() == "enforce");
  CHECK_FALSE(described["defaults"]["shadow_headers"].as<bool>());

  // A rule moved from shadow to enforce keeps its scope, and so its counts.
  const Rules enforced = Rules::parse(
      "tiers: {free: {limits: [{name: a, max: 1, window: 1s}]}}\ndefault_tier: free\n");
  CHECK(match(enforced, "k").limits[0]->limit.scope() == free.limits[0]->limit.scope());

  const Rules by_default = Rules::parse(
      "defaults: {mode: shadow, shadow_headers: true}\n"
      "tiers: {t: {limits: [{name: a, max: 1, window: 1s}]}}\n"
      "endpoints: [{name: e, path: /e, limits: [{name: x, max: 1, window: 1s}]}]\n"
      "default_tier: t\n");
  CHECK(by_default.shadow_headers());
  const Match d = match(by_default, "k", "GET", "/e");
  REQUIRE(d.limits.size() == 2);
  for (const LimitRule* rule : d.limits) CHECK(rule->limit.mode() == Mode::shadow);
  CHECK(failure_of("defaults: {mode: dry_run}\n").problem ==
        "defaults.mode: \"dry_run\" is not one of enforce, shadow");
  CHECK(failure_of("defaults: {shadow_headers: 1}\n").problem ==
        "defaults.shadow_headers: \"1\" is not one of true, false");
  CHECK(failure_of("tiers: {t: {mode: off, limits: [{name: a, max: 1, window: 1s}]}}\n").problem ==
        "tiers.t.mode: \"off\" is not one of enforce, shadow");
}

TEST_CASE("algorithm per limit: sliding_window by default, strict_window, fixed_window") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  t:\n"
      "    limits:\n"
      "      - {name: plain, max: 5, window: 1s}\n"
      "      - {name: sliding, max: 5, window: 1s, algorithm: sliding_window}\n"
      "      - {name: strict, max: 5, window: 1s, subintervals: 4, algorithm: strict_window}\n"
      "      - {name: fixed, max: 5, window: 1m, algorithm: fixed_window}\n"
      "      - {name: fixed-1, max: 5, window: 15ms, subintervals: 1, algorithm: fixed_window}\n"
      "      - {name: longest, max: 5, window: 49d, algorithm: fixed_window}\n"
      "default_tier: t\n"
      "endpoints: [{name: e, path: /e, limits: [{name: x, max: 2, window: 10s, algorithm: "
      "strict_window}]}]\n"
      "overrides: [{key: o, limits: [{name: y, max: 3, window: 1h, algorithm: fixed_window}]}]\n");
  const Match m = match(rules, "k", "GET", "/e");
  REQUIRE(m.limits.size() == 7);
  const auto limit = [&](std::size_t i) { return m.limits[i]->limit; };
  CHECK(limit(0).algorithm() == Algorithm::sliding_window);
  CHECK(limit(0).subintervals() == 10);
  CHECK(limit(1) == limit(0).with_scope("tier:t/sliding"));
  CHECK(limit(2) == Limit(5, milliseconds(1000), milliseconds(250))
                        .with_algorithm(Algorithm::strict_window)
                        .with_scope("tier:t/strict"));
  // A fixed_window's one subinterval is its window, whatever the window divides into.
  CHECK(limit(3) == Limit(5, std::chrono::minutes(1), std::chrono::minutes(1))
                        .with_algorithm(Algorithm::fixed_window)
                        .with_scope("tier:t/fixed"));
  CHECK(limit(3).to_string() == "5/1m@1m fixed_window");
  CHECK(limit(4).algorithm() == Algorithm::fixed_window);
  CHECK(limit(4).subintervals() == 1);
  CHECK(limit(4).resolution() == milliseconds(15));
  CHECK(limit(5).interval() == std::chrono::hours(49 * 24));
  CHECK(limit(5).subintervals() == 1);
  CHECK(limit(6).algorithm() == Algorithm::strict_window);
  const Match o = match(rules, "o");
  REQUIRE(o.limits.size() == 1);
  CHECK(o.limits[0]->limit.algorithm() == Algorithm::fixed_window);
  CHECK(o.limits[0]->limit.resolution() == std::chrono::hours(1));

  // GET /admin/rules says which.
  const YAML::Node doc = YAML::Load(rules.describe_json());
  CHECK(doc["defaults"]["algorithm"].as<std::string>() == "sliding_window");
  const YAML::Node t = doc["tiers"]["t"]["limits"];
  CHECK(t[0]["algorithm"].as<std::string>() == "sliding_window");
  CHECK(t[2]["algorithm"].as<std::string>() == "strict_window");
  CHECK(t[2]["subintervals"].as<int>() == 4);
  CHECK(t[3]["algorithm"].as<std::string>() == "fixed_window");
  CHECK(t[3]["subintervals"].as<int>() == 1);
  CHECK(t[3]["window_ms"].as<int>() == 60000);
  CHECK(t[3]["limit"].as<std::string>() == "5/1m@1m fixed_window");
  CHECK(doc["endpoints"][0]["limits"][0]["algorithm"].as<std::string>() == "strict_window");
  CHECK(doc["overrides"][0]["limits"][0]["algorithm"].as<std::string>() == "fixed_window");
}

TEST_CASE("a rule whose algorithm changes keeps its counts while its window stays the same") {
  // Counts are shared by limits of one scope (the rule's name) and geometry, whatever
  // their algorithms: what a reloaded rule asks the engine for.
  const auto rule = [](std::string_view fields) {
    const Rules rules = Rules::parse("tiers: {t: {limits: [{name: r, max: 5, window: 1m, " +
                                     std::string(fields) + "}]}}\ndefault_tier: t\n");
    return match(rules, "k").limits.at(0)->limit;
  };
  const Limit sliding = rule("algorithm: sliding_window");
  const Limit strict = rule("algorithm: strict_window");
  CHECK(strict != sliding);
  CHECK(strict.scope() == sliding.scope());
  CHECK(strict.interval() == sliding.interval());
  CHECK(strict.resolution() == sliding.resolution());
  // A fixed_window is a window of one subinterval: the same geometry as that.
  const Limit fixed = rule("algorithm: fixed_window");
  const Limit one = rule("subintervals: 1");
  CHECK(fixed.scope() == one.scope());
  CHECK(fixed.resolution() == one.resolution());
  CHECK(fixed.resolution() != sliding.resolution());
}

TEST_CASE("defaults.algorithm applies where a limit says nothing") {
  const Rules rules = Rules::parse(
      "defaults: {algorithm: strict_window}\n"
      "tiers: {t: {limits: [{name: a, max: 1, window: 1s}, {name: b, max: 1, window: 1s, "
      "algorithm: sliding_window}]}}\n"
      "default_tier: t\n");
  const Match m = match(rules, "k");
  CHECK(m.limits[0]->limit.algorithm() == Algorithm::strict_window);
  CHECK(m.limits[1]->limit.algorithm() == Algorithm::sliding_window);
  CHECK(YAML::Load(rules.describe_json())["defaults"]["algorithm"].as<std::string>() ==
        "strict_window");

  // A fixed_window by default: no subintervals but 1, unless the limit says otherwise.
  const std::string fixed = "defaults: {failure_policy: open, algorithm: fixed_window}\n";
  const Rules by_default = Rules::parse(
      fixed + "tiers: {t: {limits: [{name: a, max: 1, window: 15ms}, {name: b, max: 1, " +
      "window: 1s, subintervals: 4, algorithm: strict_window}]}}\ndefault_tier: t\n");
  const Match d = match(by_default, "k");
  CHECK(d.limits[0]->limit.algorithm() == Algorithm::fixed_window);
  CHECK(d.limits[0]->limit.subintervals() == 1);
  CHECK(d.limits[0]->limit.failure_policy() == FailurePolicy::open);
  CHECK(d.limits[1]->limit.algorithm() == Algorithm::strict_window);
  CHECK(d.limits[1]->limit.subintervals() == 4);
  const Failure f = failure_of(fixed +
                               "tiers:\n"
                               "  t:\n"
                               "    limits:\n"
                               "      - {name: a, max: 1, window: 1s, subintervals: 4}\n");
  CHECK(f.line == 5);
  CHECK(f.problem ==
        "tiers.t.limits[0].subintervals: fixed_window has one subinterval, the whole window "
        "(window: 1s): subintervals: 4 says otherwise; leave it out (the algorithm set by "
        "defaults.algorithm)");
  CHECK(failure_of(fixed + "tiers: {t: {limits: [{name: a, max: 1, window: 50d}]}}\n").problem ==
        "tiers.t.limits[0].window: window: 50d is longer than 4294967295ms, the longest for "
        "fixed_window (its one subinterval is the whole window) (the algorithm set by "
        "defaults.algorithm)");
}

TEST_CASE("algorithm: token_bucket, with burst (max when it is not set)") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  t:\n"
      "    limits:\n"
      "      - {name: api, max: 600, window: 1m, algorithm: token_bucket, burst: 50}\n"
      "      - {name: full, max: 10, window: 1s, algorithm: token_bucket}\n"
      "      - {name: odd, max: 10, window: 15ms, subintervals: 1, algorithm: token_bucket}\n"
      "      - {name: deep, max: 5, window: 1s, algorithm: token_bucket, burst: 20, cost: 20}\n"
      "      - {name: long, max: 1000, window: 366d, algorithm: token_bucket, burst: 100}\n"
      "      - {name: same, max: 7, window: 1s, algorithm: token_bucket, burst: 7}\n"
      "      - {name: ring, max: 5, window: 1s}\n"
      "default_tier: t\n");
  const Match m = match(rules, "k");
  REQUIRE(m.limits.size() == 7);
  const auto limit = [&](std::size_t i) { return m.limits[i]->limit; };
  CHECK(limit(0) == Limit(600, std::chrono::minutes(1))
                        .with_algorithm(Algorithm::token_bucket, 50)
                        .with_scope("tier:t/api"));
  CHECK(limit(0).algorithm() == Algorithm::token_bucket);
  CHECK(limit(0).burst() == 50);
  CHECK(limit(0).emission_ns() == 100'000'000);
  CHECK(limit(0).tolerance_ns() == 5'000'000'000);
  CHECK(limit(0).subintervals() == 1);
  CHECK(limit(0).to_string() == "600/1m@1m token_bucket burst 50");
  CHECK(limit(1).burst() == 10);
  CHECK(limit(1).to_string() == "10/1s@1s token_bucket");
  CHECK(limit(2).resolution() == milliseconds(15));  // (no 10 subintervals of 15ms needed)
  CHECK(limit(3).burst() == 20);                     // above max: a cost up to the burst can pass
  CHECK(m.limits[3]->cost == 20);
  // Longer than a resolution may be, and allowed: 100 refill in 36.6 days.
  CHECK(limit(4).interval() == std::chrono::hours(366 * 24));
  CHECK(limit(4).burst() == 100);
  CHECK(limit(5) == limit(5).with_burst(0));  // a burst of max is the default one
  CHECK(limit(6).algorithm() == Algorithm::sliding_window);

  // GET /admin/rules gives a token bucket's burst, and no burst for the others.
  const YAML::Node t = YAML::Load(rules.describe_json())["tiers"]["t"]["limits"];
  CHECK(t[0]["algorithm"].as<std::string>() == "token_bucket");
  CHECK(t[0]["max"].as<int>() == 600);
  CHECK(t[0]["window_ms"].as<int>() == 60000);
  CHECK(t[0]["burst"].as<int>() == 50);
  CHECK(t[0]["limit"].as<std::string>() == "600/1m@1m token_bucket burst 50");
  CHECK(t[1]["burst"].as<int>() == 10);
  CHECK(t[3]["burst"].as<int>() == 20);
  CHECK_FALSE(t[6]["burst"].IsDefined());
}

TEST_CASE("algorithm: sliding_log, exact, with max bounded; a multiplier stops at the bound") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  t:\n"
      "    limits:\n"
      "      - {name: log, max: 100, window: 1m, algorithm: sliding_log}\n"
      "      - {name: most, max: 4096, window: 366d, algorithm: sliding_log}\n"
      "      - {name: odd, max: 5, window: 1001ms, algorithm: sliding_log}\n"
      "default_tier: t\n"
      "overrides:\n"
      "  - {key: big, multiplier: 100}\n");
  const Match m = match(rules, "k");
  REQUIRE(m.limits.size() == 3);
  CHECK(m.limits[2]->limit.interval() == milliseconds(1001));  // (no 10 subintervals needed)
  CHECK(m.limits[0]->limit == Limit(100, std::chrono::minutes(1))
                                  .with_algorithm(Algorithm::sliding_log)
                                  .with_scope("tier:t/log"));
  CHECK(m.limits[0]->limit.to_string() == "100/1m@1m sliding_log");
  CHECK(m.limits[1]->limit.max() == 4096);
  const Match big = match(rules, "big");
  CHECK(effective_limit(*big.limits[0], big.multiplier).max() == 4096);
  CHECK(effective_limit(*big.limits[1], big.multiplier).max() == 4096);
  const YAML::Node t = YAML::Load(rules.describe_json())["tiers"]["t"]["limits"];
  CHECK(t[0]["algorithm"].as<std::string>() == "sliding_log");

  const auto problem = [&](std::string_view limit) {
    const Failure f = failure_of("tiers:\n  t:\n    limits:\n      - " + std::string(limit) + "\n");
    CHECK(f.line == 4);
    return f.problem;
  };
  CHECK(problem("{name: a, max: 4097, window: 1s, algorithm: sliding_log}") ==
        "tiers.t.limits[0].max: max: 4097 is more than 4096 for sliding_log (every unit is an "
        "entry of its log)");
  CHECK(problem("{name: a, max: 10, window: 1s, subintervals: 4, algorithm: sliding_log}") ==
        "tiers.t.limits[0].subintervals: sliding_log has one subinterval, the whole window "
        "(window: 1s): subintervals: 4 says otherwise; leave it out");
  // A log's one subinterval is not a ring's: it may be longer than a ring's longest.
  const Rules longer = Rules::parse(
      "tiers: {t: {limits: [{name: a, max: 10, window: 4294967297ms, algorithm: sliding_log}, "
      "{name: b, max: 5000, window: 4294967297ms, algorithm: token_bucket, burst: 1}]}}\n"
      "default_tier: t\n");
  CHECK(match(longer, "k").limits[0]->limit.interval() == milliseconds(4294967297));
  CHECK(match(longer, "k").limits[1]->limit.burst() == 1);
}

TEST_CASE("defaults.algorithm: token_bucket, with a burst per limit") {
  const std::string bucket = "defaults: {algorithm: token_bucket}\n";
  const Rules rules =
      Rules::parse(bucket +
                   "tiers:\n"
                   "  t:\n"
                   "    limits:\n"
                   "      - {name: a, max: 10, window: 1s, burst: 3}\n"
                   "      - {name: b, max: 10, window: 1s}\n"
                   "      - {name: c, max: 10, window: 1s, algorithm: strict_window}\n"
                   "default_tier: t\n");
  const Match m = match(rules, "k");
  REQUIRE(m.limits.size() == 3);
  CHECK(m.limits[0]->limit.algorithm() == Algorithm::token_bucket);
  CHECK(m.limits[0]->limit.burst() == 3);
  CHECK(m.limits[1]->limit.algorithm() == Algorithm::token_bucket);
  CHECK(m.limits[1]->limit.burst() == 10);
  CHECK(m.limits[2]->limit.algorithm() == Algorithm::strict_window);
  CHECK(m.limits[2]->limit.subintervals() == 10);
  CHECK(YAML::Load(rules.describe_json())["defaults"]["algorithm"].as<std::string>() ==
        "token_bucket");

  // Its errors say where the algorithm came from.
  const auto problem = [&](std::string_view limit) {
    const Failure f =
        failure_of(bucket + "tiers:\n  t:\n    limits:\n      - " + std::string(limit) + "\n");
    CHECK(f.line == 5);
    return f.problem;
  };
  CHECK(problem("{name: a, max: 10, window: 1s, subintervals: 4}") ==
        "tiers.t.limits[0].subintervals: token_bucket has one subinterval, the whole window "
        "(window: 1s): subintervals: 4 says otherwise; leave it out (the algorithm set by "
        "defaults.algorithm)");
  CHECK(problem("{name: a, max: 10, window: 50d}") ==
        "tiers.t.limits[0].window: token_bucket with max: 10 and window: 50d takes longer than "
        "4294967295ms (about 49.7 days) to refill its burst (max, when burst is not given): give "
        "a smaller burst (the algorithm set by defaults.algorithm)");
  CHECK(problem("{name: a, max: 10, window: 1s, burst: 3, algorithm: fixed_window}") ==
        "tiers.t.limits[0].burst: burst applies to token_bucket only, not to fixed_window: leave "
        "it out");
  CHECK(failure_of("defaults: {algorithm: strict_window}\n"
                   "tiers: {t: {limits: [{name: a, max: 10, window: 1s, burst: 3}]}}\n")
            .problem ==
        "tiers.t.limits[0].burst: burst applies to token_bucket only, not to strict_window: leave "
        "it out (the algorithm set by defaults.algorithm)");
}

TEST_CASE("overrides: tier, multiplier, limits") {
  const Rules rules = Rules::parse(std::string(kHead) +
                                   "default_tier: free\n"
                                   "endpoints: [{name: e, path: /e, limits: [{name: x, max: 7, "
                                   "window: 1s}]}]\n"
                                   "overrides:\n"
                                   "  - {key: vip, tier: pro, multiplier: 2.5}\n"
                                   "  - {key: half, multiplier: 0.5}\n"
                                   "  - key: own\n"
                                   "    limits:\n"
                                   "      - {name: m, max: 9, window: 1m}\n"
                                   "      - {name: g, max: 9, window: 1m, per: global}\n"
                                   "  - {key: none, limits: []}\n"
                                   "  - {key: \"p*\", tier: pro}\n");
  Match m = match(rules, "vip", "GET", "/e");
  CHECK(m.tier == "pro");
  CHECK(m.multiplier == 2.5);
  REQUIRE(names(m) == Names{"tier:pro/a", "endpoint:e/x"});
  // The multiplier scales the key's own limits, not the endpoint's.
  CHECK(effective_limit(*m.limits[0], m.multiplier).max() == 125);
  CHECK(effective_limit(*m.limits[1], m.multiplier).max() == 7);
  CHECK(effective_limit(*m.limits[0], m.multiplier).interval() == m.limits[0]->limit.interval());

  m = match(rules, "half");
  CHECK(m.tier == "free");
  CHECK(effective_limit(*m.limits[0], m.multiplier).max() == 2);  // 2.5 rounded down

  m = match(rules, "own");
  CHECK(m.tier == "free");
  CHECK(m.multiplier == 1.0);
  CHECK(names(m) == Names{"override:own/m", "override:own/g"});
  CHECK(m.limits[0]->scales);
  CHECK_FALSE(m.limits[1]->scales);  // global: one max for everybody

  CHECK(names(match(rules, "none", "GET", "/e")) == Names{"endpoint:e/x"});
  CHECK(match(rules, "p*").tier == "pro");  // an override key is exact, not a glob
  CHECK(match(rules, "px").tier == "free");
}

TEST_CASE("effective_limit bounds") {
  const LimitRule rule{"r", Limit(10, milliseconds(1000)), Scope::key, 1, true};
  CHECK(effective_limit(rule, 1.0) == rule.limit);
  CHECK(effective_limit(rule, 0.01).max() == 1);
  CHECK(effective_limit(rule, 1e12).max() == Limit::kMaxCount);
  CHECK(effective_limit(rule, std::numeric_limits<double>::quiet_NaN()).max() == 1);
  const LimitRule fixed{"r", Limit(10, milliseconds(1000)), Scope::key, 1, false};
  CHECK(effective_limit(fixed, 3).max() == 10);
}

TEST_CASE("a multiplier scales a token bucket's burst with its max") {
  const Limit api = Limit(600, std::chrono::minutes(1))
                        .with_algorithm(Algorithm::token_bucket, 50)
                        .with_failure_policy(FailurePolicy::closed)
                        .with_scope("tier:t/api");
  const LimitRule rule{"tier:t/api", api, Scope::key, 1, true};
  const Limit doubled = effective_limit(rule, 2);
  CHECK(doubled.max() == 1200);
  CHECK(doubled.burst() == 100);
  CHECK(doubled.tolerance_ns() == api.tolerance_ns());  // the same 5 s to refill it
  CHECK(doubled.algorithm() == Algorithm::token_bucket);
  CHECK(doubled.failure_policy() == FailurePolicy::closed);
  CHECK(doubled.interval() == api.interval());
  CHECK(doubled.scope() == api.scope());  // the same bucket, with another rate
  CHECK(effective_limit(rule, 0.5).burst() == 25);
  CHECK(effective_limit(rule, 0.03).max() == 18);
  CHECK(effective_limit(rule, 0.03).burst() == 1);   // 1.5, rounded down
  CHECK(effective_limit(rule, 0.001).burst() == 1);  // at least 1
  CHECK(with_scaled_max(api, 60).burst() == 5);      // an admin API override's limit
  // A burst left to be max stays max.
  const LimitRule full{"r", Limit(10, milliseconds(1000)).with_algorithm(Algorithm::token_bucket),
                       Scope::key, 1, true};
  CHECK(effective_limit(full, 3).burst() == 30);
  CHECK(effective_limit(full, 3) == full.limit.with_max(30));

  // Where the bucket could not be made, the nearest that can: a max that refills one unit
  // in the longest time a bucket may take (4294967295ms), and as much of the burst as
  // refills in it.
  constexpr std::int64_t kLongestNs = Limit::kMaxResolution.count() * 1'000'000;
  const LimitRule slow{
      "r", Limit(1000, std::chrono::hours(366 * 24)).with_algorithm(Algorithm::token_bucket, 100),
      Scope::key, 1, true};
  const Limit slowest = effective_limit(slow, 0.001);  // would be 1 per 366 days
  CHECK(slowest.max() == 8);
  CHECK(slowest.burst() == 1);
  CHECK(slowest.tolerance_ns() <= kLongestNs);
  // One refilled exactly in the longest time: 7 of it refill just past it, as
  // Limit::emission_ns() rounds up.
  const LimitRule edge{"r",
                       Limit(1, milliseconds(4294967295)).with_algorithm(Algorithm::token_bucket),
                       Scope::key, 1, true};
  CHECK(edge.limit.tolerance_ns() == kLongestNs);
  CHECK(effective_limit(edge, 3).burst() == 3);
  CHECK(effective_limit(edge, 7).max() == 7);
  CHECK(effective_limit(edge, 7).burst() == 6);
  CHECK(effective_limit(edge, 7).tolerance_ns() <= kLongestNs);
}

TEST_CASE("allow and deny: deny wins, and neither counts anything") {
  const Rules rules = Rules::parse(std::string(kHead) +
                                   "default_tier: free\n"
                                   "endpoints: [{name: e, path: /, limits: [{name: x, max: 7, "
                                   "window: 1s}]}]\n"
                                   "allow: [\"svc-*\", ops]\n"
                                   "deny: [\"svc-bad*\", \"?\"]\n");
  Match m = match(rules, "svc-a");
  CHECK(m.action == Action::allow);
  CHECK(m.limits.empty());
  CHECK(m.tier == "free");  // still reported, for logs
  CHECK(m.endpoint == "e");
  CHECK(match(rules, "ops").action == Action::allow);
  m = match(rules, "svc-bad1");
  CHECK(m.action == Action::deny);
  CHECK(m.limits.empty());
  CHECK(match(rules, "x").action == Action::deny);
  CHECK(match(rules, "xy").action == Action::limit);
  CHECK(match(rules, "xy").limits.size() == 2);
}

TEST_CASE("addresses in keys, overrides, allow and deny are made canonical") {
  const Rules rules = Rules::parse(std::string(kHead) +
                                   "default_tier: free\n"
                                   "keys: [{match: \"ip:10.1.*\", tier: free}]\n"
                                   "overrides: [{key: \"ip:::FFFF:192.0.2.9\", multiplier: 3}]\n"
                                   "allow: [\"ip:2001:DB8::0001\", \"ip:fd00::*\"]\n"
                                   "deny: [\"ip:::ffff:127.0.0.1\", \"ip:10.6.6.6\"]\n");
  CHECK(match(rules, "ip:127.0.0.1").action == Action::deny);
  CHECK(match(rules, "ip:10.6.6.6").action == Action::deny);
  CHECK(match(rules, "ip:2001:db8::1").action == Action::allow);
  CHECK(match(rules, "ip:fd00::5").action == Action::allow);
  CHECK(match(rules, "ip:192.0.2.9").multiplier == 3.0);
  CHECK(match(rules, "ip:192.0.2.8").multiplier == 1.0);
  const std::string described = rules.describe_json();
  CHECK(described.find("\"ip:127.0.0.1\"") != std::string::npos);
  CHECK(described.find("\"ip:2001:db8::1\"") != std::string::npos);
  CHECK(described.find("\"ip:192.0.2.9\"") != std::string::npos);

  const std::string head = std::string(kHead) + "default_tier: free\n";
  for (const auto& [yaml, problem] : std::vector<std::pair<std::string, std::string>>{
           {"deny: [\"ip:fe80::1%eth0\"]\n", "deny[0]: \"ip:fe80::1%eth0\" is not an IP address"},
           {"deny: [\"ip:10.0.0.1:80\"]\n", "deny[0]: \"ip:10.0.0.1:80\" is not an IP address"},
           {"allow: [\"ip:localhost\"]\n", "allow[0]: \"ip:localhost\" is not an IP address"},
           {"deny: [\"ip:010.0.0.1\"]\n", "deny[0]: \"ip:010.0.0.1\" is not an IP address"},
           {"deny: [\"ip:2001:DB8:*\"]\n", "deny[0]: \"ip:2001:DB8:*\" can never match"},
           {"deny: [\"ip:::ffff:10.*\"]\n", "deny[0]: \"ip:::ffff:10.*\" can never match"},
           {"keys: [{match: \"ip:fe80::*%eth0\", tier: free}]\n",
            "keys[0].match: \"ip:fe80::*%eth0\" can never match"},
           {"overrides: [{key: \"ip:10.*\", multiplier: 2}]\n",
            "overrides[0].key: \"ip:10.*\" is not an IP address"},
       }) {
    CAPTURE(yaml);
    CHECK(failure_of(head + yaml).problem.starts_with(problem));
  }
}

TEST_CASE("match() resets a reused Match") {
  const Rules rules = Rules::parse(std::string(kHead) +
                                   "default_tier: free\n"
                                   "overrides: [{key: big, multiplier: 4}]\n"
                                   "endpoints: [{name: e, path: /e, limits: []}]\n"
                                   "deny: [bad]\n");
  Match m;
  rules.match("big", "GET", "/e", m);
  CHECK(m.multiplier == 4.0);
  rules.match("bad", "GET", "/e", m);
  CHECK(m.action == Action::deny);
  CHECK(m.multiplier == 1.0);
  rules.match("ok", "GET", "/z", m);
  CHECK(m.action == Action::limit);
  CHECK(m.endpoint == "");
  CHECK(m.limits.size() == 1);
}

TEST_CASE("Match pointers survive moving the Rules into a shared_ptr") {
  Rules rules = Rules::parse(std::string(kHead) + "default_tier: pro\n");
  Match before;
  rules.match("k", "GET", "/", before);
  const auto shared = std::make_shared<const Rules>(std::move(rules));
  Match after;
  shared->match("k", "GET", "/", after);
  CHECK(before.limits == after.limits);
  CHECK(before.tier.data() == after.tier.data());
  CHECK(before.limits[0]->name == "tier:pro/a");
}

TEST_CASE("match() from many threads at once") {
  const auto rules = std::make_shared<const Rules>(Rules::load(RATEWIN_RULES_EXAMPLE));
  std::vector<std::thread> threads;
  std::vector<std::size_t> counted(4, 0);
  for (std::size_t t = 0; t < counted.size(); ++t) {
    threads.emplace_back([&rules, &counted, t] {
      Match m;
      for (int i = 0; i < 2000; ++i) {
        rules->match(i % 2 == 0 ? "pro_a" : "anyone", "GET", "/api/v1/search", m);
        counted[t] += m.limits.size();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::size_t c : counted) CHECK(c == 1000 * 5 + 1000 * 4);
}

TEST_CASE("the version names the file's bytes") {
  const Rules a = Rules::parse("version: v1\ntiers: {}\n");
  const Rules b = Rules::parse("version: v1\ntiers: {}\n");
  const Rules c = Rules::parse("version: v1\ntiers: {} # edited\n");
  const Rules d = Rules::parse("tiers: {}\n");
  CHECK(a.version() == b.version());
  CHECK(a.version() != c.version());
  CHECK(a.version().starts_with("v1@"));
  CHECK(c.version().starts_with("v1@"));
  CHECK(a.version().size() == 3 + 16);
  CHECK(d.version().starts_with("unversioned@"));
  CHECK(
      Rules::parse("version: 2024-06-01 hotfix 2\n").version().starts_with("2024-06-01 hotfix 2@"));
}

TEST_CASE("every kind of invalid input names its line") {
  struct Case {
    std::string yaml;
    int line;
    std::string_view problem;  // a part of RulesError::problem
  };
  const std::string head(kHead);
  const auto limit = [&](std::string_view fields) {
    return head + "endpoints:\n  - name: e\n    path: /\n    limits:\n      - name: l\n" +
           std::string(fields);  // the fields start on line 13
  };
  const Case cases[] = {
      // YAML itself.
      {"tiers:\n  free: [\n", 3, "YAML syntax: end of sequence flow not found"},
      {"a: 1\n---\nb: 2\n", 2, "more than one YAML document"},
      {"a: 1\n---\n", 2, "more than one YAML document"},
      {",\n", 1, "YAML syntax: unexpected content at the start of a document"},  // hangs LoadAll
      {", x\n", 1, "YAML syntax: unexpected content"},
      {"- just\n- a list\n", 1, "expected a mapping, got a list"},
      {"hello\n", 1, "expected a mapping, got \"hello\""},
      // Fields.
      {head + "tier: free\n", 8, "unknown field \"tier\" (expected one of: version, defaults,"},
      {head + "tiers: {}\n", 8, "duplicate field \"tiers\" (first at line 1)"},
      {"? [a]\n: b\n", 1, "a field name must be a string, got a list"},
      {"defaults: {failure_policy: local, policy: open}\n", 1,
       "defaults: unknown field \"policy\""},
      {"defaults: {failure_policy: sometimes}\n", 1,
       "defaults.failure_policy: \"sometimes\" is not one of local, open, closed, partitioned"},
      {"defaults: {algorithm: leaky_bucket}\n", 1,
       "defaults.algorithm: \"leaky_bucket\" is not one of sliding_window, strict_window, "
       "fixed_window, token_bucket"},
      {"defaults:\n  algorithm: [fixed_window]\n", 2,
       "defaults.algorithm: expected a string, got a list"},
      {"version: [1]\n", 1, "version: expected a string, got a list"},
      {"version: \"a\\tb\"\n", 1, "version: \"a\\u0009b\" contains a control character"},
      {"version: " + std::string(129, 'v') + "\n", 1,
       "is not a label of up to 128 printable ASCII"},
      {"version: \"\"\n", 1, "version: must not be empty"},
      // Tiers.
      {"tiers: [free]\n", 1, "tiers: expected a mapping, got a list"},
      {"tiers:\n  free:\n    limits: []\n  free:\n    limits: []\n", 4,
       "tiers: duplicate tier \"free\" (first at line 2)"},
      {"tiers:\n  \"fr ee\": {limits: []}\n", 2, "tiers: \"fr ee\" is not a name"},
      {"tiers:\n  free:\n", 2, "tiers.free: expected a mapping, got nothing"},
      {"tiers:\n  free: {}\n", 2, "tiers.free: missing field \"limits\""},
      {"tiers:\n  free:\n    limts: []\n", 3,
       "tiers.free: unknown field \"limts\" (expected one of: limits, mode)"},
      {"tiers:\n  free:\n    limits:\n", 3, "tiers.free.limits: expected a list, got nothing"},
      // Limits.
      {head + "  x:\n    limits:\n      - {name: a, max: 1, window: 1s}\n      - {name: a, max: 2, "
              "window: 1m}\n",
       11, "tiers.x.limits[1].name: duplicate limit name \"a\" (first at line 10)"},
      {head + "  x:\n    limits:\n      - max: 1\n        window: 1s\n", 10,
       "tiers.x.limits[0]: missing field \"name\""},
      {head + "  x:\n    limits:\n      - {name: \"a/b\", max: 1, window: 1s}\n", 10,
       "\"a/b\" is not a name"},
      {head + "  x:\n    limits:\n      - {name: a, max: 1, window: 1s, windw: 2s}\n", 10,
       "unknown field \"windw\""},
      {head + "  x:\n    limits:\n      - [a]\n", 10,
       "tiers.x.limits[0]: expected a mapping, got a list"},
      {limit("        max: -1\n        window: 1s\n"), 13,
       "endpoints[0].limits[0].max: \"-1\" is not a whole number of 0 or more"},
      {limit("        max: 0\n        window: 1s\n"), 13,
       "endpoints[0].limits[0].max: max must be from 1 to 4294967295, got 0"},
      {limit("        max: 4294967296\n        window: 1s\n"), 13,
       "max must be from 1 to 4294967295, got 4294967296"},
      {limit("        max: 1e3\n        window: 1s\n"), 13, "\"1e3\" is not a whole number"},
      {limit("        max: 5\n        window: 10x\n"), 14,
       "endpoints[0].limits[0].window: \"10x\" is not a duration (use 500ms, 1s, 1m, 1h or 1d)"},
      {limit("        max: 5\n        window: 1.5s\n"), 14, "\"1.5s\" is not a duration"},
      {limit("        max: 5\n        window: -1s\n"), 14, "\"-1s\" is not a duration"},
      {limit("        max: 5\n        window: 0s\n"), 14, "\"0s\" is not positive"},
      {limit("        max: 5\n        window: 367d\n"), 14, "\"367d\" is longer than 366 days"},
      {limit("        max: 5\n        window: 99999999999999999999999s\n"), 14,
       "is longer than 366 days"},
      {limit("        max: 5\n        window:\n        cost: 1\n"), 14,
       "endpoints[0].limits[0].window: expected a string, got nothing"},
      {limit("        max: 5\n        window: 15ms\n"), 14,
       "endpoints[0].limits[0].window: window: 15ms does not divide into 10 subintervals of whole "
       "milliseconds (the default subintervals: set subintervals to a divisor of the window)"},
      {limit("        max: 5\n        window: 1s\n        subintervals: 3\n"), 15,
       "subintervals: window: 1s does not divide into 3 subintervals of whole milliseconds"},
      {limit("        max: 5\n        window: 1s\n        subintervals: 0\n"), 15,
       "endpoints[0].limits[0].subintervals: subintervals must be at least 1, got 0"},
      {limit("        max: 5\n        window: 50d\n        subintervals: 1\n"), 15,
       "endpoints[0].limits[0].subintervals: subintervals: 1 makes subintervals longer than the "
       "longest, 4294967295ms"},
      {limit("        max: 5\n        window: 1s\n        per: user\n"), 15,
       "per: \"user\" is not one of key, endpoint, global"},
      {limit("        max: 5\n        window: 1s\n        failure_policy: fail\n"), 15,
       "failure_policy: \"fail\" is not one of local, open, closed, partitioned"},
      {limit("        max: 5\n        window: 1s\n        algorithm: leaky_bucket\n"), 15,
       "endpoints[0].limits[0].algorithm: \"leaky_bucket\" is not one of sliding_window, "
       "strict_window, fixed_window, token_bucket"},
      {limit("        max: 5\n        window: 1s\n        algorithm: Fixed_Window\n"), 15,
       "algorithm: \"Fixed_Window\" is not one of"},
      {limit("        max: 5\n        window: 1s\n        algorithm:\n"), 15,
       "endpoints[0].limits[0].algorithm: expected a string, got nothing"},
      {limit("        max: 5\n        window: 1m\n        algorithm: fixed_window\n"
             "        subintervals: 4\n"),
       16,
       "endpoints[0].limits[0].subintervals: fixed_window has one subinterval, the whole window "
       "(window: 1m): subintervals: 4 says otherwise; leave it out"},
      {limit("        max: 5\n        window: 1m\n        subintervals: 0\n"
             "        algorithm: fixed_window\n"),
       15, "subintervals: fixed_window has one subinterval, the whole window (window: 1m): "
           "subintervals: 0 says otherwise"},
      {limit("        max: 5\n        window: 50d\n        algorithm: fixed_window\n"), 14,
       "endpoints[0].limits[0].window: window: 50d is longer than 4294967295ms, the longest for "
       "fixed_window (its one subinterval is the whole window)"},
      {limit("        max: 5\n        window: 50d\n        subintervals: 1\n"
             "        algorithm: fixed_window\n"),
       14, "window: 50d is longer than 4294967295ms, the longest for fixed_window"},
      {limit("        max: 5\n        window: 1s\n        burst: 3\n"), 15,
       "endpoints[0].limits[0].burst: burst applies to token_bucket only, not to sliding_window: "
       "leave it out (the default algorithm)"},
      {limit("        max: 5\n        window: 1s\n        algorithm: fixed_window\n"
             "        burst: 3\n"),
       16, "burst: burst applies to token_bucket only, not to fixed_window"},
      {limit("        max: 5\n        window: 1s\n        algorithm: token_bucket\n"
             "        burst: 0\n"),
       16, "endpoints[0].limits[0].burst: \"0\" is not a whole number of 1 or more"},
      {limit("        max: 5\n        window: 1s\n        algorithm: token_bucket\n"
             "        burst: 4294967296\n"),
       16, "burst: burst must be from 1 to 4294967295, got 4294967296"},
      {limit("        max: 5\n        window: 1s\n        algorithm: token_bucket\n"
             "        burst: many\n"),
       16, "burst: \"many\" is not a whole number"},
      {limit("        max: 5\n        window: 1s\n        algorithm: token_bucket\n"
             "        burst:\n"),
       16, "burst: expected a string, got nothing"},
      {limit("        max: 5\n        window: 1m\n        algorithm: token_bucket\n"
             "        subintervals: 4\n"),
       16,
       "endpoints[0].limits[0].subintervals: token_bucket has one subinterval, the whole window "
       "(window: 1m): subintervals: 4 says otherwise; leave it out"},
      {limit("        max: 5\n        window: 50d\n        algorithm: token_bucket\n"), 14,
       "endpoints[0].limits[0].window: token_bucket with max: 5 and window: 50d takes longer than "
       "4294967295ms (about 49.7 days) to refill its burst (max, when burst is not given): give a "
       "smaller burst"},
      {limit("        max: 5\n        window: 1d\n        algorithm: token_bucket\n"
             "        burst: 300\n"),
       16,
       "endpoints[0].limits[0].burst: token_bucket with max: 5 and window: 1d takes longer than "
       "4294967295ms (about 49.7 days) to refill burst: 300 (burst x window / max)"},
      {limit("        max: 5\n        window: 1s\n        algorithm: token_bucket\n"
             "        burst: 3\n        cost: 4\n"),
       17, "cost: cost 4 exceeds burst 3: every request would be rejected"},
      {limit("        max: 5\n        window: 1s\n        cost: 0\n"), 15,
       "cost: \"0\" is not a whole number"},
      {limit("        max: 5\n        window: 1s\n        cost: 6\n"), 15,
       "cost: cost 6 exceeds max 5: every request would be rejected"},
      // Keys and tier references.
      {head + "keys:\n  - {match: \"a*\", tier: gold}\n", 9,
       "keys[0].tier: unknown tier \"gold\" (tiers: free, pro)"},
      {"keys:\n  - {match: \"a*\", tier: gold}\n", 2,
       "unknown tier \"gold\" (no tiers are defined)"},
      {head + "keys:\n  - {match: \"a*\"}\n", 9, "keys[0]: missing field \"tier\""},
      {head + "keys:\n  - {match: \"\", tier: free}\n", 9, "keys[0].match: must not be empty"},
      {head + "keys:\n  - match: \"\xff\"\n    tier: free\n", 9, "is not valid UTF-8"},
      {head + "default_tier: gold\n", 8, "default_tier: unknown tier \"gold\""},
      {head + "keys: {a: free}\n", 8, "keys: expected a list, got a mapping"},
      // Endpoints.
      {"endpoints:\n  - {name: a, path: /a, limits: []}\n  - {name: a, path: /b, limits: []}\n", 3,
       "endpoints[1].name: duplicate endpoint name \"a\" (first at line 2)"},
      {"endpoints:\n  - {name: a, path: api, limits: []}\n", 2, "\"api\" does not start with '/'"},
      {"endpoints:\n  - {name: a, path: /api//x, limits: []}\n", 2,
       "endpoints[0].path: \"/api//x\" is not a normalised path (write \"/api/x\")"},
      {"endpoints:\n  - {name: a, path: /api/../x, limits: []}\n", 2, "(write \"/x\")"},
      {"endpoints:\n  - {name: a, path: \"/api/./*\", limits: []}\n", 2, "(write \"/api/*\")"},
      {"endpoints:\n  - {name: a, path: \"/api#x\", limits: []}\n", 2, "contains '#'"},
      {"endpoints:\n  - {name: a, path: /a, methods: [], limits: []}\n", 2,
       "endpoints[0].methods: an empty list matches no request"},
      {"endpoints:\n  - name: a\n    path: /a\n    methods: [GET, get]\n    limits: []\n", 4,
       "endpoints[0].methods[1]: \"get\" is not an HTTP method such as GET"},
      {"endpoints:\n  - name: a\n    path: /a\n    methods:\n      - GET\n      - GET\n    limits: "
       "[]\n",
       6, "duplicate method \"GET\" (first at line 5)"},
      {"endpoints:\n  - name: a\n    path: /a\n", 2, "endpoints[0]: missing field \"limits\""},
      {"endpoints:\n  - name: a\n    limits: []\n", 2, "endpoints[0]: missing field \"path\""},
      // Overrides.
      {head + "overrides:\n  - {key: a, tier: pro}\n  - {key: a, multiplier: 2}\n", 10,
       "overrides[1].key: duplicate override key \"a\" (first at line 9)"},
      {head + "overrides:\n  - key: a\n", 9,
       "overrides[0]: an override needs tier, multiplier or limits"},
      {head + "overrides:\n  - {key: a, multiplier: 0}\n", 9,
       "multiplier: \"0\" is not a positive number"},
      {head + "overrides:\n  - {key: a, multiplier: -2}\n", 9, "\"-2\" is not a positive number"},
      {head + "overrides:\n  - {key: a, multiplier: .inf}\n", 9,
       "\".inf\" is not a positive number"},
      {head + "overrides:\n  - {key: a, multiplier: nan}\n", 9, "\"nan\" is not a positive number"},
      {head + "overrides:\n  - {key: a, multiplier: x2}\n", 9, "\"x2\" is not a positive number"},
      {head + "overrides:\n  - {key: a, tier: gold}\n", 9,
       "overrides[0].tier: unknown tier \"gold\""},
      {head + "overrides:\n  - {key: a, tier: free, multiplier: 0.1, limits: [{name: c, max: 10, "
              "window: 1s, cost: 2}]}\n",
       9, "multiplier 0.1 brings override:a/c to max 1, below its cost 2"},
      {head + "overrides:\n  - {key: a, multiplier: 0.1, limits: [{name: c, max: 100, window: "
              "1s, algorithm: token_bucket, burst: 20, cost: 5}]}\n",
       9, "multiplier 0.1 brings override:a/c to burst 2, below its cost 5"},
      {head + "overrides:\n  - {key: a, limits: {name: c}}\n", 9,
       "overrides[0].limits: expected a list"},
      // Allow and deny.
      {"allow: \"*\"\n", 1, "allow: expected a list, got \"*\""},
      {"allow:\n  - ok\n  - [x]\n", 3, "allow[1]: expected a string, got a list"},
      {"deny:\n  - ok\n  -\n", 2, "deny[1]: expected a string, got nothing"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.yaml);
    const Failure f = failure_of(c.yaml);
    CHECK(f.line == c.line);
    CHECK(f.column >= 1);
    CHECK_MESSAGE(f.problem.find(c.problem) != std::string::npos, f.problem);
    CHECK(f.what == "rules.yaml:" + std::to_string(f.line) + ":" + std::to_string(f.column) + ": " +
                        f.problem);
  }
}

TEST_CASE("an error message reads as docs/server.md promises") {
  const Failure f = failure_of(
      "tiers:\n"
      "  free:\n"
      "    limits:\n"
      "      - name: a\n"
      "        max: 5\n"
      "        window: 10x\n");
  CHECK(
      f.what ==
      "rules.yaml:6:17: tiers.free.limits[0].window: \"10x\" is not a duration (use 500ms, 1s, 1m, "
      "1h or 1d)");
  CHECK(f.line == 6);
  CHECK(f.column == 17);
}

TEST_CASE("RulesError without a position, and load() errors") {
  const RulesError e("f.yaml", 0, 0, "cannot open: nope");
  CHECK(std::string(e.what()) == "f.yaml: cannot open: nope");
  try {
    Rules::load("/nonexistent/rules.yaml");
    FAIL("load() of a missing file succeeded");
  } catch (const RulesError& err) {
    CHECK(err.line == 0);
    CHECK(std::string(err.what()) ==
          "/nonexistent/rules.yaml: cannot open: No such file or directory");
  }
  try {
    Rules::load("/");
    FAIL("load() of a directory succeeded");
  } catch (const RulesError& err) {
    CHECK(err.line == 0);
    CHECK(std::string(err.what()).starts_with("/: cannot "));
  }
  // A file's errors name the file.
  char path[] = "/tmp/ratewin-rules-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string_view bad = "tiers:\n  free: 3\n";
  REQUIRE(write(fd, bad.data(), bad.size()) == static_cast<ssize_t>(bad.size()));
  close(fd);
  try {
    Rules::load(path);
    FAIL("load() of a bad file succeeded");
  } catch (const RulesError& err) {
    CHECK(std::string(err.what()) ==
          std::string(path) + ":2:9: tiers.free: expected a mapping, got \"3\"");
  }
  std::remove(path);
}

TEST_CASE("describe_json is valid JSON with every section") {
  // JSON is YAML, so yaml-cpp reads it back; the odd key checks the escaping.
  const std::string odd = "q\"uo\\te \xc3\xa9 \\u0041";
  const Rules rules =
      Rules::parse(std::string(kHead) +
                   "default_tier: free\n"
                   "keys: [{match: \"p*\", tier: pro}]\n"
                   "endpoints: [{name: e, path: \"/a/*\", methods: [GET], limits: [{name: "
                   "x, max: 3, window: 1m, subintervals: 6, per: global, "
                   "failure_policy: open, cost: 2}]}]\n"
                   "overrides:\n"
                   "  - {key: 'q\"uo\\te \xc3\xa9 \\u0041', multiplier: 1.5}\n"
                   "  - {key: b, tier: pro, limits: []}\n"
                   "allow: [\"in*\"]\n"
                   "deny: [\"bad\"]\n");
  const std::string json = rules.describe_json();
  CAPTURE(json);
  const YAML::Node doc = YAML::Load(json);
  REQUIRE(doc.IsMap());
  CHECK(doc["version"].as<std::string>() == rules.version());
  CHECK(doc["defaults"]["failure_policy"].as<std::string>() == "local");
  CHECK(doc["tiers"]["free"]["limits"][0]["name"].as<std::string>() == "tier:free/a");
  CHECK(doc["tiers"]["pro"]["limits"][0]["max"].as<int>() == 50);
  CHECK(doc["default_tier"].as<std::string>() == "free");
  CHECK(doc["keys"][0]["match"].as<std::string>() == "p*");
  const YAML::Node e = doc["endpoints"][0];
  CHECK(e["match"].as<std::string>() == "glob");
  CHECK(e["methods"][0].as<std::string>() == "GET");
  CHECK(e["limits"][0]["window_ms"].as<int>() == 60000);
  CHECK(e["limits"][0]["subintervals"].as<int>() == 6);
  CHECK(e["limits"][0]["per"].as<std::string>() == "global");
  CHECK(e["limits"][0]["failure_policy"].as<std::string>() == "open");
  CHECK(e["limits"][0]["cost"].as<int>() == 2);
  CHECK(e["limits"][0]["limit"].as<std::string>() == "3/1m@10s");
  CHECK(doc["overrides"][0]["key"].as<std::string>() == odd);
  CHECK(doc["overrides"][0]["multiplier"].as<double>() == 1.5);
  CHECK(doc["overrides"][0]["tier"].IsNull());
  CHECK(doc["overrides"][0]["limits"].IsNull());
  CHECK(doc["overrides"][1]["limits"].IsSequence());
  CHECK(doc["allow"][0].as<std::string>() == "in*");
  CHECK(doc["deny"][0].as<std::string>() == "bad");
  CHECK(doc["limit_count"].as<int>() == 3);
  CHECK(json.find("\"q\\\"uo\\\\te \xc3\xa9 \\\\u0041\"") != std::string::npos);

  const YAML::Node empty = YAML::Load(Rules().describe_json());
  CHECK(empty["tiers"].IsMap());
  CHECK(empty["default_tier"].IsNull());
  CHECK(empty["endpoints"].size() == 0);
}

TEST_CASE("describe_json, byte for byte: key order, number forms, nulls, no spaces") {
  const Rules rules = Rules::parse(
      "version: v1\n"
      "defaults: {failure_policy: open, algorithm: token_bucket, mode: shadow, "
      "shadow_headers: true, client_key: [bearer, address]}\n"
      "tiers:\n"
      "  free:\n"
      "    limits:\n"
      "      - {name: a, max: 5, window: 1s, burst: 8}\n"
      "      - {name: b, max: 3, window: 1m, subintervals: 6, algorithm: sliding_window, "
      "per: endpoint, failure_policy: closed, cost: 2, mode: enforce, "
      "client_key: [header:X-User]}\n"
      "  pro: {limits: []}\n"
      "default_tier: free\n"
      "keys: [{match: \"p*\", tier: pro}]\n"
      "endpoints:\n"
      "  - {name: e, path: \"/a/*\", methods: [GET, POST], path_match: loose, limits: []}\n"
      "  - {name: f, path: /b, limits: []}\n"
      "overrides:\n"
      "  - {key: 'q\"k', multiplier: 1.5}\n"
      "  - {key: o, tier: pro, limits: []}\n"
      "allow: [\"in*\"]\n"
      "deny: [bad, worse]\n");
  std::string version;
  append_json_string(version, rules.version());
  CHECK(rules.describe_json() ==
        "{\"version\":" + version +
            R"(,"defaults":{"failure_policy":"open","algorithm":"token_bucket","mode":"shadow",)"
            R"("shadow_headers":true,"client_key":["bearer","address"]},)"
            R"("tiers":{"free":{"limits":[)"
            R"({"name":"tier:free/a","max":5,"window_ms":1000,"subintervals":1,)"
            R"("algorithm":"token_bucket","burst":8,"per":"key","failure_policy":"open","cost":1,)"
            R"("mode":"shadow","limit":"5/1s@1s token_bucket burst 8 shadow"},)"
            R"({"name":"tier:free/b","max":3,"window_ms":60000,"subintervals":6,)"
            R"("algorithm":"sliding_window","per":"endpoint","failure_policy":"closed","cost":2,)"
            R"("mode":"enforce","limit":"3/1m@10s","client_key":["header:x-user"]}]},)"
            R"("pro":{"limits":[]}},"default_tier":"free","keys":[{"match":"p*","tier":"pro"}],)"
            R"("endpoints":[{"name":"e","path":"/a/*","match":"glob","path_match":"loose",)"
            R"("methods":["GET","POST"],"limits":[]},)"
            R"({"name":"f","path":"/b","match":"prefix","path_match":"exact","methods":null,)"
            R"("limits":[]}],)"
            R"("overrides":[{"key":"q\"k","tier":null,"multiplier":1.5,"limits":null},)"
            R"({"key":"o","tier":"pro","multiplier":null,"limits":[]}],)"
            R"("allow":["in*"],"deny":["bad","worse"],"limit_count":2})");

  const Rules none;
  version.clear();
  append_json_string(version, none.version());
  CHECK(none.describe_json() ==
        "{\"version\":" + version +
            R"(,"defaults":{"failure_policy":"local","algorithm":"sliding_window",)"
            R"("mode":"enforce","shadow_headers":false,)"
            R"("client_key":["header:x-api-key","bearer","address"]},"tiers":{},)"
            R"("default_tier":null,"keys":[],"endpoints":[],"overrides":[],"allow":[],)"
            R"("deny":[],"limit_count":0})");
}

TEST_CASE("resource_name separates what each scope separates") {
  const Rules rules = Rules::parse(
      "tiers:\n"
      "  t:\n"
      "    limits:\n"
      "      - {name: k, max: 1, window: 1s}\n"
      "      - {name: e, max: 1, window: 1s, per: endpoint}\n"
      "      - {name: g, max: 1, window: 1s, per: global}\n"
      "default_tier: t\n"
      "overrides:\n"
      "  - {key: a, limits: [{name: b, max: 1, window: 1s}]}\n"
      "  - {key: \"a/b|k=c\", limits: [{name: d, max: 1, window: 1s}]}\n");
  const Match m = match(rules, "x");
  REQUIRE(m.limits.size() == 3);
  std::string name;
  resource_name(*m.limits[0], "alice", "search", name);
  CHECK(name == "8:tier:t/k|k=alice");
  resource_name(*m.limits[1], "alice", "search", name);
  CHECK(name == "8:tier:t/e|e=search|k=alice");
  resource_name(*m.limits[2], "alice", "search", name);
  CHECK(name == "8:tier:t/g");

  // An override's name holds its key; the length prefix keeps names apart anyway.
  const LimitRule& ab = *match(rules, "a").limits[0];
  const LimitRule& abkcd = *match(rules, "a/b|k=c").limits[0];
  std::string one;
  std::string two;
  resource_name(ab, "c/d|k=e", "", one);
  resource_name(abkcd, "e", "", two);
  CHECK(one != two);
}

// A request matched against one version of the rules and then waiting on Redis holds
// that version (View::shared()): a reload published between the match and the wait must
// neither swap it for the new one (the match points into the old) nor free the old.
TEST_CASE("a view's shared value is what it read, even after a publish") {
  Published<std::string> rules(std::make_shared<const std::string>("v1"));
  Published<std::string>::View view(rules);
  const std::string& matched = view.get();
  const std::uint64_t generation = view.generation();
  rules.publish(std::make_shared<const std::string>("v2"));
  const std::shared_ptr<const std::string> held = view.shared();
  CHECK(held.get() == &matched);
  CHECK(*held == "v1");
  CHECK(view.generation() == generation);
  // The next request's get() sees the new value; the held one stays valid.
  CHECK(view.get() == "v2");
  CHECK(view.generation() != generation);
  CHECK(*held == "v1");
}

}  // namespace ratewin::server
