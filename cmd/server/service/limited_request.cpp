#include "service/limited_request.h"

#include <optional>
#include <utility>

#include "common/json_writer.h"
#include "common/text.h"
#include "service/forward_auth.h"

namespace ratewin::server {

namespace {

using std::chrono::steady_clock;

// The demo backend's answer.
void ok(Response& response, std::string_view path, const Match& match) {
  std::string& b = response.body;
  b.clear();
  JsonWriter(b)
      .begin_object()
      .key("ok")
      .boolean(true)
      .key("endpoint")
      .string(match.endpoint.empty() ? path : match.endpoint)
      .key("tier")
      .string(match.tier)
      .end_object();
  b += '\n';
}

}  // namespace

void LimitedRequest::limit_request(const Request& request, const ClientIdentifier::Peer& peer,
                                   Reply& reply) {
  reply_ = &reply;
  pass_ = Pass::backend;
  Status ambiguous = ambiguous_client_headers(request, home_.rules_.get().key_headers());
  if (ambiguous.ok()) ambiguous = method_override_problem(request, request.method);
  if (!ambiguous.ok()) return refuse(400, "ambiguous-header", ambiguous.message());
  path_.assign(request.path);
  const IpAddress address = home_.clients_.address(request, peer, false).address;
  if (identify(request, request.query, address) && match(request, request.query, request.method))
    acquire();
}

void LimitedRequest::limit_check(const Request& request, const ClientIdentifier::Peer& peer,
                                 Reply& reply) {
  reply_ = &reply;
  pass_ = Pass::check;
  if (!peer.trusted)
    return refuse(403, "untrusted-check",
                  "forward-auth checks are answered for --trust-proxy peers only");
  const Result<bool> forbidden = wants_forbidden_refusals(request);
  if (!forbidden) return refuse(400, "bad-check", forbidden.message());
  // The check's own 400s are refusals too (refuse() answers them 403 when asked).
  if (*forbidden) pass_ = Pass::check_forbidden;
  if (const Status ambiguous =
          ambiguous_client_headers(request, home_.rules_.get().key_headers());
      !ambiguous.ok())
    return refuse(400, "ambiguous-header", ambiguous.message());
  const Result<CheckedRequest> checked = checked_request(request, home_.parts_.check_path);
  if (!checked) return refuse(400, "bad-check", checked.message());
  const ClientIdentifier::Address address = home_.clients_.address(request, peer, true);
  if (!address.ok)
    return refuse(400, "bad-check",
                  "a check needs the client's address (X-Forwarded-For or X-Real-IP)");
  if (const Status ambiguous = method_override_problem(request, checked->method); !ambiguous.ok())
    return refuse(400, "ambiguous-header", ambiguous.message());
  path_.assign(checked->path);
  if (identify(request, checked->query, address.address) &&
      match(request, checked->query, checked->method))
    acquire();
}

bool LimitedRequest::identify(const Request& request, std::string_view query,
                              const IpAddress& address) {
  rules_ = &home_.rules_.get();
  generation_ = home_.rules_.generation();
  client_ = home_.clients_.identify(request, query, address, rules_->client_key());
  if (client_.kind == Client::Kind::api_key && client_.key.starts_with("ip:")) {
    // Rules name addresses "ip:...": a key posing as one would get its allow entries.
    refuse(400, "bad-key", "an API key must not start with \"ip:\"");
    return false;
  }
  // What the answer names it by, kept with the request (client_.counted, like the request,
  // is read before the engine's call only).
  key_.assign(client_.key);
  client_.key = key_;
  return true;
}

bool LimitedRequest::match(const Request& request, std::string_view query,
                           std::string_view method) {
  rules_->match(client_.key, method, path_, match_);
  if (match_.action == Action::deny) {
    home_.counter_.count(403, "deny");
    json_error(response(), 403, "forbidden");
    done();
    return false;
  }
  if (match_.action == Action::allow || match_.limits.empty()) {
    home_.counter_.count(200, match_.action == Action::allow ? "allow" : "none");
    LimitResponses::uncounted(match_.action, response());
    if (pass_ == Pass::backend) ok(response(), path_, match_);
    done();
    return false;
  }
  // Limits with a client key of their own count under it.
  std::vector<std::string>& own_keys = home_.own_keys_;
  own_keys.resize(match_.limits.size());
  for (std::size_t i = 0; i < match_.limits.size(); ++i) {
    if (const ClientKeySpec* spec = match_.limits[i]->client_key) {
      home_.clients_.tagged_key(request, query, client_.address, *spec, own_keys[i]);
    } else {
      own_keys[i].clear();
    }
  }
  home_.step_.prepare(match_, client_, home_.overrides_.get(), own_keys, items_);
  decisions_.resize(items_.size());
  return true;
}

void LimitedRequest::acquire() {
  started_ = steady_clock::now();
  if (home_.acquirer_ == nullptr)
    return complete(home_.step_.acquire(items_, decisions_), decisions_);
  const std::size_t refused = home_.acquirer_->try_acquire_all(
      items_, decisions_, [this](std::size_t refused_at, std::span<const Decision> decisions) {
        complete(refused_at, decisions);
      });
  if (refused != AsyncAcquirer::kPending) return complete(refused, decisions_);
  // The answer waits for the write's reply, and the rules the match points into with it.
  responder_ = reply_->defer();
  reply_ = nullptr;
  rules_held_ = home_.rules_.shared();
}

void LimitedRequest::complete(std::size_t refused, std::span<const Decision> decisions) {
  // At once: the engine's time; after a wait: the request's since the call.
  home_.counter_.latency(steady_clock::now() - started_);
  const LimitOutcome outcome =
      LimitStep::conclude(items_, decisions, refused, rules_->shadow_headers());
  if (reply_ != nullptr) {
    answer(outcome, decisions, response());
    return done();
  }
  Response response;
  answer(outcome, decisions, response);
  // Back to the pool first: answering may have this loop handle the connection's next
  // request at once.
  Responder responder = std::move(responder_);
  done();
  responder.respond(std::move(response));
}

void LimitedRequest::answer(const LimitOutcome& outcome, std::span<const Decision> decisions,
                            Response& response) {
  home_.responses_.write(generation_, match_, items_, decisions, outcome, response);
  const LimitRule& shown = *match_.limits[outcome.shown];
  home_.counter_.count(outcome.allowed ? 200 : 429, shown.name);
  if (!outcome.allowed) {
    home_.parts_.refusals.refused(
        shown.name, shown.limit, key_, match_.endpoint,
        static_cast<std::int64_t>(ceil_seconds(decisions[outcome.shown].retry_after)),
        steady_clock::now());
  }
  // What a limit in shadow would have refused, among the requests it would have changed:
  // in a refused request the engine describes it as well (would_reject when it is over
  // too), but enforcing it would have refused nothing more.
  if (outcome.allowed) {
    for (std::size_t i = 0; i < items_.size(); ++i)
      if (decisions[i].would_reject) home_.shadow_refusal(*match_.limits[i], decisions[i], match_);
  }
  if (outcome.allowed && pass_ == Pass::backend) ok(response, path_, match_);
  if (!outcome.allowed && pass_ == Pass::check_forbidden) refuse_as_forbidden(response);
}

void LimitedRequest::refuse(int status, std::string_view rule, std::string_view message) {
  home_.counter_.count(status, rule);
  json_error(response(), status, message);
  // A check's own 400s are refusals too; its 403 for an untrusted peer is one already.
  if (pass_ == Pass::check_forbidden) refuse_as_forbidden(response());
  done();
}

void LimitedRequest::done() {
  reply_ = nullptr;
  rules_ = nullptr;
  rules_held_.reset();
  home_.release(*this);
}

// ---------------------------------------------------------------------------------------

LimitedRequests::LimitedRequests(const Parts& parts, RequestTally::Counter& counter,
                                 uv_loop_s* loop)
    : parts_(parts),
      counter_(counter),
      rules_(parts.rules),
      overrides_(parts.overrides),
      clients_(parts.trusted_proxies, parts.ipv6_prefix),
      step_(parts.engine) {
  if (loop != nullptr && parts.engine.stats().store)
    acquirer_ = std::make_unique<AsyncAcquirer>(parts.engine, loop);
}

LimitedRequests::~LimitedRequests() { close(); }

LimitedRequest& LimitedRequests::take() {
  if (idle_.empty()) {
    all_.push_back(std::make_unique<LimitedRequest>(*this));
    return *all_.back();
  }
  LimitedRequest* r = idle_.back();
  idle_.pop_back();
  return *r;
}

void LimitedRequests::close() {
  if (acquirer_ != nullptr) acquirer_->close();  // what is in flight is answered now
}

void LimitedRequests::shadow_refusal(const LimitRule& rule, const Decision& d, const Match& match) {
  counter_.shadow_refusal(rule.name);
  const steady_clock::time_point now = steady_clock::now();
  if (now - last_shadow_log_ < std::chrono::seconds(1)) {
    ++shadow_unlogged_;
    return;
  }
  last_shadow_log_ = now;
  std::string line = "shadow: limit \"" + rule.name + "\" (" + rule.limit.to_string() +
                     ") would have refused a request";
  if (!match.endpoint.empty()) line += " to endpoint \"" + std::string(match.endpoint) + "\"";
  line += ", retry after " + std::to_string(ceil_seconds(d.retry_after)) + " s";
  if (shadow_unlogged_ != 0) {
    line += " (" + std::to_string(shadow_unlogged_) + " more in shadow since the last line)";
    shadow_unlogged_ = 0;
  }
  parts_.log(LogLevel::info, line);
}

}  // namespace ratewin::server
