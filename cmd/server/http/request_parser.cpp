#include "http/request_parser.h"

#include <algorithm>

#include "common/text.h"
#include "http/target.h"

namespace ratewin::server {

namespace {

// At most this many empty lines before a request line (RFC 9112 2.2: a server SHOULD
// ignore at least one, which some clients send after a body).
constexpr std::size_t kMaxEmptyLines = 16;
constexpr std::size_t kMaxChunkLine = 1024;

bool token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), token_char); }

bool whitespace(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && whitespace(s.front())) s.remove_prefix(1);
  while (!s.empty() && whitespace(s.back())) s.remove_suffix(1);
  return s;
}

// Calls f(element) for each element of a comma-separated field value, trimmed.
template <typename F>
void each_element(std::string_view value, F&& f) {
  while (true) {
    const std::size_t comma = value.find(',');
    f(trim(value.substr(0, comma)));
    if (comma == std::string_view::npos) return;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

std::string_view Request::header(std::string_view name) const noexcept {
  for (const auto& [n, v] : headers)
    if (n == name) return v;
  return {};
}

std::string_view Request::last_header(std::string_view name) const noexcept {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it)
    if (it->first == name) return it->second;
  return {};
}

void Request::clear() noexcept {
  method.clear();
  target.clear();
  path.clear();
  query.clear();
  headers.clear();
  body.clear();
  keep_alive = true;
  http10 = false;
}

bool RequestParser::mid_request() const noexcept {
  if (stage_ == Stage::failed) return false;
  return stage_ != Stage::start_line || (!line_.empty() && line_ != "\r");
}

RequestParser::Event RequestParser::fail(int status, std::string_view why) {
  stage_ = Stage::failed;
  error_status_ = status;
  error_ = why;
  line_.clear();
  return Event::error;
}

std::size_t RequestParser::line_limit() const noexcept {
  switch (stage_) {
    case Stage::start_line:
      return limits_.max_header_bytes;
    case Stage::headers:
    case Stage::trailers:
      return limits_.max_header_bytes - std::min(head_bytes_, limits_.max_header_bytes);
    default:
      return kMaxChunkLine;
  }
}

RequestParser::Event RequestParser::parse(std::string_view input, std::size_t& used) {
  std::size_t pos = 0;
  const auto done = [&](Event e) {
    used = pos;
    return e;
  };
  if (stage_ == Stage::failed) return done(Event::error);
  while (true) {
    switch (stage_) {
      case Stage::failed:
        return done(Event::error);
      case Stage::body:
      case Stage::chunk_data: {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, input.size() - pos));
        request_.body.append(input.substr(pos, n));
        pos += n;
        remaining_ -= n;
        if (remaining_ > 0) return done(Event::more);
        if (stage_ == Stage::body) return done(complete());
        stage_ = Stage::chunk_end;
        crlf_ = 0;
        break;
      }
      case Stage::chunk_end:
        for (; crlf_ < 2; ++crlf_) {
          if (pos == input.size()) return done(Event::more);
          if (input[pos++] != "\r\n"[crlf_])
            return done(fail(400, "chunk data not followed by CRLF"));
        }
        stage_ = Stage::chunk_size;
        break;
      default: {
        const std::string_view rest = input.substr(pos);
        const std::size_t newline = rest.find('\n');
        const std::size_t take = std::min(newline, rest.size());
        if (line_.size() + take > line_limit()) {
          switch (stage_) {
            case Stage::start_line:
              // A target begun (after the method's space) is what made it long.
              return done(line_.find(' ') != std::string::npos ||
                                  rest.substr(0, take).find(' ') != std::string_view::npos
                              ? fail(414, "request line too long")
                              : fail(400, "malformed request line"));
            case Stage::headers:
            case Stage::trailers:
              return done(fail(431, "request headers too large"));
            default:
              return done(fail(400, "chunk size line too long"));
          }
        }
        // A line whole in the input is read where it is; one cut by the input's end is
        // kept until the rest comes.
        std::string_view text = rest.substr(0, take);
        if (!line_.empty() || newline == std::string_view::npos) {
          line_.append(text);
          if (newline == std::string_view::npos) {
            pos = input.size();
            return done(Event::more);
          }
          text = line_;
        }
        pos += take + 1;
        if (text.empty() || text.back() != '\r')
          return done(fail(400, "a line ending in a bare LF (lines end in CRLF)"));
        text.remove_suffix(1);
        if (text.find('\r') != std::string_view::npos)
          return done(fail(400, "a bare CR in a line"));
        const Event e = line(text);
        line_.clear();
        if (e != Event::more) return done(e);
        break;
      }
    }
  }
}

RequestParser::Event RequestParser::line(std::string_view text) {
  switch (stage_) {
    case Stage::start_line:
      return start_line(text);
    case Stage::headers:
      head_bytes_ += text.size() + 2;
      return text.empty() ? end_of_head() : field_line(text, true);
    case Stage::trailers:
      head_bytes_ += text.size() + 2;
      return text.empty() ? complete() : field_line(text, false);
    default:
      return chunk_size(text);
  }
}

