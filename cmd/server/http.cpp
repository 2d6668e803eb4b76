#include "http.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "text.h"

namespace ratewin::server {

namespace {

const http_parser_settings kSettings = [] {
  http_parser_settings s;
  http_parser_settings_init(&s);
  return s;
}();

HttpSession& session_of(http_parser* p) { return *static_cast<HttpSession*>(p->data); }

}  // namespace

void json_error(Response& response, int status, std::string_view message) {
  response.status = status;
  response.body = "{\"error\":";
  append_json_string(response.body, message);
  response.body += "}\n";
}

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
  headers.clear();
  body.clear();
  keep_alive = true;
}

void Response::clear() noexcept {
  status = 200;
  content_type = "application/json";
  headers.clear();
  body.clear();
}

std::string_view reason(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

// ---------------------------------------------------------------------------------------
// Deferred answers

Responder::Responder(Responder&& other) noexcept
    : link_(std::move(other.link_)), sequence_(other.sequence_) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    drop();
    link_ = std::move(other.link_);
    sequence_ = other.sequence_;
  }
  return *this;
}

Responder::~Responder() { drop(); }

void Responder::drop() noexcept {
  if (!waiting()) return;
  Response response;
  try {
    json_error(response, 500, "internal error: the request was left unanswered");
    respond(std::move(response));
  } catch (const std::exception&) {
    link_.reset();  // out of memory: the connection's timer closes it
  }
}

void Responder::respond(Response response) {
  const std::shared_ptr<Link> link = std::move(link_);
  if (link != nullptr && link->session != nullptr)
    link->session->answer(sequence_, std::move(response));
}

bool Responder::waiting() const noexcept {
  if (link_ == nullptr || link_->session == nullptr) return false;
  const HttpSession& s = *link_->session;
  return sequence_ >= s.first_sequence_ && sequence_ - s.first_sequence_ < s.queue_.size() &&
         !s.queue_[sequence_ - s.first_sequence_].answered;
}

Responder Reply::defer() {
  if (deferred_) throw std::logic_error("Reply::defer() called twice for one request");
  deferred_ = true;
  return session_.defer(form_);
}

Responder HttpSession::defer(Reply::Form form) {
  queue_.push_back(Slot{{}, form, false, false});
  return Responder(link_, first_sequence_ + queue_.size() - 1);
}

void HttpSession::answer(std::uint64_t sequence, Response&& response) {
  if (sequence < first_sequence_ || sequence - first_sequence_ >= queue_.size()) return;
  Slot& slot = queue_[sequence - first_sequence_];
  if (slot.answered) return;
  slot.response = std::move(response);
  slot.answered = true;
  emit_ready();
  if (parsing_ == 0 && on_answer_) on_answer_();
}

void HttpSession::emit_ready() {
  while (!queue_.empty() && queue_.front().answered) {
    Slot& slot = queue_.front();
    if (slot.interim) {
      output_ += "HTTP/1.1 100 Continue\r\n\r\n";
    } else {
      // Once no more input is read, the last response says so.
      Reply::Form form = slot.form;
      if (input_done_ && queue_.size() == 1) form.keep_alive = false;
      write(slot.response, form);
    }
    queue_.pop_front();
    ++first_sequence_;
  }
}

void HttpSession::dispatch(Reply::Form form) {
  response_.clear();
  Reply reply(*this, response_, form);
  try {
    handler_.handle(request_, peer_, reply);
  } catch (const std::exception&) {
    if (!reply.deferred()) {
      response_.clear();
      json_error(response_, 500, "internal error");
    }
  }
  if (reply.deferred()) return;  // its slot is in the queue
  if (queue_.empty()) {
    write(response_, form);
  } else {
    queue_.push_back(Slot{std::move(response_), form, true, false});
  }
}

// ---------------------------------------------------------------------------------------

HttpSession::HttpSession(RequestHandler& handler, std::string peer, HttpLimits limits)
    : handler_(handler),
      peer_(std::move(peer)),
      limits_(limits),
      link_(std::make_shared<Responder::Link>(Responder::Link{this})) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

