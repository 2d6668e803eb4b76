// Forward-auth checks: a gateway (nginx auth_request, Traefik ForwardAuth, Envoy
// ext_authz over HTTP) asks, for each request it is about to pass on, whether it may;
// the answer is 200 (it may) or 429 / 403, with the rate-limit headers for the gateway
// to pass on. This reads which request a check is about.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/outcome.h"
#include "http/http.h"

namespace ratewin::server {

// The check path's rules: it starts with '/', is not "/", has no trailing '/', no query,
// is already normalised, and does not reach /healthz, /metrics or /admin. Ok if `path` is
// fine, else `invalid` with the problem.
Status check_path_problem(std::string_view path);

// The path of a request target, as endpoints are matched: the one place where a target
// given as text (the request's own, or a forward-auth check's original URI) is checked
// and normalised. Origin form ("/a/b?q") or absolute form ("http://h/a/b?q"); nullopt
// for anything else: empty, another form ("*", "h:443"), bytes a request line cannot
// carry (controls, spaces), an absolute form that does not parse.
std::optional<std::string> target_path(std::string_view target);

// The request a check is about.
struct CheckedRequest {
  std::string method;
  std::string path;  // target_path() of the original target
  std::string query;  // the original target's query (after '?', before '#'), as sent
};

// How the gateway said which request it checks. `check_path` is --check-path.
//   by headers: the check is sent to the check path itself (nginx: auth_request
//     /ratewin/check; Traefik: address http://.../ratewin/check), and the original
//     request is in X-Original-URI (+ X-Original-Method), as nginx is configured to
//     send them, or in X-Forwarded-Uri + X-Forwarded-Method, as Traefik sends them.
//     One family only: a request carrying both (a client's own header that the gateway
//     let through) is refused. Without a method header, the check's own method.
//   by path: the original path follows the check path (Envoy's ext_authz path_prefix:
//     /ratewin/check/api/x?q is a check of /api/x?q), and the method is the check's own.
//     The headers above are ignored.
// The target's path must reach the check path as written: "/ratewin//check" or
// "/x/../ratewin/check" is refused rather than guessed at.
// On failure `invalid`, saying what is wrong (for a 400).
Result<CheckedRequest> checked_request(const Request& check, std::string_view check_path);

// How the gateway wants a check's refusals. nginx's auth_request passes a 401 or 403 on
// and turns any other answer into a 500, logging an error for each (one per refused
// request under an attack); so a check may say "X-Ratewin-Refusal-Status: 403", and its
// refusals (429, 400) are then answered 403 with the status meant in X-Ratewin-Status,
// which the gateway's error page turns back into it. Without the header, as they are.
// Whether it says 403; `invalid` for any other value or a repeated header.
Result<bool> wants_forbidden_refusals(const Request& check);
// A refusal in `response` answered 403, its own status in X-Ratewin-Status; a 2xx or a
// 403 is left as it is.
void refuse_as_forbidden(Response& response);

// Whether `request` goes to the check path: its normalised path (Request::path) is the
// check path or under it, or its target as written is. The second catches
// "/ratewin/check/../api", which normalises to "/api": a gateway sending the client's
// path after the check path (Envoy's path_prefix) must get a check's answer for it, never
// the answer to a request for "/api".
bool is_check(const Request& request, std::string_view check_path);

}  // namespace ratewin::server
