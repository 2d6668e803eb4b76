// The limiting step of a request: the limits its match found (each scaled by the key's
// temporary override where it applies) asked of the engine all at once, and which of
// them the answer describes. In three parts, build the items -> call the engine -> read
// the decisions, so that the call in the middle can be asynchronous (limited_request.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ratewin/engine.h"
#include "rules/overrides.h"
#include "rules/rules.h"
#include "service/client.h"

namespace ratewin::server {

struct LimitOutcome {
  bool allowed = false;
  bool degraded = false;  // a decision followed its failure policy (Redis unreachable)
  // The limit the response describes: the one that refused, or the one closest to
  // refusing (an index into the match's limits, the items and the decisions). Limits in
  // shadow are not described unless the rules say so (shadow_headers); when every limit
  // is in shadow, `headers` is false and shown is the one closest to refusing.
  std::size_t shown = 0;
  bool headers = true;
  bool shadow_headers = false;
  // Whether the response's headers describe limit i.
  bool described(std::span<const Acquisition> items, std::size_t i) const noexcept {
    return shadow_headers || items[i].limit.mode() != Mode::shadow;
  }
};

class LimitStep {
 public:
  explicit LimitStep(Engine& engine) : engine_(engine) {}

  // For a match whose action is Action::limit with at least one limit: the engine's items
  // (`items`, the request's own: its room is reused). `own_keys`: for each of the match's
  // limits, the key it counts under when it has a client key of its own
  // (ClientIdentifier::tagged_key), else "" (the client's); empty: none has.
  void prepare(const Match& match, const Client& client, const OverrideMap& overrides,
               std::span<const std::string> own_keys, std::vector<Acquisition>& items);
  // The engine's decisions about every item at once, waiting for it (into `decisions`, one
  // per item): the index of the limit that refused, or items.size().
  std::size_t acquire(std::span<const Acquisition> items, std::span<Decision> decisions);

  // What the engine's answer to `items` (limit `refused` refused, or none when
  // items.size()) comes to; the headers describe limits in shadow when `shadow_headers`.
  static LimitOutcome conclude(std::span<const Acquisition> items,
                               std::span<const Decision> decisions, std::size_t refused,
                               bool shadow_headers);

  // Every counter that `key` (as the admin API names clients: an API key, or "ip:<address>")
  // has under `rules`: each per-key limit's, and each per-key-and-endpoint limit's for
  // every endpoint and for no endpoint (global limits are nobody's own). Costs are 0.
  static std::vector<Acquisition> key_counters(const Rules& rules, std::string_view key,
                                               unsigned ipv6_prefix = 64);

 private:
  // The engine's items: each limit counted under its resource name (rule, key,
  // endpoint); the override scales the limits that scale.
  void build(const Match& match, const Client& client, const Override* override_,
             std::span<const std::string> own_keys, std::vector<Acquisition>& items);

  Engine& engine_;
  std::string tagged_key_;
  std::string resource_;
  std::string override_key_;
};

}  // namespace ratewin::server
