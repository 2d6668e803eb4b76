#include "service/limit_step.h"

#include <algorithm>

#include "ratewin/hash.h"

namespace ratewin::server {

void LimitStep::prepare(const Match& match, const Client& client, const OverrideMap& overrides,
                        std::span<const std::string> own_keys, std::vector<Acquisition>& items) {
  const Override* override_ = nullptr;
  if (!overrides.empty()) {
    override_key_.assign(client.key);
    const auto it = overrides.find(override_key_);
    if (it != overrides.end() && it->second.active(unix_ms())) override_ = &it->second;
  }
  build(match, client, override_, own_keys, items);
}

std::size_t LimitStep::acquire(std::span<const Acquisition> items, std::span<Decision> decisions) {
  // (One limit, the common case: the engine's single call, without the group's state.)
  if (items.size() == 1) {
    decisions[0] = engine_.try_acquire(items[0].resource, items[0].limit, items[0].cost);
    return decisions[0].allowed ? 1 : 0;
  }
  return engine_.try_acquire_all(items, decisions);
}

void LimitStep::build(const Match& match, const Client& client, const Override* override_,
                      std::span<const std::string> own_keys, std::vector<Acquisition>& items) {
  tagged_key_.assign(1, static_cast<char>(client.kind));
  tagged_key_ += client.counted;
  items.clear();
  for (std::size_t i = 0; i < match.limits.size(); ++i) {
    const LimitRule* rule = match.limits[i];
    const bool own = i < own_keys.size() && !own_keys[i].empty();
    // Requests that match no endpoint share one endpoint counter per key (the raw path
    // would let a client mint limiters at will).
    resource_name(*rule, own ? own_keys[i] : tagged_key_, match.endpoint, resource_);
    Limit limit = effective_limit(*rule, match.multiplier);
    // A temporary override (admin API) acts where the rules' own multiplier would.
    if (override_ != nullptr && rule->scales)
      limit = with_scaled_max(limit, override_->apply(limit.max()));
    items.push_back({ratewin::hash(resource_), limit, rule->cost});
  }
}

std::vector<Acquisition> LimitStep::key_counters(const Rules& rules, std::string_view key,
                                                unsigned ipv6_prefix) {
  std::vector<Acquisition> out;
  std::vector<std::string> tagged = {std::string(1, static_cast<char>(Client::Kind::api_key)) +
                                     std::string(key)};
  // An "ip:" key is also how an address client is known (counted by its prefix if IPv6).
  if (key.starts_with("ip:"))
    tagged.push_back(std::string(1, static_cast<char>(Client::Kind::address)) +
                     counted_key(key, ipv6_prefix));
  std::vector<std::string_view> endpoints = rules.endpoint_names();
  endpoints.emplace_back();  // requests that match no endpoint
  std::string resource;
  for (const LimitRule* rule : rules.limits()) {
    if (rule->scope == Scope::global) continue;
    for (const std::string& t : tagged) {
      const std::size_t n = rule->scope == Scope::endpoint ? endpoints.size() : 1;
      for (std::size_t i = 0; i < n; ++i) {
        resource_name(*rule, t, rule->scope == Scope::endpoint ? endpoints[i] : "", resource);
        out.push_back({ratewin::hash(resource), rule->limit, 0});
      }
    }
  }
  return out;
}

LimitOutcome LimitStep::conclude(std::span<const Acquisition> items,
                                 std::span<const Decision> decisions, std::size_t refused,
                                 bool shadow_headers) {
  LimitOutcome outcome;
  outcome.allowed = refused == items.size();
  outcome.shadow_headers = shadow_headers;
  // (A limit in shadow never refuses: the one that did is described.)
  outcome.shown = refused;
  if (outcome.allowed) {
    // The described limit closest to refusing; failing any, the closest of all.
    outcome.headers = false;
    outcome.shown = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const bool described = outcome.described(items, i);
      if (described != outcome.headers ? described
                                       : decisions[i].remaining < decisions[outcome.shown].remaining) {
        outcome.shown = i;
        outcome.headers = outcome.headers || described;
      }
    }
  }
  outcome.degraded = std::any_of(decisions.begin(), decisions.begin() + static_cast<std::ptrdiff_t>(items.size()),
                                 [](const Decision& d) { return d.degraded; });
  return outcome;
}

}  // namespace ratewin::server