RequestParser::Event RequestParser::start_line(std::string_view text) {
  if (text.empty()) {
    if (++empty_lines_ > kMaxEmptyLines) return fail(400, "too many empty lines before a request");
    return Event::more;
  }
  if (fresh_) request_.clear();
  fresh_ = false;
  head_bytes_ = text.size() + 2;
  const std::size_t first = text.find(' ');
  if (first == std::string_view::npos || !token(text.substr(0, first)))
    return fail(400, "malformed request line");
  if (!is_method(text.substr(0, first)))
    return fail(400, "a method in lower case (methods are case-sensitive: GET, not get)");
  const std::string_view rest = text.substr(first + 1);
  const std::size_t second = rest.find(' ');
  const std::string_view target = rest.substr(0, second);
  if (target.empty() ||
      !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; }))
    return fail(400, "malformed request target");
  if (target.size() > limits_.max_header_bytes / 2) return fail(414, "request target too long");
  if (second == std::string_view::npos) {
    return target.starts_with('/') ? fail(505, "HTTP/0.9 is not supported")
                                   : fail(400, "malformed request line");
  }
  const std::string_view version = rest.substr(second + 1);
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
    return fail(400, "malformed HTTP version");
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
    return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  request_.method.assign(text.substr(0, first));
  request_.target.assign(target);
  request_.http10 = version[7] == '0';
  const std::string_view problem =
      parse_target(request_.method, target, request_.path, request_.query);
  if (!problem.empty()) return fail(400, problem);
  stage_ = Stage::headers;
  return Event::more;
}

RequestParser::Event RequestParser::field_line(std::string_view text, bool keep) {
  if (whitespace(text.front()))
    return fail(400, "a line starting with whitespace (obs-fold) is not accepted");
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return fail(400, "a header line without a colon");
  const std::string_view name = text.substr(0, colon);
  if (!token(name)) {
    return fail(400, std::any_of(name.begin(), name.end(), whitespace)
                         ? "whitespace before a header's colon"
                         : "an invalid header name");
  }
  const std::string_view value = trim(text.substr(colon + 1));
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\t') || byte == 0x7f)
      return fail(400, "a control character in a header value");
  }
  auto& headers = request_.headers;
  if (headers.size() >= limits_.max_headers) return fail(431, "too many header lines");
  if (!keep) return Event::more;  // a trailer: checked, then dropped
  headers.emplace_back();
  std::string& lower = headers.back().first;
  lower.resize(name.size());
  std::transform(name.begin(), name.end(), lower.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
  headers.back().second.assign(value);
  return Event::more;
}

RequestParser::Event RequestParser::end_of_head() {
  Request& r = request_;
  std::size_t hosts = 0;
  std::size_t codings = 0;
  bool chunked = false;
  bool has_length = false;
  std::uint64_t length = 0;
  bool close = false;
  bool keep_alive = false;
  for (const auto& [name, value] : r.headers) {
    if (name == "host") {
      if (++hosts > 1) return fail(400, "more than one Host");
      if (!value.empty() && !valid_authority(value)) return fail(400, "an invalid Host");
    } else if (name == "transfer-encoding") {
      ++codings;
      chunked = iequals(value, "chunked");
    } else if (name == "content-length") {
      bool bad = false;
      each_element(value, [&](std::string_view element) {
        std::uint64_t n = 0;
        if (element.empty() || element.size() > 19) bad = true;
        for (const char c : element) {
          if (c < '0' || c > '9') bad = true;
          n = n * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (has_length && n != length) bad = true;
        has_length = true;
        length = n;
      });
      if (bad) return fail(400, "an invalid or inconsistent Content-Length");
    } else if (name == "connection") {
      each_element(value, [&](std::string_view option) {
        if (iequals(option, "close")) close = true;
        if (iequals(option, "keep-alive")) keep_alive = true;
      });
    }
  }
  if (hosts == 0 && !r.http10) return fail(400, "an HTTP/1.1 request without Host");
  if (codings != 0) {
    if (r.http10) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (has_length) return fail(400, "both Transfer-Encoding and Content-Length");
    if (codings > 1 || !chunked)
      return fail(400, "a Transfer-Encoding other than a single \"chunked\"");
  }
  if (has_length && length > limits_.max_body_bytes) return fail(413, "request body too large");
  r.keep_alive = r.http10 ? keep_alive && !close : !close;
  remaining_ = length;
  stage_ = chunked ? Stage::chunk_size : length > 0 ? Stage::body : Stage::start_line;
  if (stage_ == Stage::start_line) return complete();
  // A client that asks before sending its body is told to go ahead (it would otherwise
  // wait a while, then send it anyway).
  if (!r.http10 && iequals(trim(r.header("expect")), "100-continue")) return Event::proceed;
  return Event::more;
}

RequestParser::Event RequestParser::chunk_size(std::string_view text) {
  std::size_t i = 0;
  std::uint64_t size = 0;
  const std::uint64_t room = limits_.max_body_bytes - request_.body.size();
  for (; i < text.size() && hex_digit(text[i]) >= 0; ++i) {
    size = size * 16 + static_cast<std::uint64_t>(hex_digit(text[i]));
    if (size > room) return fail(413, "request body too large");
  }
  if (i == 0) return fail(400, "an invalid chunk size");
  // Extensions (";name=value", ignored) may follow, after optional whitespace.
  std::size_t j = i;
  while (j < text.size() && whitespace(text[j])) ++j;
  if (j < text.size() && text[j] != ';') return fail(400, "an invalid chunk size");
  if (j == text.size() && j != i) return fail(400, "an invalid chunk size");
  for (; j < text.size(); ++j) {
    const auto byte = static_cast<unsigned char>(text[j]);
    if ((byte < 0x20 && text[j] != '\t') || byte == 0x7f)
      return fail(400, "a control character in a chunk extension");
  }
  if (size == 0) {
    stage_ = Stage::trailers;
  } else {
    remaining_ = size;
    stage_ = Stage::chunk_data;
  }
  return Event::more;
}

RequestParser::Event RequestParser::complete() {
  stage_ = Stage::start_line;
  fresh_ = true;
  empty_lines_ = 0;
  head_bytes_ = 0;
  return Event::request;
}

bool is_method(std::string_view text) {
  return token(text) &&
         std::none_of(text.begin(), text.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace ratewin::server
