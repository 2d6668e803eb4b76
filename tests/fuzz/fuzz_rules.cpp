// libFuzzer target for the server's rules parser: any bytes either parse or throw
// RulesError; anything else (another exception, a crash, a leak, UB, a broken invariant)
// is a bug. A parsed file is then matched against a few fixed requests and described.
// (Paths, targets and globs have a target of their own: fuzz_path.)
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rules.h"
#include "target.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  try {
    exercise(Rules::parse(bytes, "fuzz"));
  } catch (const RulesError&) {
    // Expected for invalid input.
  }
  return 0;
}
