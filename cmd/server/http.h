// HTTP/1.1 framing for one connection, independent of sockets: bytes in, responses out.
// Requests are parsed by Debian's http-parser; each complete request is answered at
// once, in order, so pipelined requests get their responses in the order they came.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratewin::server {

struct HttpLimits {
  std::size_t max_header_bytes = 16 * 1024;  // request line and headers: more is 431
  std::size_t max_body_bytes = 64 * 1024;    // more is 413
  std::size_t max_headers = 100;             // more is 431
};

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
  bool keep_alive = true;

  // The first value of a header (name in lower case), empty if absent.
  std::string_view header(std::string_view name) const noexcept;
  // The last value of a header sent on several lines (where the latest line counts,
  // as with X-Forwarded-For appended by a proxy), empty if absent.
  std::string_view last_header(std::string_view name) const noexcept;
  void clear() noexcept;
};

struct Response {
  int status = 200;
  std::string_view content_type = "application/json";
  std::vector<std::pair<std::string_view, std::string>> headers;  // names are static strings
  std::string body;

  void clear() noexcept;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Answers a complete request. `peer` is the client's address.
  virtual void handle(const Request& request, std::string_view peer, Response& response) = 0;
};

// Sets an error response: the status and {"error": message}.
void json_error(Response& response, int status, std::string_view message);

// The reason phrase of a status this server sends.
std::string_view reason(int status) noexcept;

class HttpSession {
 public:
  HttpSession(RequestHandler& handler, std::string peer, HttpLimits limits = {});
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // Parses what arrived and appends the responses of every request it completes to
  // output(). False once the connection is to be closed after output() is written
  // (the client asked for it, bad input, or draining); later input is ignored.
  // Once output() holds kOutputCap bytes, parsing stops and the rest of the input is
  // kept: blocked() until resume() is called, after output() has been written (a client
  // pipelining requests without reading the responses gets no more work done for it).
  bool feed(std::string_view data);
  bool blocked() const noexcept { return blocked_; }
  bool resume();
  static constexpr std::size_t kOutputCap = 256 * 1024;
  // Called when the client has sent nothing for too long: a partial request is answered
  // 408. The connection is to be closed after output() is written.
  void timed_out();
  // Shutting down: the response to the request in progress says "Connection: close"
  // and is the last. True when no request is in progress (the connection can go now).
  bool drain();

  std::string& output() noexcept { return output_; }
  // Some bytes of a request have arrived, but not all of it.
  bool mid_request() const noexcept { return in_message_; }
  bool closing() const noexcept { return closing_; }
  std::uint64_t requests() const noexcept { return requests_; }
  const std::string& peer() const noexcept { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }

 private:
  static int on_message_begin(http_parser* p);
  static int on_url(http_parser* p, const char* at, std::size_t length);
  static int on_header_field(http_parser* p, const char* at, std::size_t length);
  static int on_header_value(http_parser* p, const char* at, std::size_t length);
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, std::size_t length);
  static int on_message_complete(http_parser* p);

  // Counts header bytes; false (and the error to answer) past the limits.
  bool take_header_bytes(std::size_t n);
  // Answers an error and closes.
  void fail(int status, std::string_view message);
  // `head`: the response to a HEAD request, without its body. `http10`: an HTTP/1.0
  // request, whose keep-alive must be announced.
  void write(const Response& response, bool keep_alive, bool head = false, bool http10 = false);

  RequestHandler& handler_;
  std::string peer_;
  HttpLimits limits_;
  http_parser parser_{};
  Request request_;
  Response response_;
  std::string output_;
  std::string pending_;  // input not parsed yet while blocked_
  bool blocked_ = false;
  std::size_t header_bytes_ = 0;
  int error_status_ = 0;  // set by a callback that stopped the parser
  bool in_message_ = false;
  bool in_value_ = false;
  bool closing_ = false;
  bool draining_ = false;
  std::uint64_t requests_ = 0;
};

}  // namespace ratewin::server
