// What a limited request is answered: the headers of the limit that decided
// (X-RateLimit-*, Retry-After, RateLimit), RateLimit-Policy listing every limit counted,
// and the 429 body. The parts fixed per rule are formatted once per rules version.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "http/http.h"
#include "rules/rules.h"
#include "service/limit_step.h"

namespace ratewin::server {

// One per thread.
class LimitResponses {
 public:
  // The headers of the limit `outcome` shows, of the `items` asked and the `decisions`
  // answered (and for a refusal, status 429 and its JSON body). `rules_generation`
  // identifies the rules `match` points into (Published's generation): what was formatted
  // for other rules is dropped.
  void write(std::uint64_t rules_generation, const Match& match,
             std::span<const Acquisition> items, std::span<const Decision> decisions,
             const LimitOutcome& outcome, Response& response);

  // A request no limit counted: X-RateLimit-Policy says why ("allow-list" or "none").
  static void uncounted(Action action, Response& response);

 private:
  struct RuleText {
    std::string policy_head;   // "name";q=
    std::string state_head;    // "name";r=
    std::string refusal_head;  // {"error":"rate limited","limit":"name","retry_after_s":
    std::string excess_head;   // {"error":"cost exceeds limit","limit":"name","max":
  };
  const RuleText& text(const LimitRule& rule);

  std::unordered_map<const LimitRule*, RuleText> texts_;
  std::uint64_t texts_generation_ = UINT64_MAX;
  const LimitRule* last_rule_ = nullptr;
  const RuleText* last_text_ = nullptr;
};

}  // namespace ratewin::server
