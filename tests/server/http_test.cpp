// HttpSession without sockets: framing, pipelining, keep-alive and the input limits.
#include "http.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace ratewin::server {
namespace {

struct Echo final : RequestHandler {
  std::vector<Request> seen;
  void handle(const Request& request, std::string_view peer, Response& response) override {
    seen.push_back(request);
    response.body = request.method + " " + request.target + " " + std::string(peer);
    response.headers.emplace_back("X-Body-Size", std::to_string(request.body.size()));
  }
};

std::vector<std::string> statuses(const std::string& out) {
  std::vector<std::string> s;
  for (std::size_t at = out.find("HTTP/1.1 "); at != std::string::npos;
       at = out.find("HTTP/1.1 ", at + 1))
    s.push_back(out.substr(at + 9, 3));
  return s;
}

TEST_CASE("pipelined requests are answered in order, across arbitrary reads") {
  Echo echo;
  HttpSession session(echo, "192.0.2.7");
  const std::string input =
      "GET /a HTTP/1.1\r\nHost: x\r\nX-API-Key: k1\r\n\r\n"
      "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
      "GET /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  // One byte at a time: the parser keeps its state between reads.
  for (const char c : input) REQUIRE(session.feed(std::string_view(&c, 1)));
  REQUIRE(echo.seen.size() == 3);
  CHECK(echo.seen[0].header("x-api-key") == "k1");
  CHECK(echo.seen[1].body == "hello");
  CHECK(echo.seen[2].body == "abc");
  const std::string& out = session.output();
  CHECK(statuses(out) == std::vector<std::string>{"200", "200", "200"});
  const auto a = out.find("GET /a 192.0.2.7");
  const auto b = out.find("POST /b");
  const auto c = out.find("GET /c");
  CHECK(a < b);
  CHECK(b < c);
  CHECK(out.find("Connection: close") == std::string::npos);
  CHECK_FALSE(session.mid_request());
}

TEST_CASE("Connection: close and HTTP/1.0 end the connection after the response") {
  Echo echo;
  HttpSession session(echo, "p");
  CHECK_FALSE(session.feed("GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n"));
  CHECK(echo.seen.size() == 1);
  CHECK(session.output().find("Connection: close") != std::string::npos);
  HttpSession old(echo, "p");
  CHECK_FALSE(old.feed("GET / HTTP/1.0\r\n\r\n"));
  HttpSession kept(echo, "p");
  CHECK(kept.feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

TEST_CASE("bad and oversized input is answered with the right status, then closed") {
  Echo echo;
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 16;
  limits.max_headers = 4;
  const auto answer = [&](const std::string& input) {
    HttpSession session(echo, "p", limits);
    CHECK_FALSE(session.feed(input));
    CHECK(session.closing());
    CHECK(session.output().find("Connection: close") != std::string::npos);
    return statuses(session.output());
  };
  CHECK(answer("BLAH\r\n\r\n") == std::vector<std::string>{"400"});
  CHECK(answer("GET / HTTP/1.1\r\nbad header\r\n\r\n") == std::vector<std::string>{"400"});
  CHECK(answer("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n") ==
        std::vector<std::string>{"431"});
  CHECK(answer("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n") ==
        std::vector<std::string>{"431"});
  CHECK(answer("GET /" + std::string(600, 'u') + " HTTP/1.1\r\n\r\n") ==
        std::vector<std::string>{"414"});
  CHECK(answer("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n") ==
        std::vector<std::string>{"413"});
  CHECK(answer("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n" +
               std::string(32, 'b') + "\r\n0\r\n\r\n") == std::vector<std::string>{"413"});
  // A good request before the bad one is still answered, in order.
  CHECK(answer("GET / HTTP/1.1\r\n\r\nNOPE\r\n\r\n") == std::vector<std::string>{"200", "400"});
}

TEST_CASE("timeouts and draining") {
  Echo echo;
  HttpSession partial(echo, "p");
  CHECK(partial.feed("GET / HTTP/1.1\r\nHost"));
  CHECK(partial.mid_request());
  CHECK_FALSE(partial.drain());  // in progress: it may finish
  CHECK_FALSE(partial.feed(": x\r\n\r\n"));
  CHECK(partial.output().find("Connection: close") != std::string::npos);
  CHECK(statuses(partial.output()) == std::vector<std::string>{"200"});

  HttpSession slow(echo, "p");
  CHECK(slow.feed("GET / HT"));
  slow.timed_out();
  CHECK(statuses(slow.output()) == std::vector<std::string>{"408"});
  CHECK(slow.closing());

  HttpSession idle(echo, "p");
  idle.timed_out();  // nothing in progress: closed without a word
  CHECK(idle.output().empty());
  CHECK(idle.closing());
  HttpSession quiet(echo, "p");
  CHECK(quiet.drain());
}

}  // namespace
}  // namespace ratewin::server

namespace ratewin::server {
namespace {

TEST_CASE("HEAD is answered without a body; repeated headers keep every line") {
  Echo echo;
  HttpSession session(echo, "p");
  REQUIRE(session.feed("HEAD /x HTTP/1.1\r\nX-F: a\r\nX-F: b\r\n\r\nGET /y HTTP/1.1\r\n\r\n"));
  const std::string& out = session.output();
  // The HEAD response declares the GET body's length but carries none: the next
  // response follows its blank line at once.
  const auto first_end = out.find("\r\n\r\n");
  REQUIRE(first_end != std::string::npos);
  CHECK(out.compare(first_end + 4, 9, "HTTP/1.1 ") == 0);
  CHECK(out.find("HEAD /x") == std::string::npos);
  CHECK(out.find("GET /y p") != std::string::npos);
  CHECK(echo.seen[0].header("x-f") == "a");
  CHECK(echo.seen[0].last_header("x-f") == "b");
  CHECK(echo.seen[0].last_header("absent").empty());
}

TEST_CASE("a client that pipelines without reading gets no more parsed than the output cap") {
  struct Big final : RequestHandler {
    int handled = 0;
    void handle(const Request&, std::string_view, Response& response) override {
      ++handled;
      response.body.assign(10000, 'x');
    }
  } big;
  HttpSession session(big, "p");
  std::string input;
  for (int i = 0; i < 100; ++i) input += "GET / HTTP/1.1\r\n\r\n";
  CHECK(session.feed(input));
  CHECK(session.blocked());
  const int first = big.handled;
  CHECK(first < 100);
  CHECK(session.output().size() < HttpSession::kOutputCap + 11000);
  CHECK(session.feed("GET / HTTP/1.1\r\n\r\n"));  // held back too
  CHECK(big.handled == first);
  int rounds = 0;
  while (session.blocked()) {
    session.output().clear();  // written
    CHECK(session.resume());
    ++rounds;
  }
  CHECK(big.handled == 101);
  CHECK(rounds >= 3);
}

}  // namespace
}  // namespace ratewin::server

namespace ratewin::server {
namespace {

TEST_CASE("JSON bodies stay valid whatever bytes a client sent") {
  Response r;
  json_error(r, 400, "key \"k\\\x01\xff\xc3\xa9");
  CHECK(r.status == 400);
  // Quote and backslash escaped, control bytes as \u00XX, a stray byte as U+FFFD, and
  // well-formed UTF-8 kept.
  CHECK(r.body == "{\"error\":\"key \\\"k\\\\\\u0001\\ufffd\xc3\xa9\"}\n");
}

}  // namespace
}  // namespace ratewin::server
