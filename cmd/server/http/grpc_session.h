// grpc_session.h: gRPC over HTTP/2 for one connection, independent of sockets (a Session,
// session.h), on Debian's nghttp2: the connection's frames, flow control, HPACK, PING and
// SETTINGS by nghttp2 (with its CONTINUATION and rapid-reset defences), and gRPC's framing
// of unary and server-streaming calls here: a call's path and its one request message
// handed to a GrpcHandler, its answer (one message and grpc-status OK, or a status and
// message) sent back as HEADERS, DATA and trailers, or trailers only; or, for a streaming
// call (grpc.health.v1.Health/Watch), messages sent as they come with the stream kept open,
// then the trailers.
//
// Bounds, per connection: concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS; nghttp2
// refuses the ones over it), a header list's bytes (the stream is reset), a request
// message's bytes (RESOURCE_EXHAUSTED), stream resets per second (GOAWAY past the rate);
// and over every connection of the process, the bytes of requests arriving
// (GrpcLimits::buffered against max_buffered): past it, an arriving message is refused
// with RESOURCE_EXHAUSTED. A call's `grpc-timeout` is kept: an answer later than it is
// DEADLINE_EXCEEDED, given when the deadline passes (owed_wait_ms, timed_out). A stream
// the client resets (cancels) is forgotten: its answer, when it comes, is dropped.
// A stream kept open (its first message sent) owes nothing: the request timeout does not
// cut it, only its own grpc-timeout (DEADLINE_EXCEEDED), and a connection whose only
// streams are such is idle (idle_wait_ms), evictable as idle but not ended by the idle
// timeout. Each holds at most its latest message not yet sent (GrpcResponder::send), so a
// client that does not read costs no more than one that does.
//
// Threads: the session, its handler's calls and every GrpcResponder made for it belong
// to the connection's loop thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/session.h"

struct nghttp2_session;

namespace ratewin::server {

// gRPC's status codes (those this server gives).
enum class GrpcCode : std::uint8_t {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  resource_exhausted = 8,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
};

struct GrpcLimits {
  std::uint32_t max_concurrent_streams = 100;
  // A request's header list, as HTTP/2 counts it (name + value + 32 per field).
  std::size_t max_header_list_bytes = 16 * 1024;
  // One request message (without gRPC's 5-byte prefix).
  std::size_t max_message_bytes = 64 * 1024;
  // Stream resets the client may cause: a burst, then so many a second (past them, the
  // connection ends with GOAWAY).
  std::uint64_t reset_burst = 1000;
  std::uint64_t resets_per_second = 33;
  // How long an answer may be owed (the request timeout), when the call's grpc-timeout
  // is not shorter.
  std::uint64_t answer_timeout_ms = 10000;
  // The bytes of requests arriving over every connection (the transport's count of
  // buffered bytes, which this session's buffered() feeds), and their bound: null, none.
  const std::atomic<std::int64_t>* buffered = nullptr;
  std::int64_t max_buffered = 0;
  // The clock deadlines are kept by, in milliseconds (the loop's; tests give their own).
  std::function<std::uint64_t()> now;
};

// One unary call: valid until GrpcHandler::call returns.
struct GrpcCall {
  std::string_view method;   // :path, "/package.Service/Method"
  std::string_view message;  // the request message's bytes
  std::string_view peer;
};

class GrpcSession;

// The answer to one call, given at once or later. Movable, not copyable; used on the
// connection's loop thread only. Like Responder (http.h) it holds a ticket to its stream,
// not the connection: when the stream or connection has closed meanwhile (cancelled,
// deadline past, client gone), an answer does nothing. Dropped without an answer, it
// answers INTERNAL.
class GrpcResponder {
 public:
  GrpcResponder() noexcept = default;
  GrpcResponder(GrpcResponder&& other) noexcept;
  GrpcResponder& operator=(GrpcResponder&& other) noexcept;
  GrpcResponder(const GrpcResponder&) = delete;
  GrpcResponder& operator=(const GrpcResponder&) = delete;
  ~GrpcResponder();

  // grpc-status OK with one response message (its serialised bytes).
  void finish(std::string message);
  // A status other than OK, and why (grpc-message); after the messages send() gave, or
  // without a response message.
  void fail(GrpcCode code, std::string_view why);
  // A response message of a server-streaming call, the stream kept open for more (until
  // finish() or fail()). Messages are state, not a log: one the client's flow control has
  // not let out yet is replaced by the next (only the latest is kept, and sent).
  void send(std::string message);
  // Holds a call whose stream is still open and waiting for the answer (or for more
  // messages).
  bool waiting() const noexcept;

