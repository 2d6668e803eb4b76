// HttpSession without sockets: framing, pipelining, keep-alive and the input limits.
#include "http/http.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace doctest {
template <>
struct StringMaker<std::vector<std::string>> {
  static String convert(const std::vector<std::string>& value) {
    std::string all = "{";
    for (const std::string& v : value) all += (all.size() > 1 ? ", " : "") + v;
    return (all + "}").c_str();
  }
};
}  // namespace doctest

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

// The status of each response in `out`, read response by response (a body is
// Content-Length long; an interim response has none). Not for HEAD responses.
std::vector<std::string> statuses(const std::string& out) {
  std::vector<std::string> s;
  std::size_t at = 0;
  while (at < out.size()) {
    REQUIRE(out.compare(at, 9, "HTTP/1.1 ") == 0);
    s.push_back(out.substr(at + 9, 3));
    const std::size_t end = out.find("\r\n\r\n", at);
    REQUIRE(end != std::string::npos);
    const std::string head = out.substr(at, end - at);
    const std::size_t length_at = head.find("Content-Length: ");
    at = end + 4 + (length_at == std::string::npos ? 0 : std::stoul(head.substr(length_at + 16)));
  }
  return s;
}

TEST_CASE("pipelined requests are answered in order, across arbitrary reads") {
  Echo echo;
  HttpSession session(echo, "192.0.2.7");
  const std::string input =
      "GET /a HTTP/1.1\r\nHost: x\r\nX-API-Key: k1\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
      "GET /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
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
  CHECK_FALSE(session.feed(
      "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n"));
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
  // Before the line has ended, too: a long target is 414, a long anything else 400.
  CHECK(answer("GET /" + std::string(2000, 'u')) == std::vector<std::string>{"414"});
  CHECK(answer(std::string(2000, 'G')) == std::vector<std::string>{"400"});
  CHECK(answer("GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(2000, 'a')) ==
        std::vector<std::string>{"431"});
  CHECK(answer("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n") ==
        std::vector<std::string>{"413"});
  CHECK(answer("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n" +
               std::string(32, 'b') + "\r\n0\r\n\r\n") == std::vector<std::string>{"413"});
  // A good request before the bad one is still answered, in order.
  CHECK(answer("GET / HTTP/1.1\r\nHost: x\r\n\r\nNOPE\r\n\r\n") ==
        std::vector<std::string>{"200", "400"});
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
  REQUIRE(session.feed(
      "HEAD /x HTTP/1.1\r\nHost: x\r\nX-F: a\r\nX-F: b\r\n\r\nGET /y HTTP/1.1\r\nHost: x\r\n\r\n"));
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
  for (int i = 0; i < 100; ++i) input += "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(session.feed(input));
  CHECK(session.blocked());
  const int first = big.handled;
  CHECK(first < 100);
  CHECK(session.output().size() < HttpSession::kOutputCap + 11000);
  CHECK(session.feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));  // held back too
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
// target), and "/own..." likewise as work of the server's own (a reload): waited for
// `wait_ms`, then answered 202 "going on" in its place; answers the others at once.
struct Deferring final : RequestHandler {
  std::uint64_t wait_ms = 5000;
  std::vector<std::pair<std::string, Responder>> held;
  void handle(const Request& request, std::string_view, Reply& reply) override {
    if (request.target.starts_with("/own")) {
      Response late;
      late.status = 202;
      late.body = "going on " + request.target;
      held.emplace_back(request.target, reply.defer(wait_ms, std::move(late)));
    } else if (request.target.starts_with("/later")) {
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

TEST_CASE("an answer owed to the server's own work has a wait of its own, then a late answer") {
  constexpr std::uint64_t kRequestTimeout = 100;
  Deferring handler;
  HttpSession session(handler, "p");
  CHECK(session.owed_wait_ms(kRequestTimeout) == kRequestTimeout);  // nothing owed
  REQUIRE(session.feed(get("/own/1") + get("/now/2")));
  // The transport waits for it as long as it says, not the request timeout...
  CHECK(session.owed_wait_ms(kRequestTimeout) == 5000);
  handler.wait_ms = 50;  // ...nor longer when it says less
  REQUIRE(session.feed(get("/own/3")));
  CHECK(session.owed_wait_ms(kRequestTimeout) == 5000);
  CHECK(session.output().empty());

  SUBCASE("its answer in time goes out as any other") {
    handler.answer(0);
    CHECK(session.owed_wait_ms(kRequestTimeout) == 50);  // /own/3's
    handler.answer(1);
    CHECK(session.pending() == 0);
    CHECK(bodies(session.output()) ==
          std::vector<std::string>{"late /own/1", "now /now/2", "late /own/3"});
  }
  SUBCASE("its wait over, the late answer stands in and the connection goes on") {
    int told = 0;
    session.on_answer([&] { ++told; });
    CHECK_FALSE(session.timed_out());
    CHECK_FALSE(session.closing());
    CHECK(told == 0);  // (the transport flushes after timed_out())
    CHECK(statuses(session.output()) == std::vector<std::string>{"202", "200", "202"});
    CHECK(bodies(session.output()) ==
          std::vector<std::string>{"going on /own/1", "now /now/2", "going on /own/3"});
    CHECK(session.output().find("Connection: close") == std::string::npos);
    CHECK_FALSE(handler.held[0].second.waiting());
    session.output().clear();
    handler.answer(0);  // the outcome, too late: dropped
    CHECK(session.output().empty());
    CHECK(told == 0);
    REQUIRE(session.feed(get("/now/4")));
    CHECK(bodies(session.output()) == std::vector<std::string>{"now /now/4"});
  }
  SUBCASE("draining: the late answers are the last, and the last one closes") {
    CHECK_FALSE(session.drain());
    CHECK_FALSE(session.timed_out());
    CHECK(session.closing());  // (no more input was to be read anyway)
    const std::string& out = session.output();
    CHECK(statuses(out) == std::vector<std::string>{"202", "200", "202"});
    CHECK(out.find("Connection: close") > out.find("going on /own/1"));
    CHECK(out.find("Connection: close") != std::string::npos);
  }
  SUBCASE("a request arriving when the time is up: late answers, then 408") {
    REQUIRE(session.feed("GET /half"));
    CHECK(session.timed_out());
    CHECK(session.closing());
    CHECK(statuses(session.output()) == std::vector<std::string>{"202", "200", "202", "408"});
  }
}

TEST_CASE("a late answer does not go before an answer owed without one") {
  constexpr std::uint64_t kRequestTimeout = 100;
  Deferring handler;
  SUBCASE("behind it: nothing is written") {
    HttpSession session(handler, "p");
    REQUIRE(session.feed(get("/later/1") + get("/own/2")));
    CHECK(session.owed_wait_ms(kRequestTimeout) == 5000);  // the longest
    CHECK(session.timed_out());
    CHECK(session.closing());
    CHECK(session.output().empty());
    handler.answer(1);
    CHECK(session.output().empty());
  }
  SUBCASE("before it: the late answer, then nothing") {
    HttpSession session(handler, "p");
    REQUIRE(session.feed(get("/own/1") + get("/later/2") + get("/now/3")));
    CHECK(session.timed_out());
    CHECK(session.closing());
    CHECK(bodies(session.output()) == std::vector<std::string>{"going on /own/1"});
    CHECK_FALSE(handler.held[1].second.waiting());
  }
}

}  // namespace
}  // namespace ratewin::server

namespace ratewin::server {
namespace {

// One connection's answer to `input`, fed in one read and again a byte at a time (the
// framing must not depend on where reads end): the statuses, and what the handler saw.
std::vector<std::string> framing(const std::string& input, std::vector<Request>* seen = nullptr) {
  std::vector<std::string> answers[2];
  for (const bool bytewise : {false, true}) {
    Echo echo;
    HttpSession session(echo, "p");
    if (bytewise) {
      for (const char c : input)
        if (!session.feed(std::string_view(&c, 1))) break;
    } else {
      session.feed(input);
    }
    answers[bytewise ? 1 : 0] = statuses(session.output());
    if (seen != nullptr) *seen = echo.seen;
  }
  CHECK(answers[0] == answers[1]);
  return answers[0];
}

using Statuses = std::vector<std::string>;
const Statuses k200{"200"};
const Statuses k400{"400"};
const Statuses k505{"505"};

struct Case {
  std::string_view why;
  std::string input;
  Statuses expected;
};

TEST_CASE("strict framing: request line, header lines, line endings, Host, versions") {
  const std::string post = "POST / HTTP/1.1\r\nHost: h\r\n";
  const std::string chunked = post + "Transfer-Encoding: chunked\r\n\r\n";
  const Case cases[] = {
      {"plain", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", k200},
      {"HTTP/1.0 needs no Host", "GET / HTTP/1.0\r\n\r\n", k200},
      {"an empty Host is allowed", "GET / HTTP/1.1\r\nHost:\r\n\r\n", k200},
      {"empty lines before a request line are skipped", "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", k200},
      {"space before a colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", k400},
      {"tab before a colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A\t: 1\r\n\r\n", k400},
      {"obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  more\r\n\r\n", k400},
      {"obs-fold with a tab", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\tmore\r\n\r\n", k400},
      {"whitespace before the first header", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", k400},
      {"empty header name", "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", k400},
      {"control byte in a value", std::string("GET / HTTP/1.1\r\nHost: h\r\nX: a") + '\0' + "b\r\n\r\n",
       k400},
      {"DEL in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\x7f\r\n\r\n", k400},
      {"tab and obs-text in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\tb\xff\r\n\r\n", k200},
      {"bare LF after the request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", k400},
      {"bare LF after a header", "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n", k400},
      {"bare LF ending the head", "GET / HTTP/1.1\r\nHost: h\r\n\n", k400},
      {"bare LF only", "GET / HTTP/1.1\nHost: h\n\n", k400},
      {"bare CR inside a line", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", k400},
      {"bare CR in the request line", "GET /\r HTTP/1.1\r\nHost: h\r\n\r\n", k400},
      {"no Host in HTTP/1.1", "GET / HTTP/1.1\r\n\r\n", k400},
      {"two Hosts", "GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", k400},
      {"two Hosts in HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", k400},
      {"a Host that is not one", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", k400},
      {"a Host with a bad port", "GET / HTTP/1.1\r\nHost: h:99999\r\n\r\n", k400},
      {"a Host with userinfo", "GET / HTTP/1.1\r\nHost: u@h\r\n\r\n", k400},
      {"a Host with a port", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", k200},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", k505},
      {"HTTP/1.2", "GET / HTTP/1.2\r\nHost: h\r\n\r\n", k505},
      {"HTTP/0.9", "GET / HTTP/0.9\r\nHost: h\r\n\r\n", k505},
      {"HTTP/0.9 style (no version)", "GET /\r\n\r\n", k505},
      {"HTTP/3.0", "GET / HTTP/3.0\r\nHost: h\r\n\r\n", k505},
      {"malformed version", "GET / HTTP/1\r\nHost: h\r\n\r\n", k400},
      {"two-digit minor", "GET / HTTP/1.10\r\nHost: h\r\n\r\n", k400},
      {"lower-case version", "GET / http/1.1\r\nHost: h\r\n\r\n", k400},
      {"three-part version", "GET / HTTP/9.9.9\r\nHost: h\r\n\r\n", k400},
      {"space after the version", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", k400},
      {"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", k400},
      {"tab in the request line", "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", k400},
      {"a method that is not a token", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", k400},
      {"non-ASCII in the target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n", k400},
      // Bodies and chunks.
      {"Content-Length", post + "Content-Length: 3\r\n\r\nabc", k200},
      {"chunked", chunked + "3\r\nabc\r\n0\r\n\r\n", k200},
      {"chunk extensions are fine", chunked + "3;a=b;c\r\nabc\r\n0 ; last\r\n\r\n", k200},
      {"upper-case hex", chunked + "A\r\n0123456789\r\n0\r\n\r\n", k200},
      {"bare LF after a chunk size", chunked + "3\nabc\r\n0\r\n\r\n", k400},
      {"bare LF after chunk data", chunked + "3\r\nabc\n0\r\n\r\n", k400},
      {"chunk data longer than its size", chunked + "3\r\nabcd\r\n0\r\n\r\n", k400},
      {"chunk data not followed by CRLF", chunked + "3\r\nabcXY0\r\n\r\n", k400},
      {"bare LF after the last chunk", chunked + "3\r\nabc\r\n0\n\r\n", k400},
      {"bare LF ending the trailers", chunked + "0\r\n\n", k400},
      {"bad chunk size", chunked + "zz\r\nabc\r\n0\r\n\r\n", k400},
      {"negative chunk size", chunked + "-3\r\nabc\r\n0\r\n\r\n", k400},
      {"0x chunk size", chunked + "0x3\r\nabc\r\n0\r\n\r\n", k400},
      {"space before a chunk size", chunked + " 3\r\nabc\r\n0\r\n\r\n", k400},
      {"empty chunk size", chunked + "\r\nabc\r\n0\r\n\r\n", k400},
      {"chunk size overflowing 64 bits", chunked + "10000000000000003\r\nabc\r\n0\r\n\r\n", {"413"}},
      {"bad trailer line", chunked + "0\r\nnot a trailer\r\n\r\n", k400},
      {"a trailer with space before its colon", chunked + "0\r\nX-A : 1\r\n\r\n", k400},
      // Smuggling: a body's length must be beyond doubt.
      {"Transfer-Encoding and Content-Length",
       post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", k400},
      {"Content-Length and Transfer-Encoding",
       post + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", k400},
      {"differing Content-Lengths", post + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", k400},
      {"differing Content-Lengths in a list", post + "Content-Length: 3, 4\r\n\r\nabcd", k400},
      {"the same Content-Length twice", post + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc", k200},
      {"a signed Content-Length", post + "Content-Length: +3\r\n\r\nabc", k400},
      {"a hex Content-Length", post + "Content-Length: 0x3\r\n\r\nabc", k400},
      {"an empty Content-Length", post + "Content-Length:\r\n\r\n", k400},
      {"a Content-Length with a space inside", post + "Content-Length: 1 2\r\n\r\n", k400},
      {"gzip, chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", k400},
      {"chunked, gzip", post + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", k400},
      {"chunked twice", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", k400},
      {"identity", post + "Transfer-Encoding: identity\r\n\r\n", k400},
      {"chunked in any case", post + "Transfer-Encoding: ChUnKeD\r\n\r\n0\r\n\r\n", k200},
      {"chunked with a trailing comma", post + "Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n", k400},
      {"a transfer coding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", k400},
      {"a Transfer-Encoding with a space before its colon",
       post + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", k400},
  };
  for (const Case& c : cases) {
    CAPTURE(c.why);
    CHECK(framing(c.input) == c.expected);
  }
}

TEST_CASE("an error closes the connection: nothing after it is read") {
  Echo echo;
  HttpSession session(echo, "p");
  CHECK_FALSE(session.feed("GET / HTTP/1.1\r\nHost : h\r\n\r\nGET /next HTTP/1.1\r\nHost: h\r\n\r\n"));
  CHECK(echo.seen.empty());
  CHECK(statuses(session.output()) == k400);
  CHECK(session.output().find("Connection: close") != std::string::npos);
}

TEST_CASE("trailers are read and dropped: they never become headers") {
  std::vector<Request> seen;
  const std::string input =
      "POST /t HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-API-Key: head\r\n\r\n"
      "3\r\nabc\r\n0\r\nX-API-Key: trailer\r\nX-Forwarded-For: 10.6.6.6\r\nHost: other\r\n\r\n"
      "GET /after HTTP/1.1\r\nHost: h\r\n\r\n";
  REQUIRE(framing(input, &seen) == Statuses{"200", "200"});
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].body == "abc");
  CHECK(seen[0].header("x-api-key") == "head");
  CHECK(seen[0].last_header("x-api-key") == "head");
  CHECK(seen[0].header("x-forwarded-for").empty());
  CHECK(seen[0].headers.size() == 3);  // host, transfer-encoding, x-api-key
  CHECK(seen[1].path == "/after");
  CHECK(seen[1].header("x-api-key").empty());
}

TEST_CASE("request targets: origin form, absolute form, asterisk and authority forms") {
  struct Target {
    std::string_view method;
    std::string_view target;
    std::string_view status;
    std::string_view path = "";
    std::string_view query = "";
  };
  const Target cases[] = {
      {"GET", "/a/b?x=1&y=/../z", "200", "/a/b", "x=1&y=/../z"},
      {"GET", "/a?", "200", "/a", ""},
      {"GET", "/a?q=|{}[]\"^`", "200", "/a", "q=|{}[]\"^`"},  // queries as browsers send them
      {"GET", "http://h/api/x?q", "200", "/api/x", "q"},
      {"GET", "HTTP://H:80/api/x", "200", "/api/x"},
      {"GET", "https://h.example./api/x", "200", "/api/x"},
      {"GET", "http://127.0.0.1:8080/api", "200", "/api"},
      {"GET", "http://[::1]:8080/api/./x/..", "200", "/api/"},
      {"GET", "http://[2001:db8::1]/x", "200", "/x"},
      {"GET", "http://h:99999/api/x", "400"},
      {"GET", "http://h:0/api/x", "400"},
      {"GET", "http://h:/api/x", "400"},
      {"GET", "http://h:8o/api/x", "400"},
      {"GET", "http://[::1/api/x", "400"},
      {"GET", "http://[::1]x/api/x", "400"},
      {"GET", "http://[fe80::1%25eth0]/api/x", "400"},
      {"GET", "http://[v7.x]/api/x", "400"},
      {"GET", "http://[1.2.3.4]/api/x", "400"},
      {"GET", "http://a!b/api/x", "400"},
      {"GET", "http://a%41b/api/x", "400"},
      {"GET", "http://a..b/api/x", "400"},
      {"GET", "http://.a/api/x", "400"},
      {"GET", "http://a_b/api/x", "200", "/api/x"},  // container names have them
      {"GET", "http://u@h/api/x", "400"},
      {"GET", "http://u:p@h/api/x", "400"},
      {"GET", "http:///api/x", "400"},
      {"GET", "http://h", "400"},
      {"GET", "http://h?x", "400"},
      {"GET", "http:/h/api/x", "400"},
      {"GET", "ftp://h/api/x", "400"},
      {"GET", "h:80/api/x", "400"},
      {"GET", "http://h/api/x#f", "400"},
      {"GET", "/api/x#f", "400"},
      {"GET", "api/x", "400"},
      {"GET", "*", "400"},
      {"OPTIONS", "*", "200", "*"},
      {"CONNECT", "h:443", "400"},
      {"CONNECT", "/x", "400"},
      {"GET", "h:443", "400"},
      {"GET", "/%61pi/x", "200", "/api/x"},
      {"GET", "/%zz", "400"},
      {"GET", "/a%2Fb", "400"},
      {"GET", "http://h/a%2fb", "400"},
  };
  for (const Target& t : cases) {
    CAPTURE(t.method);
    CAPTURE(t.target);
    std::vector<Request> seen;
    const Statuses got = framing(std::string(t.method) + " " + std::string(t.target) +
                                     " HTTP/1.1\r\nHost: h\r\n\r\n",
                                 &seen);
    CHECK(got == Statuses{std::string(t.status)});
    if (t.status == "200" && seen.size() == 1) {
      CHECK(seen[0].target == t.target);
      CHECK(seen[0].path == t.path);
      CHECK(seen[0].query == t.query);
    }
  }
}

}  // namespace
}  // namespace ratewin::server
