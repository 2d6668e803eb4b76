// session.h: one connection's protocol, independent of sockets: bytes in, bytes out, and
// what the transport (http_loops.h) needs to keep its bounds: the bytes held, whether a
// request is arriving or answers are owed, and how to time out, drain and close. HTTP/1.1
// (HttpSession, http.h) and HTTP/2 for gRPC (GrpcSession, grpc_session.h) are sessions;
// the transport serves both the same way, on the same loops, under the same connection
// slots, timeouts and buffer bound.
//
// Threads: a session belongs to the thread of its connection's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ratewin::server {

class Session {
 public:
  virtual ~Session() = default;

  // Parses what arrived and appends to output() what is ready to send. False once no more
  // input is wanted (the client asked to close, bad input, draining); later input is
  // ignored, and the connection is to be closed once closing().
  // Parsing stops, the rest of the input kept, blocked() until resume(), once output()
  // holds kOutputCap bytes or the session has as many requests waiting for answers as it
  // takes: a client that does not read its answers gets no more work done for it.
  virtual bool feed(std::string_view data) = 0;
  virtual bool blocked() const noexcept = 0;
  // Goes on parsing what blocked() held back (after output() was written, or answers
  // landed). As feed().
  virtual bool resume() = 0;
  static constexpr std::size_t kOutputCap = 16 * 1024;
  // The bytes it holds: output not taken yet, input held back, requests arriving.
  virtual std::size_t buffered() const noexcept = 0;
  // The connection's time is up (the request timeout, or owed_wait_ms()). True, and
  // closing() after, when the client was the slow one (or idle) and the connection is to
  // end; false when the connection goes on.
  virtual bool timed_out() = 0;
  // How long the transport waits for the answers owed (after the last request received):
  // `otherwise` (the request timeout) unless the answers have waits of their own.
  virtual std::uint64_t owed_wait_ms(std::uint64_t otherwise) const noexcept = 0;
  // How long the transport waits for the request arriving (from now): `otherwise` (the
  // request timeout) unless it began earlier than the timer starts (a stream of several).
  virtual std::uint64_t receiving_wait_ms(std::uint64_t otherwise) const noexcept {
    return otherwise;
  }
  // How long the transport waits while the connection is idle (no request arriving, none
  // owed), from now: `otherwise` (the idle timeout) unless a stream the session keeps open
  // has a deadline sooner (0: one is due). timed_out() then ends what is due; it says the
  // connection goes on while such streams remain, so they are not ended by the idle
  // timeout, though the connection counts as idle (the first to go at --max-connections).
  virtual std::uint64_t idle_wait_ms(std::uint64_t otherwise) const noexcept {
    return otherwise;
  }
  // The client sends no more: closing() once the answers owed are written.
  virtual void input_ended() = 0;
  // Shutting down: no new requests, the ones in progress answered. True when the
  // connection can go now (closing()).
  virtual bool drain() = 0;
  // Called (on the loop thread) when an answer has landed from outside feed() and
  // resume(): output() may have grown, closing() turned true, or blocked() parsing be
  // ready to go on. The transport flushes then. It must not destroy the session.
  virtual void on_answer(std::function<void()> callback) = 0;
  virtual std::string& output() noexcept = 0;
  // A request is arriving (some of it has come, not all), or, for a protocol that must
  // greet first, the greeting has not come.
  virtual bool mid_request() const noexcept = 0;
  // No more input is read and every answer owed is in output().
  virtual bool closing() const noexcept = 0;
  // Requests received whole (answered or not).
  virtual std::uint64_t requests() const noexcept = 0;
  // Requests waiting for answers.
  virtual std::size_t pending() const noexcept = 0;
  // What the request timeout now runs for: while it names the same thing, a timer already
  // running goes on; a new value starts it again. Only while mid_request(), no request has
  // come yet, or pending().
  virtual std::uint64_t deadline_key() const noexcept {
    const bool receiving = mid_request() || requests() == 0;
    return 2 * requests() + (receiving ? 0 : 1);
  }
  virtual void set_peer(std::string peer) = 0;
};

}  // namespace ratewin::server