 private:
  friend class GrpcSession;
  struct Link {
    GrpcSession* session;  // null once the session is gone
  };
  GrpcResponder(std::shared_ptr<Link> link, std::int32_t stream) noexcept
      : link_(std::move(link)), stream_(stream) {}

  std::shared_ptr<Link> link_;
  std::int32_t stream_ = 0;
};

class GrpcHandler {
 public:
  virtual ~GrpcHandler() = default;
  // A unary call, on the connection's loop thread: answers through `responder`, at once
  // or later.
  virtual void call(const GrpcCall& call, GrpcResponder responder) = 0;
  // The server is draining (every connection of the loop has had GOAWAY): the streams the
  // handler keeps open are told and ended now, so that they do not hold the drain until
  // its deadline. Calls still arriving may come after it.
  virtual void drain() {}
  // The loop is ending: answers owed are given now, what the handler keeps on the loop is
  // closed.
  virtual void close() {}
};

class GrpcSession final : public Session {
 public:
  GrpcSession(GrpcHandler& handler, std::string peer, GrpcLimits limits);
  ~GrpcSession() override;
  GrpcSession(const GrpcSession&) = delete;
  GrpcSession& operator=(const GrpcSession&) = delete;

  bool feed(std::string_view data) override;
  bool blocked() const noexcept override { return false; }
  bool resume() override { return !input_done_; }
  std::size_t buffered() const noexcept override {
    return output_.capacity() + held_ + sizeof(*this);
  }
  bool timed_out() override;
  std::uint64_t owed_wait_ms(std::uint64_t otherwise) const noexcept override;
  std::uint64_t receiving_wait_ms(std::uint64_t otherwise) const noexcept override;
  std::uint64_t idle_wait_ms(std::uint64_t otherwise) const noexcept override;
  void input_ended() override;
  bool drain() override;
  void on_answer(std::function<void()> callback) override { on_answer_ = std::move(callback); }
  std::string& output() noexcept override { return output_; }
  bool mid_request() const noexcept override { return !greeted_ || receiving_ != 0; }
  bool closing() const noexcept override { return input_done_ && streams_.empty(); }
  std::uint64_t requests() const noexcept override { return requests_; }
  std::size_t pending() const noexcept override { return pending_; }
  std::uint64_t deadline_key() const noexcept override;
  void set_peer(std::string peer) override { peer_ = std::move(peer); }

  // Streams open now, and those of them kept open by send() (tests).
  std::size_t streams() const noexcept { return streams_.size(); }
  std::size_t streaming() const noexcept { return streaming_; }

 private:
  friend class GrpcResponder;
  struct Stream;
  struct Callbacks;

  // Stream bookkeeping.
  Stream* stream(std::int32_t id) noexcept;
  void opened(std::int32_t id);
  void closed(std::int32_t id);
  // A request whole: checked and handed to the handler.
  void dispatch(Stream& s);
  // Bytes of a request message.
  int data(Stream& s, std::string_view chunk);
  // The answer of a stream: `message` with OK, or `code` and `why`.
  void answer(std::int32_t id, GrpcCode code, std::string_view why, std::string* message);
  // A message of a stream kept open (GrpcResponder::send).
  void stream_message(std::int32_t id, std::string& message);
  // Sends what answer() or stream_message() queued, outside feed().
  void answered();
  // Moves what nghttp2 has to send into output().
  void send();
  // Ends the connection: GOAWAY with `error` (an HTTP/2 error code), nothing more read.
  void terminate(std::uint32_t error);
  // Nothing more is read, and no stream is kept (their answers are dropped).
  void forget_streams();
  std::uint64_t now() const { return limits_.now ? limits_.now() : 0; }

  GrpcHandler& handler_;
  std::string peer_;
  GrpcLimits limits_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, std::unique_ptr<Stream>> streams_;
  std::string output_;
  std::size_t held_ = 0;       // bytes of the requests' messages and paths held
  std::size_t receiving_ = 0;  // streams whose request has not all come
  std::size_t pending_ = 0;    // streams whose request came whole, not answered yet
  std::size_t streaming_ = 0;  // streams kept open by send(): nothing owed (not pending_)
  std::uint64_t requests_ = 0;
  std::uint64_t timeouts_ = 0;  // answers cut by timed_out(): a new deadline_key
  bool greeted_ = false;        // the client's SETTINGS came
  bool input_done_ = false;
  bool draining_ = false;
  int parsing_ = 0;  // inside feed(): its caller flushes
  std::shared_ptr<GrpcResponder::Link> link_;
  std::function<void()> on_answer_;
};

}  // namespace ratewin::server
