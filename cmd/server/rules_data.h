// rules_data.h (private to the rules' files): what a Rules holds, shared by the model
// and matcher (rules.cpp), the YAML parser (rules_yaml.cpp) and the JSON description
// (rules_json.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "path.h"
#include "rules.h"
#include "text.h"

namespace ratewin::server {

struct Rules::Data {
  struct Tier {
    std::string name;
    std::vector<const LimitRule*> limits;
  };
  struct KeyTier {
    std::string pattern;
    std::size_t tier;
  };
  struct Endpoint {
    std::string name;
    std::string path;    // as written
    std::string prefix;  // a prefix path without its trailing '/', so "/" is ""
    bool glob = false;
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
  std::deque<LimitRule> rules;  // a deque: the pointers below stay valid while it grows
  std::vector<Tier> tiers;
  std::optional<std::size_t> default_tier;
  std::vector<KeyTier> keys;
  std::vector<Endpoint> endpoints;
  std::vector<Override> overrides;
  std::map<std::string, std::size_t, std::less<>> override_index;
  std::vector<std::string> allow;
  std::vector<std::string> deny;

  Resolved resolve(std::string_view key) const {
    Resolved r;
    if (const auto it = override_index.find(key); it != override_index.end()) {
      r.override = &overrides[it->second];
      if (r.override->tier) {
        r.tier = &tiers[*r.override->tier];
        return r;
      }
    }
    for (const KeyTier& k : keys) {
      if (glob_match(k.pattern, key)) {
        r.tier = &tiers[k.tier];
        return r;
      }
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

  const Endpoint* endpoint_for(std::string_view method, std::string_view path) const {
    // HEAD is GET without the body (RFC 9110 9.3.2): wherever an endpoint names GET, HEAD
    // counts too, or HEAD would be a free way to GET's limits.
    const bool head = method == "HEAD";
    for (const Endpoint& e : endpoints) {
      if (!e.methods.empty() &&
          std::find(e.methods.begin(), e.methods.end(), method) == e.methods.end() &&
          !(head && std::find(e.methods.begin(), e.methods.end(), "GET") != e.methods.end())) {
        continue;
      }
      // A trailing '/' never dodges an endpoint: a prefix covers its subtree, and a glob
      // is tried on the path without it too (most backends route "/a/" as "/a").
      if (e.glob ? glob_match(e.path, path) ||
                       (path.size() > 1 && path.back() == '/' &&
                        glob_match(e.path, path.substr(0, path.size() - 1)))
                 : path.starts_with(e.prefix) &&
                       (path.size() == e.prefix.size() || path[e.prefix.size()] == '/')) {
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
inline constexpr std::array<std::pair<std::string_view, FailurePolicy>, 4> kPolicies{{
    {"local", FailurePolicy::local},
    {"open", FailurePolicy::open},
    {"closed", FailurePolicy::closed},
    {"partitioned", FailurePolicy::partitioned},
}};
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
