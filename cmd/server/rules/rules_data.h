// rules_data.h (private to the rules' files): what a Rules holds, shared by the model
// and matcher (rules.cpp), the YAML parser (rules_yaml.cpp) and the JSON description
// (rules_json.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/glob_set.h"
#include "ratewin_internal/engine_options.h"
#include "common/text.h"
#include "http/path.h"
#include "rules/rules.h"

namespace ratewin::server {

struct Rules::Data {
  struct Tier {
    std::string name;
    std::vector<const LimitRule*> limits;
  };
  struct Endpoint {
    std::string name;
    std::string path;     // as written
    std::string pattern;  // what paths are matched with: `path`, loose_path()'s when loose
    std::string prefix;   // a prefix pattern without its trailing '/', so "/" is ""
    bool glob = false;
    bool loose = false;  // path_match: loose (paths compared in loose_path()'s form)
    std::vector<std::string> methods;  // empty: every method
    std::vector<const LimitRule*> limits;
  };
  struct Override {
    std::string key;
    std::optional<std::size_t> tier;
    std::optional<double> multiplier;
    std::optional<std::vector<const LimitRule*>> limits;  // replaces the tier's when set
  };
  // Who a key is, before allow and deny.
  struct Resolved {
    const Override* override = nullptr;
    const Tier* tier = nullptr;
  };

  std::string version;
  FailurePolicy default_policy = FailurePolicy::local;
  Algorithm default_algorithm = Algorithm::sliding_window;
  Mode default_mode = Mode::enforce;
  bool shadow_headers = false;  // limits in shadow appear in the rate-limit headers
  ClientKeySpec client_key = ClientKeySpec::standard();
  bool standard_client_key = true;  // client_key is ClientKeySpec::standard()
  std::deque<ClientKeySpec> limit_keys;  // limits' own client keys (LimitRule::client_key)
  std::deque<LimitRule> rules;  // a deque: the pointers below stay valid while it grows
  std::vector<Tier> tiers;
  std::optional<std::size_t> default_tier;
  GlobSet keys;                       // `keys:` matches, in the file's order
  std::vector<std::size_t> key_tiers;  // the tier of each
  std::vector<Endpoint> endpoints;
  std::vector<Override> overrides;
  std::map<std::string, std::size_t, std::less<>> override_index;
  GlobSet allow;
  GlobSet deny;

  Resolved resolve(std::string_view key) const {
    Resolved r;
    if (const auto it = override_index.find(key); it != override_index.end()) {
      r.override = &overrides[it->second];
      if (r.override->tier) {
        r.tier = &tiers[*r.override->tier];
        return r;
      }
    }
    if (const std::optional<std::size_t> k = keys.first(key)) {  // the first that matches
      r.tier = &tiers[key_tiers[*k]];
      return r;
    }
    if (default_tier) r.tier = &tiers[*default_tier];
    return r;
  }

  // The limits a key counts against wherever it goes, which the multiplier scales.
  static const std::vector<const LimitRule*>* key_limits(const Resolved& r) {
    if (r.override != nullptr && r.override->limits) return &*r.override->limits;
    return r.tier != nullptr ? &r.tier->limits : nullptr;
  }
  static double multiplier(const Resolved& r) {
    return r.override != nullptr && r.override->multiplier ? *r.override->multiplier : 1.0;
  }

  // `loose` holds the loose form of `path` once an endpoint has needed it.
  const Endpoint* endpoint_for(std::string_view method, std::string_view path,
                               std::string& loose) const {
    bool loosened = false;
    // HEAD is GET without the body (RFC 9110 9.3.2): wherever an endpoint names GET, HEAD
    // counts too, or HEAD would be a free way to GET's limits.
    const bool head = method == "HEAD";
    for (const Endpoint& e : endpoints) {
      if (!e.methods.empty() &&
          std::find(e.methods.begin(), e.methods.end(), method) == e.methods.end() &&
          !(head && std::find(e.methods.begin(), e.methods.end(), "GET") != e.methods.end())) {
        continue;
      }
      std::string_view p = path;
      if (e.loose) {
        if (!loosened) loose_path(path, loose);
        loosened = true;
        p = loose;
      }
      // A trailing '/' never dodges an endpoint: a prefix covers its subtree, and a glob
      // is tried on the path without it too (most backends route "/a/" as "/a").
      if (e.glob ? glob_match(e.pattern, p) ||
                       (p.size() > 1 && p.back() == '/' &&
                        glob_match(e.pattern, p.substr(0, p.size() - 1)))
                 : p.starts_with(e.prefix) &&
                       (p.size() == e.prefix.size() || p[e.prefix.size()] == '/')) {
        return &e;
      }
    }
    return nullptr;
  }
};

inline constexpr std::array<std::pair<std::string_view, Scope>, 3> kScopes{{
    {"key", Scope::key},
    {"endpoint", Scope::endpoint},
    {"global", Scope::global},
}};
// Spelled as every surface spells them (engine_options.h).
inline constexpr auto kPolicies = [] {
  std::array<std::pair<std::string_view, FailurePolicy>,
             std::size(internal::kFailurePolicyNames)> out{};
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = {internal::kFailurePolicyNames[i].name, internal::kFailurePolicyNames[i].value};
  return out;
}();
// Spelled by the library (algorithm_name), as the bindings spell them.
inline const std::array<std::pair<std::string_view, Algorithm>, 5> kAlgorithms{{
    {algorithm_name(Algorithm::sliding_window), Algorithm::sliding_window},
    {algorithm_name(Algorithm::strict_window), Algorithm::strict_window},
    {algorithm_name(Algorithm::fixed_window), Algorithm::fixed_window},
    {algorithm_name(Algorithm::token_bucket), Algorithm::token_bucket},
    {algorithm_name(Algorithm::sliding_log), Algorithm::sliding_log},
}};

inline const std::array<std::pair<std::string_view, Mode>, 2> kModes{{
    {mode_name(Mode::enforce), Mode::enforce},
    {mode_name(Mode::shadow), Mode::shadow},
}};
// An endpoint's path_match: whether paths are compared in loose_path()'s form.
inline constexpr std::array<std::pair<std::string_view, bool>, 2> kPathMatches{{
    {"exact", false},
    {"loose", true},
}};

inline constexpr std::array<std::pair<std::string_view, bool>, 2> kBooleans{{
    {"true", true},
    {"false", false},
}};


inline std::string to_json_number(double v) {
  std::string out;
  append_double(out, v);
  return out;
}
}  // namespace ratewin::server