HttpSession::~HttpSession() { link_->session = nullptr; }

bool HttpSession::resume() {
  if (!blocked_) return !input_done_;
  if (queue_.size() >= limits_.max_pending) return true;  // still waiting for answers
  blocked_ = false;
  http_parser_pause(&parser_, 0);
  const std::string input = std::move(held_);
  held_.clear();
  return feed(input);
}

bool HttpSession::feed(std::string_view data) {
  if (input_done_) return false;
  if (blocked_) {
    held_.append(data);
    return true;
  }
  struct Parsing {
    int& depth;
    explicit Parsing(int& d) : depth(d) { ++depth; }
    ~Parsing() { --depth; }
    Parsing(const Parsing&) = delete;
    Parsing& operator=(const Parsing&) = delete;
  } parsing(parsing_);
  static const http_parser_settings settings = [] {
    http_parser_settings s = kSettings;
    s.on_message_begin = on_message_begin;
    s.on_url = on_url;
    s.on_header_field = on_header_field;
    s.on_header_value = on_header_value;
    s.on_headers_complete = on_headers_complete;
    s.on_body = on_body;
    s.on_message_complete = on_message_complete;
    return s;
  }();
  const std::size_t parsed = http_parser_execute(&parser_, &settings, data.data(), data.size());
  const http_errno err = HTTP_PARSER_ERRNO(&parser_);
  if (input_done_) return false;  // answered and closing (an error, the last request)
  if (err == HPE_PAUSED) {
    // Paused by on_message_complete with output_ full or too many answers owed: the rest
    // waits for resume().
    held_.assign(data.substr(parsed));
    return true;
  }
  if (err != HPE_OK) {
    if (error_status_ != 0) {
      fail(error_status_, error_status_ == 431   ? "request headers too large"
                          : error_status_ == 413 ? "request body too large"
                                                 : "request line too long");
    } else if (err == HPE_HEADER_OVERFLOW) {
      fail(431, "request headers too large");
    } else {
      fail(400, http_errno_description(err));
    }
    return false;
  }
  if (parser_.upgrade != 0 || parsed != data.size()) {
    // No protocol upgrades (the request was answered; what follows is not HTTP).
    input_done_ = true;
    return false;
  }
  return true;
}

void HttpSession::timed_out() {
  if (closing()) return;
  if (!queue_.empty()) {
    // The answers owed did not come in time: none will be written.
    first_sequence_ += queue_.size();
    queue_.clear();
  } else if (in_message_) {
    fail(408, "request not received in time");
  }
  input_done_ = true;
  in_message_ = false;
}

void HttpSession::input_ended() {
  input_done_ = true;
  in_message_ = false;
  blocked_ = false;
  held_.clear();
  emit_ready();  // a last response already answered now says "Connection: close"
}

bool HttpSession::drain() {
  draining_ = true;
  if (!in_message_) {
    input_done_ = true;
    blocked_ = false;
    held_.clear();
  }
  return closing();
}

bool HttpSession::take_header_bytes(std::size_t n) {
  header_bytes_ += n;
  if (header_bytes_ <= limits_.max_header_bytes) return true;
  error_status_ = 431;
  return false;
}

void HttpSession::fail(int status, std::string_view message) {
  response_.clear();
  json_error(response_, status, message);
  input_done_ = true;
  in_message_ = false;
  const Reply::Form form{false, false, false};
  if (queue_.empty()) {
    write(response_, form);
  } else {
    queue_.push_back(Slot{std::move(response_), form, true, false});
  }
}

void HttpSession::write(const Response& response, Reply::Form form) {
  const bool keep_alive = form.keep_alive;
  std::string& out = output_;
  out += "HTTP/1.1 ";
  append_number(out, static_cast<std::uint64_t>(response.status));
  out += ' ';
  out += reason(response.status);
  out += "\r\nContent-Type: ";
  out += response.content_type;
  out += "\r\nContent-Length: ";
  append_number(out, response.body.size());
  for (const auto& [name, value] : response.headers) {
    out += "\r\n";
    out += name;
    out += ": ";
    out += value;
  }
  out += !keep_alive   ? "\r\nConnection: close\r\n\r\n"
         : form.http10 ? "\r\nConnection: keep-alive\r\n\r\n"
                       : "\r\n\r\n";
  if (!form.head) out += response.body;
}

