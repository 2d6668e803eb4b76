// HTTP/1.1 for one connection, independent of sockets: bytes in, responses out.
// Requests are framed strictly (request_parser.h) and handed to a RequestHandler, which
// answers each at once or later (a deferred answer); either way the responses leave in
// the order the requests came, so pipelined requests get theirs in order.
//
// Threads: a session, its handler's calls, its Reply and every Responder made for it
// belong to the thread of the connection's loop. Nothing here is thread-safe; a handler
// that waits on other threads must come back to the loop (uv_async_send) to respond.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_writer.h"
#include "http/request_parser.h"
#include "http/session.h"

namespace ratewin::server {

struct HttpLimits : RequestLimits {
  // Requests of one connection parsed but not yet answered (deferred ones, and those
  // answered at once behind them): at this many, parsing waits for answers.
  std::size_t max_pending = 16;
};

struct Response {
  int status = 200;
  std::string_view content_type = "application/json";
  std::vector<std::pair<std::string_view, std::string>> headers;  // names are static strings
  // More header fields, already formatted: each "\r\nName: value" (written after
  // `headers`; kept in one string whose room is reused from response to response).
  std::string fields;
  std::string body;

  void clear() noexcept;
};

class HttpSession;
class Reply;

// The answer to one request, given later (see RequestHandler::handle). Movable, not
// copyable; used on the connection's loop thread only. It holds a ticket to its
// request's place among the connection's responses, not the connection: when the
// connection has closed meanwhile (client gone, timeout, drain deadline), respond() does
// nothing, and the Responder may outlive the session safely.
class Responder {
 public:
  Responder() noexcept = default;  // holds no request
  Responder(Responder&& other) noexcept;
  // Answers the request this one holds, if any, with 500 first (as the destructor does).
  Responder& operator=(Responder&& other) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  // Dropped without respond(): its request is answered 500, so the connection's later
  // responses are not held up for ever.
  ~Responder();

  // Sends `response` as the answer, in its request's place: it leaves after the answers
  // of earlier requests (it waits for any still pending), and answers of later requests
  // waiting for it leave with it. The session's on_answer callback then tells the
  // transport (unless this is called from inside the session's own feed() or resume(),
  // whose caller flushes anyway). Empty afterwards; does nothing when empty or when the
  // connection has closed.
  void respond(Response response);
  // Holds a request whose connection is still open and waiting for the answer.
  bool waiting() const noexcept;

 private:
  friend class HttpSession;
  struct Link {  // shared by a session and its Responders
    HttpSession* session;  // null once the session is gone
  };
  Responder(std::shared_ptr<Link> link, std::uint64_t sequence) noexcept
      : link_(std::move(link)), sequence_(sequence) {}
  // Answers 500 if it still holds a request.
  void drop() noexcept;

  std::shared_ptr<Link> link_;
  std::uint64_t sequence_ = 0;  // the request's number on its connection
};

// How RequestHandler::handle answers the request it is given: fill response() and
// return (answered at once), or call defer() and answer later through the Responder.
class Reply {
 public:
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;

  // The response sent when handle() returns, unless defer() was called.
  Response& response() noexcept { return response_; }
  // Takes the answer over: handle() returns without one and the Responder sends it
  // (response() is then ignored). Once per request: a second call throws
  // std::logic_error.
  Responder defer();
  // The same, for work of the server's own that may outlast the transport's request
  // timeout (a rules file's reload): the transport waits up to `wait_ms` for this answer
  // instead (HttpSession::owed_wait_ms), and if it has not come by then, `late` is given
  // in its place (a 202 saying where to learn the outcome) and the connection goes on;
  // the Responder's answer after that is dropped. So the answer is never cut by the
  // request timeout, and never waited for longer than `wait_ms`.
  Responder defer(std::uint64_t wait_ms, Response late);
  bool deferred() const noexcept { return deferred_; }

 private:
  friend class HttpSession;
  struct Form {  // how the response is to be written
    bool keep_alive = true;
    bool head = false;    // a HEAD request's: no body
    bool http10 = false;  // an HTTP/1.0 request's: keep-alive is announced
  };
  Reply(HttpSession& session, Response& response, Form form) noexcept
      : session_(session), response_(response), form_(form) {}
  // Both defer()s: once per request, then the session's slot.
  Responder defer_as(std::optional<Response> late, std::uint64_t wait_ms);

