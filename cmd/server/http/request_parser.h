// request_parser.h: strict HTTP/1.1 request framing (RFC 9112), incremental and
// independent of sockets: bytes in, complete requests out. What a lenient parser would
// let pass as something else is refused, the connection then closed (see docs/server.md,
// "What it refuses, and why"):
//   - lines end in CRLF: a bare LF or a bare CR anywhere in the head, a chunk line or the
//     trailers is 400, and so is chunk data not followed by exactly CRLF;
//   - request line: method SP target SP HTTP/x.y with single spaces; a version other
//     than 1.0 and 1.1 is 505 (also a request line without one, HTTP/0.9 style), a
//     malformed one 400; the target as target.h reads it;
//   - header lines: a name (a token) then ':' at once (whitespace before the colon is
//     400, RFC 9112 5.1), a value without control bytes; a line starting with whitespace
//     (obs-fold) is 400;
//   - HTTP/1.1 with no Host, any request with more than one, or a Host that is no
//     authority (target.h) is 400;
//   - the body's length beyond doubt: Transfer-Encoding together with Content-Length,
//     Content-Lengths that differ or are not decimal digits, a transfer coding other
//     than one "chunked", or any in HTTP/1.0, is 400 (request smuggling);
//   - trailers of a chunked body are read and checked like header lines, then dropped:
//     they never become headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratewin::server {

struct RequestLimits {
  std::size_t max_header_bytes = 16 * 1024;  // request line and headers: more is 431; a
                                             // target over half of it is 414
  std::size_t max_body_bytes = 64 * 1024;    // more is 413
  std::size_t max_headers = 100;             // header and trailer lines: more is 431
};

struct Request {
  std::string method;
  std::string target;  // as sent
  // The target's path in canonical form (path.h: decoded, dot segments resolved), which
  // the rules match; "*" for "OPTIONS *". Absolute-form targets are reduced to it.
  std::string path;
  std::string query;                                         // after '?', as sent; empty if none
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;
  bool keep_alive = true;
  bool http10 = false;  // HTTP/1.0 (else 1.1)

  // The first value of a header (name in lower case), empty if absent.
  std::string_view header(std::string_view name) const noexcept;
  // The last value of a header sent on several lines (where the latest line counts,
  // as with X-Forwarded-For appended by a proxy), empty if absent.
  std::string_view last_header(std::string_view name) const noexcept;
  void clear() noexcept;
};

class RequestParser {
 public:
  explicit RequestParser(const RequestLimits& limits) : limits_(limits) {}

  enum class Event {
    more,     // all the input was taken; no request is complete yet
    proceed,  // a request's head asked for "100 Continue" before its body
    request,  // request() is complete
    error,    // error_status() and error() say why; nothing more is parsed
  };
  // Parses `input` up to the next event; `used` is how much of it was taken (all of it
  // for Event::more). A line cut by the end of the input is kept until the next call.
  Event parse(std::string_view input, std::size_t& used);

  // The request, complete after Event::request (and its head after Event::proceed),
  // until the next parse().
  Request& request() noexcept { return request_; }
  int error_status() const noexcept { return error_status_; }
  std::string_view error() const noexcept { return error_; }
  // Bytes it holds for a request still arriving (a line begun, a body).
  std::size_t buffered() const noexcept { return line_.capacity() + request_.body.capacity(); }
  // Some bytes of a request have arrived (empty lines between requests do not count).
  bool mid_request() const noexcept;

 private:
  enum class Stage {
    start_line,
    headers,
    body,
    chunk_size,
    chunk_data,
    chunk_end,
    trailers,
    failed
  };

  Event fail(int status, std::string_view why);
  // A complete line (without its CRLF) of the current stage.
  Event line(std::string_view text);
  Event start_line(std::string_view text);
  Event field_line(std::string_view text, bool keep);
  Event end_of_head();
  Event chunk_size(std::string_view text);
  Event complete();
  // The longest a line of the current stage may be, and the status past it.
  std::size_t line_limit() const noexcept;

  RequestLimits limits_;
  Request request_;
  Stage stage_ = Stage::start_line;
  bool fresh_ = true;            // request_ is to be cleared when the next request begins
  std::string line_;             // a line begun but not ended
  std::size_t head_bytes_ = 0;   // of this request's head (and trailers) so far
  std::size_t empty_lines_ = 0;  // before this request's line
  std::uint64_t remaining_ = 0;  // bytes still to come of the body or the chunk
  int crlf_ = 0;                 // of the CRLF after chunk data, seen so far
  int error_status_ = 0;
  std::string_view error_;
};

// A request method as this server takes one: a token (RFC 9110 5.6.2) with no lower-case
// letter. Methods are case-sensitive and every registered one is upper case: "get" is no
// GET, and a limit on GET must not be escaped by writing it so (the request is refused
// with 400 instead). For the request line, and for the original method a forward-auth
// check names.
bool is_method(std::string_view text);

}  // namespace ratewin::server
