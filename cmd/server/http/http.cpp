#include "http/http.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "common/text.h"

namespace ratewin::server {

void json_error(Response& response, int status, std::string_view message) {
  response.status = status;
  json_body(response, [&](JsonWriter& w) { w.key("error").string(message); });
}

void Response::clear() noexcept {
  status = 200;
  content_type = "application/json";
  headers.clear();
  fields.clear();
  body.clear();
}

std::string_view reason(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
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
    case 505: return "HTTP Version Not Supported";
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

Responder Reply::defer() { return defer_as(std::nullopt, 0); }

Responder Reply::defer(std::uint64_t wait_ms, Response late) {
  return defer_as(std::move(late), wait_ms);
}

Responder Reply::defer_as(std::optional<Response> late, std::uint64_t wait_ms) {
  if (deferred_) throw std::logic_error("Reply::defer() called twice for one request");
  deferred_ = true;
  return session_.defer(form_, std::move(late), wait_ms);
}

Responder HttpSession::defer(Reply::Form form, std::optional<Response> late,
                             std::uint64_t wait_ms) {
  queue_.push_back(Slot{{}, form, false, false, std::move(late), wait_ms});
  return Responder(link_, first_sequence_ + queue_.size() - 1);
}

std::uint64_t HttpSession::owed_wait_ms(std::uint64_t otherwise) const noexcept {
  std::optional<std::uint64_t> longest;
  for (const Slot& slot : queue_) {
    if (slot.answered) continue;
    const std::uint64_t wait = slot.late ? slot.wait_ms : otherwise;
    longest = std::max(longest.value_or(0), wait);
  }
  return longest.value_or(otherwise);
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
    handler_.handle(parser_.request(), peer_, reply);
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
    queue_.push_back(Slot{std::move(response_), form, true, false, std::nullopt, 0});
  }
}

// ---------------------------------------------------------------------------------------

HttpSession::HttpSession(RequestHandler& handler, std::string peer, HttpLimits limits)
    : handler_(handler),
      peer_(std::move(peer)),
      limits_(limits),
      parser_(limits),
      link_(std::make_shared<Responder::Link>(Responder::Link{this})) {}

HttpSession::~HttpSession() { link_->session = nullptr; }

bool HttpSession::resume() {
  if (!blocked_) return !input_done_;
  if (queue_.size() >= limits_.max_pending) return true;  // still waiting for answers
  blocked_ = false;
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
  return parse(data);
}

bool HttpSession::parse(std::string_view input) {
  while (true) {
    std::size_t used = 0;
    const RequestParser::Event event = parser_.parse(input, used);
    input.remove_prefix(used);
    switch (event) {
      case RequestParser::Event::more:
        return true;
      case RequestParser::Event::proceed:
        // Behind answers still owed it waits its turn (the client would take it for theirs).
        if (queue_.empty()) {
          output_ += "HTTP/1.1 100 Continue\r\n\r\n";
        } else {
          queue_.push_back(Slot{{}, {}, true, true, std::nullopt, 0});
        }
        continue;
      case RequestParser::Event::error:
        fail(parser_.error_status(), parser_.error());
        return false;
      case RequestParser::Event::request:
        break;
    }
    ++requests_;
    Request& request = parser_.request();
    request.keep_alive = request.keep_alive && !draining_;
    // Before dispatch: an answer given at once is then the last.
    if (!request.keep_alive) input_done_ = true;
    dispatch(Reply::Form{request.keep_alive, request.method == "HEAD", request.http10});
    if (input_done_) return false;  // the rest of the input is not read
    if (output_.size() >= kOutputCap || queue_.size() >= limits_.max_pending) {
      blocked_ = true;  // the rest waits for resume()
      held_.assign(input);
      return true;
    }
  }
}

bool HttpSession::timed_out() {
  if (closing()) return true;
  // Work of the server's own that outlasted its wait: its late answer stands in.
  bool late = false;
  for (Slot& slot : queue_) {
    if (slot.answered) continue;
    if (!slot.late) break;  // (the answers behind it cannot go before it)
    slot.response = std::move(*slot.late);
    slot.late.reset();
    slot.answered = true;
    late = true;
  }
  emit_ready();
  if (!queue_.empty()) {
    // The answers owed did not come in time: none will be written.
    first_sequence_ += queue_.size();
    queue_.clear();
  } else if (parser_.mid_request()) {
    fail(408, "request not received in time");
  } else if (late) {
    return false;  // every answer owed is given: the client was not the slow one
  }
  input_done_ = true;
  return true;
}

void HttpSession::input_ended() {
  input_done_ = true;
  blocked_ = false;
  held_.clear();
  emit_ready();  // a last response already answered now says "Connection: close"
}

bool HttpSession::drain() {
  draining_ = true;
  if (!parser_.mid_request()) {
    input_done_ = true;
    blocked_ = false;
    held_.clear();
  }
  return closing();
}

void HttpSession::fail(int status, std::string_view message) {
  response_.clear();
  json_error(response_, status, message);
  input_done_ = true;
  const Reply::Form form{false, false, false};
  if (queue_.empty()) {
    write(response_, form);
  } else {
    queue_.push_back(Slot{std::move(response_), form, true, false, std::nullopt, 0});
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
  out += response.fields;
  out += !keep_alive   ? "\r\nConnection: close\r\n\r\n"
         : form.http10 ? "\r\nConnection: keep-alive\r\n\r\n"
                       : "\r\n\r\n";
  if (!form.head) out += response.body;
}

}  // namespace ratewin::server