  HttpSession& session_;
  Response& response_;
  Form form_;
  bool deferred_ = false;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Answers a complete request, on the connection's loop thread, requests in the order
  // they came. `peer` is the client's address. Either fills reply.response() and
  // returns, or takes reply.defer() and answers through that Responder later (or even
  // before returning). `request` and `peer` are valid only until handle() returns:
  // copy what a later answer needs. An exception out of handle() answers 500 unless it
  // had deferred (then the Responder answers, or answers 500 when dropped).
  virtual void handle(const Request& request, std::string_view peer, Reply& reply) = 0;
  // The loop is ending (its connections are gone): answers still owed are given now, and
  // what the handler keeps on the loop (connections of its own) is closed, so that the
  // loop can end.
  virtual void close() {}
};

// Sets an error response: the status and {"error": message}.
void json_error(Response& response, int status, std::string_view message);

// Sets the body (what it held goes) to one JSON object, whose members `members` writes
// with the writer it is given, and a newline.
template <typename Members>
void json_body(Response& response, Members&& members) {
  response.body.clear();
  JsonWriter w(response.body);
  w.begin_object();
  members(w);
  w.end_object();
  response.body += '\n';
}

// The reason phrase of a status this server sends.
std::string_view reason(int status) noexcept;

class HttpSession final : public Session {
 public:
  HttpSession(RequestHandler& handler, std::string peer, HttpLimits limits = {});
  // Every Responder still holding one of its requests turns into a no-op.
  ~HttpSession() override;
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // Parses what arrived and appends to output() the responses that are ready, in
  // request order. False once no more input is wanted (the client asked to close, bad
  // input, draining); later input is ignored, and the connection is to be closed once
  // closing() (every answer owed has been written to output()).
  // Parsing stops, the rest of the input kept, blocked() until resume(), once output()
  // holds kOutputCap bytes (call resume() after output() has been written: a client
  // pipelining requests without reading the responses gets no more work done for it)
  // or once max_pending requests wait for answers (resume() goes on when some landed).
  bool feed(std::string_view data) override;
  bool blocked() const noexcept override { return blocked_; }
  bool resume() override;
  // The bytes it holds: output not taken yet, input held back, a request arriving.
  std::size_t buffered() const noexcept override {
    return output_.capacity() + held_.capacity() + parser_.buffered();
  }
  // Called when the connection's time is up (the request timeout, or the longest wait of
  // the answers owed, owed_wait_ms). The answers owed that have a late answer of their own
  // (Reply::defer(wait_ms, late)) get it, in request order, up to the first that has none.
  // Then, if answers are still owed, none is written; else a partial request is answered
  // 408. True, and closing() after, when something was cut (or the client was idle);
  // false when late answers stood in for every answer owed and no request was arriving:
  // the client was not the slow one, and the connection goes on (closing() only if no
  // more input was to be read anyway).
  bool timed_out() override;
  // How long the transport waits for the answers owed (after the last request received):
  // the longest of their own waits (Reply::defer(wait_ms, late)), `otherwise` (the
  // request timeout) for an answer without one.
  std::uint64_t owed_wait_ms(std::uint64_t otherwise) const noexcept override;
  // The client sends no more (end of its stream): a partial request is dropped, and
  // closing() once the answers owed are written.
  void input_ended() override;
  // Shutting down: the last response (the one to the request in progress, else to the
  // last one pending) says "Connection: close". True when the connection can go now
  // (closing()): nothing in progress and no answer owed.
  bool drain() override;
  // Called (on the loop thread) when a deferred answer has landed from outside feed()
  // and resume(): output() may have grown, closing() turned true, or blocked() parsing
  // be ready to go on. The transport flushes then. It must not destroy the session.
  void on_answer(std::function<void()> callback) override { on_answer_ = std::move(callback); }

  std::string& output() noexcept override { return output_; }
  // Some bytes of a request have arrived, but not all of it.
  bool mid_request() const noexcept override { return parser_.mid_request(); }
  // No more input is read and every answer owed is in output().
  bool closing() const noexcept override { return input_done_ && queue_.empty(); }
  // Requests parsed (answered or not).
  std::uint64_t requests() const noexcept override { return requests_; }
  // Requests whose responses are not in output() yet: deferred ones not answered, and
  // those answered behind them.
  std::size_t pending() const noexcept override { return queue_.size(); }
  const std::string& peer() const noexcept { return peer_; }
  void set_peer(std::string peer) override { peer_ = std::move(peer); }

 private:
  friend class Reply;
  friend class Responder;
  // A response waiting for its turn.
  struct Slot {
    Response response;
    Reply::Form form;
    bool answered = false;
    bool interim = false;  // "100 Continue" for a request behind pending ones
    // Deferred with a wait of its own: given in its place once that is over.
    std::optional<Response> late;
    std::uint64_t wait_ms = 0;
  };

  // Parses `input` until it is all taken, the input is done, or parsing must wait.
  bool parse(std::string_view input);
  // Answers an error (after the answers owed) and reads no more.
  void fail(int status, std::string_view message);
  // Hands a complete request to the handler.
  void dispatch(Reply::Form form);
  // A Reply deferred: its place in the queue, as a Responder.
  Responder defer(Reply::Form form, std::optional<Response> late = std::nullopt,
                  std::uint64_t wait_ms = 0);
  // A Responder's answer.
  void answer(std::uint64_t sequence, Response&& response);
  // Moves the answered responses at the front of the queue to output().
  void emit_ready();
  void write(const Response& response, Reply::Form form);

  RequestHandler& handler_;
  std::string peer_;
  HttpLimits limits_;
  RequestParser parser_;
  Response response_;
  std::string output_;
  std::string held_;  // input not parsed yet while blocked_
  bool blocked_ = false;
  bool input_done_ = false;  // no more input is parsed
  bool draining_ = false;
  int parsing_ = 0;  // inside feed() or resume(): their caller flushes
  std::uint64_t requests_ = 0;
  std::deque<Slot> queue_;         // responses not in output_ yet, in request order
  std::uint64_t first_sequence_ = 0;  // the request number of queue_.front()
  std::shared_ptr<Responder::Link> link_;
  std::function<void()> on_answer_;
};

}  // namespace ratewin::server
