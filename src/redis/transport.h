// The byte stream under every Redis connection, blocking or on a loop: TCP or a Unix
// socket, with TLS over TCP for a rediss endpoint (redis/tls.h). The connections speak
// RESP over it (redis/resp.h) and differ only in how they wait for it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "redis/endpoint.h"
#include "redis/status.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class TlsSession;

// What an I/O call on a transport did: moved bytes, or must wait until the socket is
// readable or writable (a non-blocking socket), or the stream ended or failed.
struct Io {
  enum class Result { done, want_read, want_write, closed, failed };
  Result result = Result::done;
  std::size_t bytes = 0;  // moved, when done
};

// A connected (or connecting) stream to a Redis server. Its socket is non-blocking:
// every call returns at once. Not thread-safe: one thread at a time.
class Transport {
 public:
  // Starts connecting to `endpoint` (a host name is resolved here, which may block).
  // Null, with `status` set, when no connection can even be started. A secure endpoint's
  // handshake() includes TLS's, through the endpoint's TLS context.
  static std::unique_ptr<Transport> open(const RedisEndpoint& endpoint, Status& status);
  virtual ~Transport();  // closes the socket
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const noexcept { return fd_; }
  // Moves the connection forward until it is established: done, or what it waits for,
  // or failed (with `status`).
  virtual Io handshake(Status& status);
  // Writes (without SIGPIPE) or reads what the socket takes or holds now. A failure's
  // reason is in `status`.
  virtual Io write(const char* data, std::size_t size, Status& status);
  virtual Io read(char* data, std::size_t size, Status& status);
  // Whether read() may return bytes now although the socket is not readable (TLS read
  // ahead of what was asked for): a reader drains them before it waits on the socket.
  virtual bool buffered() const noexcept { return false; }
  // Whether the stream is still open while no reply is awaited (Redis never speaks first
  // on a connection that has not subscribed): checked without blocking.
  virtual bool idle_alive();
  // The connection's TLS session, if it has one (for tests: whether it resumed).
  virtual const TlsSession* tls() const noexcept { return nullptr; }

  // Waits, for a blocking caller, until the socket is ready for what `wanted` says
  // (want_read or want_write), or `deadline` passes (a timeout status).
  static Status wait(int fd, Io::Result wanted, std::chrono::steady_clock::time_point deadline);

 protected:
  Transport(int fd, std::string where) noexcept : fd_(fd), where_(std::move(where)) {}
  const std::string& where() const noexcept { return where_; }
  // A socket in place of the one it had (a connection tried at another address): fd()
  // may change while handshake() is not yet done.
  void replace_fd(int fd) noexcept;

 private:
  int fd_;
  std::string where_;  // the endpoint, for messages
};

// The status of a connection to `where` not established within `timeout`: still
// connecting, or (`transport` has started TLS) a TLS handshake the server has not
// answered, which is what a plain Redis port does with a TLS hello.
Status connect_timed_out(const Transport* transport, const std::string& where,
                         std::chrono::milliseconds timeout);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