int HttpSession::on_message_begin(http_parser* p) {
  HttpSession& s = session_of(p);
  s.in_message_ = true;
  s.in_value_ = false;
  s.header_bytes_ = 0;
  s.error_status_ = 0;
  s.request_.clear();
  return 0;
}

int HttpSession::on_url(http_parser* p, const char* at, std::size_t length) {
  HttpSession& s = session_of(p);
  if (!s.take_header_bytes(length)) return 1;
  if (s.request_.target.size() + length > s.limits_.max_header_bytes / 2) {
    s.error_status_ = 414;
    return 1;
  }
  s.request_.target.append(at, length);
  return 0;
}

int HttpSession::on_header_field(http_parser* p, const char* at, std::size_t length) {
  HttpSession& s = session_of(p);
  if (!s.take_header_bytes(length)) return 1;
  auto& headers = s.request_.headers;
  if (s.in_value_ || headers.empty()) {
    if (headers.size() == s.limits_.max_headers) {
      s.error_status_ = 431;
      return 1;
    }
    headers.emplace_back();
    s.in_value_ = false;
  }
  std::string& name = headers.back().first;
  for (std::size_t i = 0; i < length; ++i)
    name.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(at[i]))));
  return 0;
}

int HttpSession::on_header_value(http_parser* p, const char* at, std::size_t length) {
  HttpSession& s = session_of(p);
  if (!s.take_header_bytes(length)) return 1;
  if (s.request_.headers.empty()) return 0;
  s.in_value_ = true;
  s.request_.headers.back().second.append(at, length);
  return 0;
}

int HttpSession::on_headers_complete(http_parser* p) {
  HttpSession& s = session_of(p);
  s.request_.method = http_method_str(static_cast<http_method>(p->method));
  if ((p->flags & F_CONTENTLENGTH) != 0 && p->content_length > s.limits_.max_body_bytes) {
    s.error_status_ = 413;
    return -1;  // the parser stops with an error; feed() answers
  }
  // A client that asks before sending its body is told to go ahead (it would otherwise
  // wait a while, then send it anyway).
  const bool has_body = (p->flags & F_CHUNKED) != 0 ||
                        ((p->flags & F_CONTENTLENGTH) != 0 && p->content_length > 0);
  if (has_body && p->http_minor >= 1) {
    if (iequals(s.request_.header("expect"), "100-continue")) {
      // Behind answers still owed it waits its turn (the client would take it for theirs).
      if (s.queue_.empty()) {
        s.output_ += "HTTP/1.1 100 Continue\r\n\r\n";
      } else {
        s.queue_.push_back(Slot{{}, {}, true, true});
      }
    }
  }
  return 0;
}

int HttpSession::on_body(http_parser* p, const char* at, std::size_t length) {
  HttpSession& s = session_of(p);
  if (s.request_.body.size() + length > s.limits_.max_body_bytes) {  // chunked
    s.error_status_ = 413;
    return 1;
  }
  s.request_.body.append(at, length);
  return 0;
}

int HttpSession::on_message_complete(http_parser* p) {
  HttpSession& s = session_of(p);
  s.in_message_ = false;
  ++s.requests_;
  const bool keep_alive = http_should_keep_alive(p) != 0 && !s.draining_ && p->upgrade == 0;
  s.request_.keep_alive = keep_alive;
  if (!keep_alive) s.input_done_ = true;  // before dispatch: an answer at once is the last
  s.dispatch(Reply::Form{keep_alive, p->method == HTTP_HEAD, p->http_major == 1 && p->http_minor == 0});
  if (!keep_alive) {
    http_parser_pause(p, 1);  // the rest of the input is not read
  } else if (s.output_.size() >= kOutputCap || s.queue_.size() >= s.limits_.max_pending) {
    s.blocked_ = true;
    http_parser_pause(p, 1);
  }
  return 0;
}

}  // namespace ratewin::server
