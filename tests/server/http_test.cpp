// HttpSession without sockets: framing, pipelining, keep-alive and the input limits.
#include "http.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ratewin::server {
namespace {

struct Echo final : RequestHandler {
  std::vector<Request> seen;
  void handle(const Request& request, std::string_view peer, Reply& reply) override {
    seen.push_back(request);
    Response& response = reply.response();
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
    void handle(const Request&, std::string_view, Reply& reply) override {
      ++handled;
      reply.response().body.assign(10000, 'x');
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

namespace ratewin::server {
namespace {

// Defers every request whose target starts with "/later" (keeping its Responder and
// target); answers the others at once.
struct Deferring final : RequestHandler {
  std::vector<std::pair<std::string, Responder>> held;
  void handle(const Request& request, std::string_view, Reply& reply) override {
    if (request.target.starts_with("/later")) {
      held.emplace_back(request.target, reply.defer());
    } else {
      reply.response().body = "now " + request.target;
    }
  }
  void answer(std::size_t i) {
    Response r;
    r.body = "late " + held.at(i).first;
    held.at(i).second.respond(std::move(r));
  }
};

// The bodies of the responses in `out`, in order (each Content-Length long).
std::vector<std::string> bodies(const std::string& out) {
  std::vector<std::string> all;
  std::size_t at = 0;
  while ((at = out.find("HTTP/1.1 ", at)) != std::string::npos) {
    const std::size_t end = out.find("\r\n\r\n", at);
    const std::size_t length_at = out.find("Content-Length: ", at);
    if (end == std::string::npos || length_at == std::string::npos || length_at > end) {
      all.emplace_back("<interim>");
      at = end;
      continue;
    }
    const std::size_t length = std::stoul(out.substr(length_at + 16));
    all.push_back(out.substr(end + 4, length));
    at = end + 4 + length;
  }
  return all;
}

std::string get(std::string_view target, std::string_view extra = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: h\r\n" + std::string(extra) + "\r\n";
}

TEST_CASE("deferred answers leave in request order, whatever order they land in") {
  Deferring handler;
  HttpSession session(handler, "p");
  int told = 0;
  session.on_answer([&] { ++told; });
  REQUIRE(session.feed(get("/later/1") + get("/now/2") + get("/later/3") + get("/now/4")));
  CHECK(session.output().empty());  // everything waits for /later/1
  CHECK(session.pending() == 4);
  REQUIRE(handler.held.size() == 2);
  CHECK(handler.held[0].second.waiting());
  handler.answer(1);  // /later/3 first: still behind /later/1
  CHECK(told == 1);
  CHECK(session.output().empty());
  CHECK_FALSE(handler.held[1].second.waiting());
  handler.answer(0);
  CHECK(told == 2);
  CHECK(bodies(session.output()) ==
        std::vector<std::string>{"late /later/1", "now /now/2", "late /later/3", "now /now/4"});
  CHECK(session.pending() == 0);
  CHECK(session.output().find("Connection: close") == std::string::npos);
  // Answering twice, or through an emptied Responder, does nothing.
  handler.answer(0);
  CHECK(told == 2);
}

TEST_CASE("an answer given inside handle() goes out at once, without the callback") {
  struct AtOnce final : RequestHandler {
    void handle(const Request&, std::string_view, Reply& reply) override {
      Responder r = reply.defer();
      Response response;
      response.body = "inline";
      r.respond(std::move(response));
      CHECK_THROWS_AS(reply.defer(), std::logic_error);
    }
  } handler;
  HttpSession session(handler, "p");
  int told = 0;
  session.on_answer([&] { ++told; });
  REQUIRE(session.feed(get("/a") + get("/b")));
  CHECK(bodies(session.output()) == std::vector<std::string>{"inline", "inline"});
  CHECK(told == 0);
}

TEST_CASE("at most max_pending answers are owed: parsing waits, then goes on") {
  Deferring handler;
  HttpLimits limits;
  limits.max_pending = 2;
  HttpSession session(handler, "p", limits);
  REQUIRE(session.feed(get("/later/1") + get("/later/2") + get("/later/3") + get("/now/4")));
  CHECK(session.blocked());
  CHECK(handler.held.size() == 2);
  CHECK(session.resume());  // nothing answered yet: still waiting
  CHECK(session.blocked());
  CHECK(handler.held.size() == 2);
  handler.answer(0);
  CHECK(session.pending() == 1);
  CHECK(session.resume());
  CHECK(handler.held.size() == 3);
  handler.answer(1);
  handler.answer(2);
  CHECK(session.resume());
  CHECK_FALSE(session.blocked());
  CHECK(bodies(session.output()) == std::vector<std::string>{"late /later/1", "late /later/2",
                                                             "late /later/3", "now /now/4"});
}

TEST_CASE("a late answer to a connection that is gone does nothing") {
  Deferring handler;
  {
    HttpSession session(handler, "p");
    REQUIRE(session.feed(get("/later/1") + get("/later/2")));
    handler.answer(0);
  }  // the connection closed with /later/2 pending
  CHECK_FALSE(handler.held[1].second.waiting());
  handler.answer(1);  // no use of the freed session (ASan would say so)
  handler.held.clear();

  HttpSession timed(handler, "p");
  REQUIRE(timed.feed(get("/later/3") + "GET /partial"));
  timed.timed_out();  // answers owed are given up: no 408 behind them either
  CHECK(timed.closing());
  CHECK(timed.output().empty());
  handler.answer(0);
  CHECK(timed.output().empty());
}

TEST_CASE("a Responder dropped unanswered answers 500") {
  Deferring handler;
  HttpSession session(handler, "p");
  REQUIRE(session.feed(get("/later/1") + get("/now/2")));
  handler.held.clear();
  CHECK(statuses(session.output()) == std::vector<std::string>{"500", "200"});
  // Moving a Responder over one that holds a request answers that one too.
  REQUIRE(session.feed(get("/later/3") + get("/later/4")));
  handler.held[0].second = std::move(handler.held[1].second);
  CHECK(statuses(session.output()) == std::vector<std::string>{"500", "200", "500"});
  CHECK(handler.held[0].second.waiting());
  handler.answer(0);  // /later/4's, now held by the first
  CHECK(statuses(session.output()) == std::vector<std::string>{"500", "200", "500", "200"});
}

TEST_CASE("draining waits for the answers owed; the last one closes") {
  Deferring handler;
  HttpSession session(handler, "p");
  REQUIRE(session.feed(get("/later/1") + get("/now/2")));
  CHECK_FALSE(session.drain());
  CHECK_FALSE(session.closing());
  handler.answer(0);
  CHECK(session.closing());
  const std::string& out = session.output();
  CHECK(bodies(out) == std::vector<std::string>{"late /later/1", "now /now/2"});
  // Only the last response says it.
  CHECK(out.find("Connection: close") > out.find("late /later/1"));
  CHECK(out.find("Connection: close") != std::string::npos);
}

TEST_CASE("a client's end of input: the answers owed are still given") {
  Deferring handler;
  HttpSession session(handler, "p");
  REQUIRE(session.feed(get("/later/1") + "GET /half"));
  session.input_ended();
  CHECK_FALSE(session.closing());
  handler.answer(0);
  CHECK(session.closing());
  CHECK(bodies(session.output()) == std::vector<std::string>{"late /later/1"});
  CHECK(session.output().find("Connection: close") != std::string::npos);
}

TEST_CASE("an error or a 100 Continue behind a pending answer waits its turn") {
  Deferring handler;
  HttpSession session(handler, "p");
  REQUIRE(session.feed(get("/later/1") +
                       "POST /now/2 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n"
                       "Expect: 100-continue\r\n\r\n"));
  CHECK(session.output().empty());
  CHECK_FALSE(session.feed("hiBAD REQUEST\r\n\r\n"));
  CHECK(session.output().empty());
  CHECK_FALSE(session.closing());
  handler.answer(0);
  const std::string& out = session.output();
  CHECK(statuses(out) == std::vector<std::string>{"200", "100", "200", "400"});
  CHECK(bodies(out).at(0) == "late /later/1");
  CHECK(session.closing());
}

}  // namespace
}  // namespace ratewin::server
