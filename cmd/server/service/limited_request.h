// A request the rules limit, as one object from its parse to its answer: who sent it and
// what it asks (client.h, forward_auth.h), the rules' match, the engine's items and
// decisions (limit_step.h), and the answer (limit_response.h). It answers at once, or,
// when its admission waits on Redis (an AsyncAcquirer), later through its Responder: the
// same completion either way. One loop's requests (LimitedRequests) are pooled, their
// room reused from request to request.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/published.h"
#include "http/http.h"
#include "ratewin/ratewin.h"  // Engine, AsyncAcquirer
#include "rules/overrides.h"
#include "rules/rules.h"
#include "service/client.h"
#include "service/limit_response.h"
#include "service/limit_step.h"
#include "service/refusals.h"
#include "service/request_tally.h"

namespace ratewin::server {

class LimitedRequests;

// What a request that its limits let pass is answered.
enum class Pass {
  backend,  // the demo backend's 200 and body
  check,    // a forward-auth check's 200 without a body
  // The same, for a gateway that passes only 403 on: a refusal is answered 403
  // (refuse_as_forbidden(); X-Ratewin-Refusal-Status).
  check_forbidden,
};

class LimitedRequest {
 public:
  explicit LimitedRequest(LimitedRequests& home) : home_(home) {}
  LimitedRequest(const LimitedRequest&) = delete;
  LimitedRequest& operator=(const LimitedRequest&) = delete;

  // A request to the demo backend: limited, then answered by it. Through `reply`, at once
  // or later; back in its pool once answered.
  void limit_request(const Request& request, const ClientIdentifier::Peer& peer, Reply& reply);
  // A forward-auth check (forward_auth.h): the same decision about the request the
  // gateway describes, answered without a body when it may pass.
  void limit_check(const Request& request, const ClientIdentifier::Peer& peer, Reply& reply);

 private:
  // The client, from `request` and `query` (the request's, or the checked request's):
  // its key kept. False when answered instead (400).
  bool identify(const Request& request, std::string_view query, const IpAddress& address);
  // The rules' match for `method` and `path_` (kept); the limits' items, each limit with a
  // client key of its own counted under it. False when answered without counting (deny,
  // allow, no limit).
  bool match(const Request& request, std::string_view query, std::string_view method);
  // Asks the engine for every item at once: the AsyncAcquirer (with a store and a loop),
  // which may answer later, else the engine itself; then complete().
  void acquire();
  // The engine's answer (limit `refused` refused, or none when items_.size()): counted,
  // answered, back to the pool.
  void complete(std::size_t refused, std::span<const Decision> decisions);
  // The limited answer: the headers, the refusal or what pass_ says.
  void answer(const LimitOutcome& outcome, std::span<const Decision> decisions, Response& response);
  // An answer without a decision (an error, deny, allow): `response` is reply's.
  Response& response() noexcept { return reply_->response(); }
  // Counted under `rule`, answered `status` with {"error": message}.
  void refuse(int status, std::string_view rule, std::string_view message);
  // Back to the pool.
  void done();

  LimitedRequests& home_;
  Reply* reply_ = nullptr;  // until it waits
  Responder responder_;     // while it waits
  Pass pass_ = Pass::backend;
  // The rules it was matched against (the loop's view's) and their generation; held
  // (rules_held_) only while it waits, as the view may move on meanwhile.
  const Rules* rules_ = nullptr;
  std::uint64_t generation_ = 0;
  std::shared_ptr<const Rules> rules_held_;
  std::string path_;  // the request's, or the checked request's
  Client client_;     // its key points into key_
  std::string key_;
  Match match_;
  std::vector<Acquisition> items_;
  std::vector<Decision> decisions_;
  std::chrono::steady_clock::time_point started_;  // the engine's call
};

// One loop's limited requests, and what they share: the rules and overrides as this
// thread sees them, the client identifier, the answers' formatting, the counters, and the
// AsyncAcquirer.
class LimitedRequests {
 public:
  using Log = std::function<void(LogLevel, std::string_view)>;
  struct Parts {
    Engine& engine;
    const Published<Rules>& rules;
    const Published<OverrideMap>& overrides;
    Refusals& refusals;
    const Log& log;
    const std::string& check_path;  // --check-path
    const AddressRanges& trusted_proxies;
    unsigned ipv6_prefix;
  };
  // With `loop` and a store, admissions' writes go out on that loop and their requests
  // are answered when the replies arrive; without, each waits for its write.
  LimitedRequests(const Parts& parts, RequestTally::Counter& counter, uv_loop_s* loop);
  ~LimitedRequests();
  LimitedRequests(const LimitedRequests&) = delete;
  LimitedRequests& operator=(const LimitedRequests&) = delete;

  // A request to limit (a pooled LimitedRequest: limit_request() or limit_check()).
  LimitedRequest& take();
  // The loop's rules, as this thread sees them now.
  const Rules& rules() { return rules_.get(); }
  ClientIdentifier& clients() noexcept { return clients_; }
  // What is in flight is answered now; later requests wait for their writes.
  void close();

 private:
  friend class LimitedRequest;
  void release(LimitedRequest& request) { idle_.push_back(&request); }
  // A limit in shadow would have refused: counted per rule, and logged at most once a
  // second by each loop (with how many went unlogged since).
  void shadow_refusal(const LimitRule& rule, const Decision& d, const Match& match);

  Parts parts_;
  RequestTally::Counter& counter_;
  Published<Rules>::View rules_;
  Published<OverrideMap>::View overrides_;
  ClientIdentifier clients_;
  LimitStep step_;
  LimitResponses responses_;
  std::vector<std::string> own_keys_;  // match()'s: each limit's own key, tagged, or ""
  std::chrono::steady_clock::time_point last_shadow_log_{};
  std::uint64_t shadow_unlogged_ = 0;
  std::vector<std::unique_ptr<LimitedRequest>> all_;
  std::vector<LimitedRequest*> idle_;
  // Last: it goes first, answering what is in flight while the rest is still here.
  std::unique_ptr<AsyncAcquirer> acquirer_;  // with a store and a loop
};

}  // namespace ratewin::server
