#include "service/forward_auth.h"

#include <algorithm>
#include <array>

#include "common/text.h"
#include "http/path.h"
#include "http/request_parser.h"
#include "http/target.h"
#include "rules/rules.h"

namespace ratewin::server {

namespace {

// The value of a header sent at most once (trimmed); `repeated` is set if it came twice.
std::string_view single(const Request& r, std::string_view name, bool& repeated) {
  std::string_view value;
  int seen = 0;
  for (const auto& [n, v] : r.headers) {
    if (n != name) continue;
    if (++seen == 2) repeated = true;
    value = trim_ows(v);
  }
  return value;
}

}  // namespace

Status check_path_problem(std::string_view path) {
  if (path.empty() || path.front() != '/') return invalid("it must start with '/'");
  if (path == "/") return invalid("it must not be \"/\" (every request would be a check)");
  const bool plain = std::all_of(path.begin(), path.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '/';
  });
  if (!plain) return invalid("letters, digits, '/', '-', '.', '_' and '~' only");
  if (path.back() == '/') return invalid("it must not end with '/'");
  std::string normalised;
  std::string_view problem;
  if (!normalise_path(path, normalised, problem) || normalised != path)
    return invalid("it must be a normalised path (no //, . or ..)");
  if (path == "/healthz" || path == "/metrics" || path == "/admin" || path.starts_with("/admin/"))
    return invalid("it must not be /healthz, /metrics, or /admin or under it");
  return {};
}

std::optional<std::string> target_path(std::string_view target) {
  if (target.empty()) return std::nullopt;
  const bool clean = std::none_of(target.begin(), target.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
  if (!clean) return std::nullopt;
  // A gateway passes the URI as its client sent it: a fragment is no part of it, and
  // bytes above 0x7f (which a request line may not carry, but some gateways take) are
  // percent-encoded, as the canonical path writes them.
  target = target.substr(0, target.find('#'));
  std::string ascii;
  for (const char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80) {
      ascii += c;
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      ascii += '%';
      ascii += kHex[u >> 4];
      ascii += kHex[u & 15];
    }
  }
  // As a request line's target (target.h), for a GET: origin or absolute form.
  std::string path;
  std::string query;
  if (!parse_target("GET", ascii, path, query).empty() || path == "*") return std::nullopt;
  return path;
}

namespace {

// A request's target as written, an absolute form reduced to its path (with its query).
// (The HTTP layer has checked it: an absolute form has a path after its authority.)
std::string_view raw_target(const Request& request) {
  std::string_view raw = request.target;
  if (!raw.empty() && raw.front() != '/') {
    const std::size_t authority = raw.find("://");
    const std::size_t slash =
        authority == std::string_view::npos ? authority : raw.find('/', authority + 3);
    raw = slash == std::string_view::npos ? std::string_view() : raw.substr(slash);
  }
  return raw;
}

// Whether `path` is the check path or under it.
bool under(std::string_view path, std::string_view check_path) {
  return path.starts_with(check_path) &&
         (path.size() == check_path.size() || path[check_path.size()] == '/');
}

}  // namespace

Result<bool> wants_forbidden_refusals(const Request& check) {
  bool repeated = false;
  const std::string_view value = single(check, "x-ratewin-refusal-status", repeated);
  const bool forbidden = value == "403";
  if (repeated || !(value.empty() || forbidden))
    return invalid("X-Ratewin-Refusal-Status may only be 403, sent once");
  return forbidden;
}

void refuse_as_forbidden(Response& response) {
  if ((response.status >= 200 && response.status < 300) || response.status == 403) return;
  response.headers.emplace_back("X-Ratewin-Status", std::to_string(response.status));
  response.status = 403;
}

// A target's query: after its '?', before any '#'; empty if none.
static std::string_view query_of(std::string_view target) {
  const std::size_t q = target.find_first_of("?#");
  if (q == std::string_view::npos || target[q] == '#') return {};
  const std::string_view rest = target.substr(q + 1);
  return rest.substr(0, rest.find('#'));
}

bool is_check(const Request& request, std::string_view check_path) {
  const std::string_view raw = raw_target(request);
  return under(request.path, check_path) || under(raw.substr(0, raw.find_first_of("?#")), check_path);
}

Result<CheckedRequest> checked_request(const Request& check, std::string_view check_path) {
  // The check's own target, as written.
  const std::string_view raw = raw_target(check);
  const std::string_view raw_path = raw.substr(0, raw.find_first_of("?#"));
  CheckedRequest out;
  std::optional<std::string> path;
  if (raw_path == check_path) {
    bool repeated = false;
    const std::string_view original_uri = single(check, "x-original-uri", repeated);
    const std::string_view original_method = single(check, "x-original-method", repeated);
    const std::string_view forwarded_uri = single(check, "x-forwarded-uri", repeated);
    const std::string_view forwarded_method = single(check, "x-forwarded-method", repeated);
    if (repeated) {
      return invalid(
          "X-Original-URI, X-Original-Method, X-Forwarded-Uri and X-Forwarded-Method may "
          "each be sent once only");
    }
    const bool original = !original_uri.empty() || !original_method.empty();
    const bool forwarded = !forwarded_uri.empty() || !forwarded_method.empty();
    if (original && forwarded) {
      return invalid(
          "both X-Original-URI/-Method and X-Forwarded-Uri/-Method: the gateway must send "
          "one pair and remove the other");
    }
    const std::string_view uri = original ? original_uri : forwarded_uri;
    const std::string_view method = original ? original_method : forwarded_method;
    if (uri.empty()) {
      return invalid(
          "a check needs the original request's URI (X-Original-URI or X-Forwarded-Uri), "
          "or its path after the check path");
    }
    path = target_path(uri);
    out.query.assign(query_of(uri));
    out.method = method.empty() ? std::string_view(check.method) : method;
  } else if (raw.size() > check_path.size() && raw.starts_with(check_path) &&
             raw[check_path.size()] == '/') {
    path = target_path(raw.substr(check_path.size()));
    out.query.assign(query_of(raw));
    out.method = check.method;
  } else {
    return invalid("the check path must be sent as it is written (" + std::string(check_path) +
                   ", or the original path after it)");
  }
  if (!path) {
    return invalid("the original URI is not a request target (origin or absolute form)");
  }
  if (!is_method(out.method) || out.method.size() > 32) {
    return invalid("the original method is not an HTTP method (a token, in upper case)");
  }
  out.path = std::move(*path);
  return out;
}

}  // namespace ratewin::server
