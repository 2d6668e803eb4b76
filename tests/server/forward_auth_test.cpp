// Forward-auth checks: which request a check is about, from the headers nginx and Traefik
// send or from the path Envoy builds; the original URI parsed and normalised as a request
// target is; the check path's rules.
#include "service/forward_auth.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

namespace ratewin::server {
namespace {

constexpr std::string_view kPath = "/ratewin/check";

Request check(std::string target, std::vector<std::pair<std::string, std::string>> headers,
              std::string method = "GET") {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.headers = std::move(headers);
  return r;
}

CheckedRequest checked(const Request& r) {
  const Result<CheckedRequest> c = checked_request(r, kPath);
  REQUIRE_MESSAGE(c.ok(), r.target, ": ", c.message());
  return *c;
}

std::string refused(const Request& r) {
  const Result<CheckedRequest> c = checked_request(r, kPath);
  CHECK_MESSAGE(!c.ok(), r.target);
  CHECK(c.status().code() == Status::Code::invalid);
  CHECK(!c.message().empty());
  return c.message();
}

TEST_CASE("target_path: origin and absolute forms, normalised; nothing else") {
  CHECK(target_path("/a/b?q=1") == "/a/b");
  CHECK(target_path("/a//b/./c/../d#f") == "/a/b/d");
  CHECK(target_path("/public/../admin") == "/admin");
  CHECK(target_path("http://h:8080/upload?x") == "/upload");
  CHECK(target_path("https://example.com/a/../b") == "/b");
  // Raw UTF-8 (as some gateways pass it) is the canonical path's percent-encoding.
  CHECK(target_path("/caf\xc3\xa9") == "/caf%C3%A9");
  CHECK(target_path("/caf%c3%a9") == "/caf%C3%A9");
  for (const char* bad : {"", "*", "example.com:443", "upload", "a/b", "/a b", "/a\tb",
                          "/a\r\nX-API-Key: k", "/\x7f", "http://h:99999/upload",
                          "http://[::1/upload", "http://a!b/upload", "http://", " /a", "//"}) {
    CAPTURE(bad);
    if (std::string_view(bad) == "//") {
      CHECK(target_path(bad) == "/");  // an origin form: "//" is "/"
      continue;
    }
    CHECK(!target_path(bad).has_value());
  }
}

TEST_CASE("a check by headers, as nginx is configured to send them") {
  CheckedRequest c = checked(check("/ratewin/check", {{"x-original-uri", "/upload/../api/x?y=1"},
                                                      {"x-original-method", "POST"}}));
  CHECK(c.method == "POST");
  CHECK(c.path == "/api/x");
  // Without X-Original-Method, the check's own method (nginx's subrequest is a GET).
  c = checked(check("/ratewin/check", {{"x-original-uri", "http://h/upload"}}, "HEAD"));
  CHECK(c.method == "HEAD");
  CHECK(c.path == "/upload");
  // A query on the check path does not change which check it is.
  c = checked(check("/ratewin/check?from=nginx", {{"x-original-uri", " /b "}}));
  CHECK(c.path == "/b");
  // Absolute form of the check's own target.
  c = checked(check("http://ratewin/ratewin/check", {{"x-original-uri", "/b"}}));
  CHECK(c.path == "/b");
}

TEST_CASE("a check by headers, as Traefik sends them") {
  const CheckedRequest c = checked(check("/ratewin/check", {{"x-forwarded-method", "DELETE"},
                                                            {"x-forwarded-proto", "https"},
                                                            {"x-forwarded-host", "api.example.com"},
                                                            {"x-forwarded-uri", "/items/7?force=1"},
                                                            {"x-forwarded-for", "203.0.113.9"}}));
  CHECK(c.method == "DELETE");
  CHECK(c.path == "/items/7");
}

TEST_CASE("a check by path, as Envoy's ext_authz path_prefix builds it") {
  CheckedRequest c = checked(check("/ratewin/check/api/x?y=1", {}, "POST"));
  CHECK(c.method == "POST");
  CHECK(c.path == "/api/x");
  CHECK(checked(check("/ratewin/check/", {})).path == "/");
  CHECK(checked(check("/ratewin/check//upload", {})).path == "/upload");
  CHECK(checked(check("/ratewin/check/a/../../../upload", {})).path == "/upload");
  CHECK(checked(check("/ratewin/check/ratewin/check", {})).path == "/ratewin/check");
  // Headers a client slipped through are ignored: the path says which request it is.
  c = checked(check(
      "/ratewin/check/upload",
      {{"x-original-uri", "/cheap"}, {"x-forwarded-uri", "/cheap"}, {"x-original-method", "GET"}},
      "PUT"));
  CHECK(c.method == "PUT");
  CHECK(c.path == "/upload");
}

TEST_CASE("a check that does not say clearly which request it is about is refused") {
  CHECK(refused(check("/ratewin/check", {})).find("original request's URI") != std::string::npos);
  CHECK(refused(check("/ratewin/check", {{"x-original-method", "GET"}}))
            .find("original request's URI") != std::string::npos);
  CHECK(refused(check("/ratewin/check", {{"x-original-uri", ""}})).find("URI") !=
        std::string::npos);
  // Both families: one of them was the client's own, let through by the gateway.
  CHECK(refused(
            check("/ratewin/check", {{"x-original-uri", "/upload"}, {"x-forwarded-uri", "/cheap"}}))
            .find("both") != std::string::npos);
  CHECK(refused(
            check("/ratewin/check", {{"x-original-uri", "/upload"}, {"x-forwarded-method", "GET"}}))
            .find("both") != std::string::npos);
  CHECK(refused(
            check("/ratewin/check", {{"x-forwarded-uri", "/upload"}, {"x-original-method", "GET"}}))
            .find("both") != std::string::npos);
  // Twice: which one would count?
  for (const char* name : {"x-original-uri", "x-forwarded-uri"}) {
    CHECK(refused(check("/ratewin/check", {{name, "/cheap"}, {name, "/upload"}})).find("once") !=
          std::string::npos);
  }
  CHECK(refused(check("/ratewin/check", {{"x-original-uri", "/a"},
                                         {"x-original-method", "GET"},
                                         {"x-original-method", "POST"}}))
            .find("once") != std::string::npos);
  // Not a request target.
  for (const char* uri : {"*", "upload", "example.com:443", "/a b", "http://h:99999/upload",
                          "http://[::1/upload", "http://a!b/upload", "/\x01"}) {
    CAPTURE(uri);
    CHECK(refused(check("/ratewin/check", {{"x-original-uri", uri}})).find("not a request") !=
          std::string::npos);
    CHECK(refused(check("/ratewin/check", {{"x-forwarded-uri", uri}})).find("not a request") !=
          std::string::npos);
  }
  CHECK(refused(check("/ratewin/check*", {})).find("as it is written") != std::string::npos);
  // Not a method.
  for (const char* method :
       {"G ET", "GET\r", "(GET)", "GET/1", "", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}) {
    CAPTURE(method);
    const Request r =
        check("/ratewin/check", {{"x-original-uri", "/a"}, {"x-original-method", method}});
    if (std::string_view(method).empty()) {
      CHECK(checked(r).method == "GET");  // an empty header is no header
      continue;
    }
    CHECK(refused(r).find("not an HTTP method") != std::string::npos);
  }
  // The check path must be reached as written, not after normalisation.
  for (const char* target : {"/ratewin//check", "/x/../ratewin/check", "/ratewin/./check/a",
                             "//ratewin/check/a", "/ratewin/checkout"}) {
    CAPTURE(target);
    CHECK(refused(check(target, {{"x-original-uri", "/a"}})).find("as it is written") !=
          std::string::npos);
  }
}

TEST_CASE("a gateway that passes only 403 on gets its refusals as 403, the status meant beside") {
  const Result<bool> plain = wants_forbidden_refusals(check(std::string(kPath), {}));
  REQUIRE(plain.ok());
  CHECK_FALSE(*plain);
  const Result<bool> forbidden =
      wants_forbidden_refusals(check(std::string(kPath), {{"x-ratewin-refusal-status", " 403 "}}));
  REQUIRE(forbidden.ok());
  CHECK(*forbidden);
  for (const auto& headers : std::vector<std::vector<std::pair<std::string, std::string>>>{
           {{"x-ratewin-refusal-status", "429"}},
           {{"x-ratewin-refusal-status", "401"}},
           {{"x-ratewin-refusal-status", "403"}, {"x-ratewin-refusal-status", "403"}}}) {
    const Result<bool> bad = wants_forbidden_refusals(check(std::string(kPath), headers));
    CHECK_FALSE(bad.ok());
    CHECK(bad.status().code() == Status::Code::invalid);
    CHECK(bad.message() == "X-Ratewin-Refusal-Status may only be 403, sent once");
  }

  for (const int status : {429, 400, 503}) {
    Response r;
    r.status = status;
    refuse_as_forbidden(r);
    CHECK(r.status == 403);
    REQUIRE(r.headers.size() == 1);
    CHECK(r.headers[0].first == "X-Ratewin-Status");
    CHECK(r.headers[0].second == std::to_string(status));
  }
  for (const int status : {200, 204, 403}) {
    Response r;
    r.status = status;
    refuse_as_forbidden(r);
    CHECK(r.status == status);
    CHECK(r.headers.empty());
  }
}

TEST_CASE("the check path's rules") {
  CHECK(check_path_problem("/ratewin/check").ok());
  CHECK(check_path_problem("/_auth").ok());
  CHECK(check_path_problem("/healthz/check").ok());
  for (const char* bad :
       {"", "ratewin", "/", "/ratewin/", "/ratewin//check", "/a/../b", "/a/./b", "/a?b", "/a#b",
        "/a b", "/a%2fb", "/healthz", "/metrics", "/admin", "/admin/check"}) {
    CAPTURE(bad);
    const Status problem = check_path_problem(bad);
    CHECK(problem.code() == Status::Code::invalid);
    CHECK(!problem.message().empty());
  }
}

}  // namespace
}  // namespace ratewin::server
