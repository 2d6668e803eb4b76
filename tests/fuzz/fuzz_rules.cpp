// libFuzzer target for the server's configuration parsers, the rules file's and
// envoyproxy/ratelimit's descriptor files' (rls_config.h): any bytes either parse or throw
// RulesError; anything else (another exception, a crash, a leak, UB, a broken invariant)
// is a bug. A parsed file is then matched against a few fixed requests (or descriptors)
// and described.
// (Paths, targets and globs have a target of their own: fuzz_path.)
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/target.h"
#include "rls/rls_config.h"
#include "rules/rules.h"

namespace {

using ratewin::server::Action;
using ratewin::server::LimitRule;
using ratewin::server::Match;
using ratewin::server::Rules;
using ratewin::server::RulesError;

struct Request {
  std::string_view key;
  std::string_view method;
  std::string_view target;
};

constexpr Request kRequests[] = {
    {"", "GET", "/"},
    {"free_1", "GET", "/api/v1/search?q=x"},
    {"pro_acme", "POST", "/api//v1/../upload/"},
    {"internal-x", "DELETE", "http://h/auth/%6Cogin"},
    {"a", "PUT", "/x/./y/.."},
    {"revoked_1", "GET", "/healthz"},
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void exercise(const Rules& rules) {
  Match m;
  std::string resource;
  std::string path;
  std::string query;
  for (const Request& r : kRequests) {
    check(ratewin::server::parse_target(r.method, r.target, path, query).empty());
    rules.match(r.key, r.method, path, m);
    check(m.action == Action::limit || m.limits.empty());
    check(m.multiplier > 0);
    for (const LimitRule* rule : m.limits) {
      const ratewin::Limit limit = effective_limit(*rule, m.multiplier);
      check(limit.max() >= 1 && limit.interval() == rule->limit.interval());
      resource_name(*rule, r.key, m.endpoint, resource);
      check(!resource.empty());
    }
  }
  check(!rules.version().empty());
  // JSON is YAML: what describe_json() writes must read back.
  const std::string json = rules.describe_json();
  try {
    check(YAML::Load(json).IsMap());
  } catch (const YAML::Exception&) {
    check(false);
  }
}

namespace rls = ratewin::server::rls;

constexpr rls::Entry kEntries[] = {
    {"remote_address", "10.0.0.1"}, {"path", "/foo/bar"}, {"database", "users"}, {"key", ""},
    {"generic_key", "a*b"},         {"k", "v_w"},
};

void exercise(const rls::Config& config) {
  check(!config.version().empty());
  for (const std::string_view domain : {"d", "mongo_cps", "rl", ""}) {
    const rls::Domain* d = config.domain(domain);
    if (d == nullptr) continue;
    check(d->name == domain);
    rls::Matched m;
    for (std::size_t first = 0; first < std::size(kEntries); ++first) {
      for (std::size_t n = 0; first + n <= std::size(kEntries) && n <= 3; ++n) {
        rls::Config::match(*d, std::span(kEntries + first, n), m);
        if (m.rule == nullptr) continue;
        check(m.rule->unlimited || m.rule->unit != rls::Unit::unknown);
        check(!m.rule->limit || (m.rule->limit->max() == m.rule->requests_per_unit &&
                                 m.rule->limit->interval() == rls::unit_length(m.rule->unit)));
        check(m.rule->counters != nullptr);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  try {
    exercise(Rules::parse(bytes, "fuzz"));
  } catch (const RulesError&) {
    // Expected for invalid input.
  }
  try {
    exercise(rls::Config::parse(bytes, "fuzz", rls::ConfigOptions{}));
  } catch (const RulesError&) {
  }
  return 0;
}
