#include "http/grpc_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace ratewin::server {

namespace {

std::string_view view(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

nghttp2_nv field(std::string_view name, std::string_view value) {
  // (nghttp2 copies names and values when a frame is submitted.)
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

// grpc-timeout: 1 to 8 digits and a unit (H, M, S, m, u, n), in milliseconds (a part of one
// counts as one); none when malformed.
std::optional<std::uint64_t> timeout_ms(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  std::uint64_t amount = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size() - 1, amount);
  if (ec != std::errc() || end != v.data() + v.size() - 1) return std::nullopt;
  switch (v.back()) {
    case 'H': return amount * 3'600'000;
    case 'M': return amount * 60'000;
    case 'S': return amount * 1'000;
    case 'm': return amount;
    case 'u': return (amount + 999) / 1'000;
    case 'n': return (amount + 999'999) / 1'000'000;
    default: return std::nullopt;
  }
}

// A stream's deadline when it has none (a stream kept open without a grpc-timeout).
constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

// A message as gRPC frames it into `out` (its room reused): a flag byte (0: not
// compressed), its length (big-endian), its bytes.
void frame_into(std::string& out, std::string_view message) {
  const auto n = static_cast<std::uint32_t>(message.size());
  out.clear();
  out.reserve(5 + message.size());
  out += '\0';
  for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((n >> shift) & 0xff);
  out += message;
}

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%'.
std::string percent_encoded(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

struct GrpcSession::Stream {
  std::int32_t id = 0;
  std::string path;
  std::string method;
  std::string content_type;
  std::string encoding;  // grpc-encoding
  std::string message;   // the request's DATA, prefix included
  std::optional<std::uint64_t> timeout;  // grpc-timeout, ms
  std::size_t header_bytes = 0;
  std::uint64_t deadline = 0;  // the answer's, on the session's clock
  bool complete = false;       // the request came whole (END_STREAM)
  bool answered = false;       // or refused: what more comes is dropped
  // Answered before its request came whole: once the answer has gone, the client is asked
  // to stop sending (RST_STREAM NO_ERROR; sent with the answer, it would cancel it).
  bool reset_when_answered = false;
  // The response message (its prefix included) and how much of it nghttp2 has taken.
  std::string out;
  std::size_t out_taken = 0;
  // Kept open by send(): its first message has gone with the response's HEADERS, more may
  // follow. `next` is the message after the one nghttp2 is taking (only the latest given:
  // see queue()).
  bool streaming = false;
  std::string next;
  // Once answered, the trailers' status, and its grpc-message (percent-encoded) if not OK.
  GrpcCode code = GrpcCode::ok;
  std::string why;
  std::uint64_t opened_at = 0;  // on the session's clock: its request's deadline runs from it
  std::uint64_t called_at = 0;  // when its request came whole: its call's deadline runs from it
  // Every byte it holds (the session's held_ counts each change of it).
  std::size_t held() const noexcept {
    return sizeof(*this) + message.capacity() + path.capacity() + method.capacity() +
           content_type.capacity() + encoding.capacity() + out.capacity() + next.capacity() +
           why.capacity();
  }
  // The next message of a stream kept open. One not begun yet is replaced (a client whose
  // flow control holds the messages back gets the latest, and costs one message at most);
  // one begun goes whole first, the new one after it.
  void queue(std::string_view m) {
    if (out_taken == out.size()) {
      frame_into(out, m);
      out_taken = 0;
      next.clear();
    } else if (out_taken == 0) {
      frame_into(out, m);
    } else {
      frame_into(next, m);
    }
  }
};

// nghttp2's callbacks, back into the session.
struct GrpcSession::Callbacks {
  static GrpcSession& self(void* user) { return *static_cast<GrpcSession*>(user); }

  static int begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
      self(user).opened(frame->hd.stream_id);
    return 0;
  }

  static int header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t name_size, const std::uint8_t* value, std::size_t value_size,
                    std::uint8_t, void* user) {
    GrpcSession& session = self(user);
    Stream* s = session.stream(frame->hd.stream_id);
    if (s == nullptr) return 0;
    s->header_bytes += name_size + value_size + 32;
    if (s->header_bytes > session.limits_.max_header_list_bytes) {
      // The stream is reset (the header block is still decoded, for HPACK's state).
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: not read
    const std::string_view n = view(name, name_size);
    const std::string_view v = view(value, value_size);
    session.held_ -= s->held();
    if (n == ":path") {
      s->path.assign(v);
    } else if (n == ":method") {
      s->method.assign(v);
    } else if (n == "content-type") {
      s->content_type.assign(v);
    } else if (n == "grpc-encoding") {
      s->encoding.assign(v);
    } else if (n == "grpc-timeout") {
      s->timeout = timeout_ms(v);
    }
    session.held_ += s->held();
    return 0;
  }

  static int data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id,
                        const std::uint8_t* data, std::size_t size, void* user) {
    GrpcSession& session = self(user);
    Stream* s = session.stream(stream_id);
    return s == nullptr ? 0 : session.data(*s, view(data, size));
  }

  static int frame_received(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    GrpcSession& session = self(user);
    if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
      session.greeted_ = true;
      return 0;
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
      return 0;
    Stream* s = session.stream(frame->hd.stream_id);
    if (s == nullptr || s->complete) return 0;
    s->complete = true;
    --session.receiving_;
    if (!s->answered) session.dispatch(*s);
    return 0;
  }

  static int frame_sent(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
      return 0;
    Stream* s = self(user).stream(frame->hd.stream_id);
    if (s != nullptr && s->reset_when_answered)
      nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    return 0;
  }

  static int stream_closed(nghttp2_session*, std::int32_t stream_id, std::uint32_t, void* user) {
    self(user).closed(stream_id);
    return 0;
  }

  // The response messages, as DATA frames; then, once answered, the trailers. A stream
  // kept open with nothing more to send waits (deferred) until a message or its answer
  // resumes it.
  static ssize_t read(nghttp2_session* ng, std::int32_t stream_id, std::uint8_t* buf,
                      std::size_t length, std::uint32_t* flags, nghttp2_data_source*, void* user) {
    GrpcSession& session = self(user);
    Stream* s = session.stream(stream_id);
    if (s == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (s->out_taken == s->out.size() && !s->next.empty()) {
      s->out.swap(s->next);  // (the bytes held stay the same)
      s->next.clear();
      s->out_taken = 0;
    }
    const std::size_t n = std::min(length, s->out.size() - s->out_taken);
    std::memcpy(buf, s->out.data() + s->out_taken, n);
    s->out_taken += n;
    if (s->out_taken < s->out.size()) return static_cast<ssize_t>(n);
    if (!s->answered) return n == 0 ? ssize_t{NGHTTP2_ERR_DEFERRED} : static_cast<ssize_t>(n);
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const std::string status = std::to_string(static_cast<int>(s->code));
    std::vector<nghttp2_nv> trailers = {field("grpc-status", status)};
    if (s->code != GrpcCode::ok) trailers.push_back(field("grpc-message", s->why));
    if (nghttp2_submit_trailer(ng, stream_id, trailers.data(), trailers.size()) != 0)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    session.held_ -= s->held();
    std::string().swap(s->out);
    std::string().swap(s->next);
    std::string().swap(s->why);
    s->out_taken = 0;
    session.held_ += s->held();
    return static_cast<ssize_t>(n);
  }
};

// ---------------------------------------------------------------------------------------
// GrpcResponder

GrpcResponder::GrpcResponder(GrpcResponder&& other) noexcept
    : link_(std::move(other.link_)), stream_(other.stream_) {}

GrpcResponder& GrpcResponder::operator=(GrpcResponder&& other) noexcept {
  if (this != &other) {
    if (waiting()) fail(GrpcCode::internal, "the call was dropped unanswered");
    link_ = std::move(other.link_);
    stream_ = other.stream_;
  }
  return *this;
}

GrpcResponder::~GrpcResponder() {
  if (waiting()) fail(GrpcCode::internal, "the call was dropped unanswered");
}

void GrpcResponder::finish(std::string message) {
  const std::shared_ptr<Link> link = std::move(link_);
  if (link && link->session != nullptr)
    link->session->answer(stream_, GrpcCode::ok, {}, &message);
}

void GrpcResponder::fail(GrpcCode code, std::string_view why) {
  const std::shared_ptr<Link> link = std::move(link_);
  if (link && link->session != nullptr) link->session->answer(stream_, code, why, nullptr);
}

void GrpcResponder::send(std::string message) {
  if (link_ && link_->session != nullptr) link_->session->stream_message(stream_, message);
}

bool GrpcResponder::waiting() const noexcept {
  if (!link_ || link_->session == nullptr) return false;
  const GrpcSession::Stream* s = link_->session->stream(stream_);
  return s != nullptr && !s->answered;
}

// ---------------------------------------------------------------------------------------
// GrpcSession

GrpcSession::GrpcSession(GrpcHandler& handler, std::string peer, GrpcLimits limits)
    : handler_(handler),
      peer_(std::move(peer)),
      limits_(std::move(limits)),
      link_(std::make_shared<GrpcResponder::Link>(GrpcResponder::Link{this})) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Callbacks::begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, Callbacks::header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Callbacks::data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Callbacks::frame_received);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Callbacks::stream_closed);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Callbacks::frame_sent);
  nghttp2_option* options = nullptr;
  nghttp2_option_new(&options);
  nghttp2_option_set_stream_reset_rate_limit(options, limits_.reset_burst,
                                             limits_.resets_per_second);
  // (Closed streams are not kept for priorities: gRPC sends none.)
  nghttp2_option_set_no_closed_streams(options, 1);
  nghttp2_session_server_new2(&session_, callbacks, this, options);
  nghttp2_option_del(options);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<std::uint32_t>(std::min<std::size_t>(limits_.max_header_list_bytes, UINT32_MAX))},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  send();
}

GrpcSession::~GrpcSession() {
  link_->session = nullptr;
  streams_.clear();
  nghttp2_session_del(session_);
}

GrpcSession::Stream* GrpcSession::stream(std::int32_t id) noexcept {
  const auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void GrpcSession::opened(std::int32_t id) {
  auto s = std::make_unique<Stream>();
  s->id = id;
  s->opened_at = now();
  held_ += s->held();
  streams_.emplace(id, std::move(s));
  ++receiving_;
}

void GrpcSession::closed(std::int32_t id) {
  const auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = *it->second;
  if (!s.complete) --receiving_;
  if (s.complete && !s.answered) --(s.streaming ? streaming_ : pending_);
  held_ -= s.held();
  streams_.erase(it);
  if (draining_ && streams_.empty()) input_done_ = true;
}

int GrpcSession::data(Stream& s, std::string_view chunk) {
  if (s.answered) return 0;  // refused already: the rest is dropped
  const bool over_session = s.message.size() + chunk.size() > limits_.max_message_bytes + 5;
  const bool over_process =
      limits_.buffered != nullptr &&
      limits_.buffered->load(std::memory_order_relaxed) + static_cast<std::int64_t>(chunk.size()) >
          limits_.max_buffered;
  if (over_session || over_process) {
    answer(s.id, GrpcCode::resource_exhausted,
           over_session ? "the request message is larger than this server takes ("
                          + std::to_string(limits_.max_message_bytes) + " bytes)"
                        : "the server holds as many arriving requests as it may; try again",
           nullptr);
    return 0;
  }
  held_ -= s.held();
  s.message.append(chunk);
  held_ += s.held();
  return 0;
}

void GrpcSession::dispatch(Stream& s) {
  ++requests_;
  ++pending_;
  s.called_at = now();
  s.deadline = now() + std::min(s.timeout.value_or(limits_.answer_timeout_ms),
                                limits_.answer_timeout_ms);
  GrpcResponder responder(link_, s.id);
  if (s.method != "POST") return responder.fail(GrpcCode::unimplemented, "gRPC calls are POSTs");
  if (s.content_type.compare(0, 16, "application/grpc") != 0)
    return responder.fail(GrpcCode::unknown, "not a gRPC request (content-type " +
                                                 s.content_type + ")");
  if (!s.encoding.empty() && s.encoding != "identity")
    return responder.fail(GrpcCode::unimplemented,
                          "grpc-encoding " + s.encoding + " is not supported (identity only)");
  // One message: a flag byte (0: not compressed), its length (big-endian), its bytes.
  const std::string_view m = s.message;
  if (m.size() < 5) return responder.fail(GrpcCode::internal, "a unary call needs a message");
  const auto byte = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(m[i])); };
  const std::uint32_t size = (byte(1) << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
  if (m[0] != 0)
    return responder.fail(GrpcCode::unimplemented, "compressed messages are not supported");
  if (m.size() - 5 != size)
    return responder.fail(GrpcCode::internal, "a unary call takes exactly one message");
  // (The stream stays while the handler runs, answered or not: it closes only when its
  // answer is sent, after feed() or timed_out() is done with it.)
  handler_.call(GrpcCall{s.path, m.substr(5), peer_}, std::move(responder));
  // The request has been read (a GrpcCall lives until call() returns): an answer owed
  // long, or a stream kept open for hours, holds none of it.
  held_ -= s.held();
  for (std::string* bytes : {&s.message, &s.path, &s.method, &s.content_type, &s.encoding})
    std::string().swap(*bytes);
  held_ += s.held();
}

void GrpcSession::answer(std::int32_t id, GrpcCode code, std::string_view why,
                         std::string* message) {
  Stream* s = stream(id);
  if (s == nullptr || s->answered || (input_done_ && !s->complete)) return;
  s->answered = true;
  if (s->complete) --(s->streaming ? streaming_ : pending_);
  if (code == GrpcCode::ok && s->complete && now() > s->deadline) {
    code = GrpcCode::deadline_exceeded;
    why = "the answer came after the call's deadline";
    message = nullptr;
  }
  const bool early = !s->complete;  // the client is still sending
  held_ -= s->held();
  // What came of a request refused early is not needed (a whole request's, the handler
  // may be reading).
  if (early) std::string().swap(s->message);
  if (s->streaming) {
    // Its response began with its first message: the last message and the trailers follow
    // what is still to send (Callbacks::read).
    if (code == GrpcCode::ok && message != nullptr) s->queue(*message);
    s->code = code;
    if (code != GrpcCode::ok) s->why = percent_encoded(why.substr(0, 512));
    held_ += s->held();
    nghttp2_session_resume_data(session_, id);  // (an error when not deferred: nothing to do)
  } else if (code == GrpcCode::ok && message != nullptr) {
    frame_into(s->out, *message);
    held_ += s->held();
    const nghttp2_nv headers[] = {field(":status", "200"),
                                  field("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.read_callback = Callbacks::read;
    nghttp2_submit_response(session_, id, headers, std::size(headers), &provider);
  } else {
    held_ += s->held();
    // Trailers only: the status in the one HEADERS frame, which ends the stream. (The
    // reason is cut short: it may quote what the client sent.)
    const std::string status = std::to_string(static_cast<int>(code));
    const std::string text = percent_encoded(why.substr(0, 512));
    const std::vector<nghttp2_nv> headers = {
        field(":status", "200"), field("content-type", "application/grpc"),
        field("grpc-status", status), field("grpc-message", text)};
    nghttp2_submit_response(session_, id, headers.data(), headers.size(), nullptr);
    s->reset_when_answered = early;
  }
  answered();
}

void GrpcSession::stream_message(std::int32_t id, std::string& message) {
  Stream* s = stream(id);
  if (s == nullptr || s->answered || !s->complete) return;
  if (now() > s->deadline)
    return answer(id, GrpcCode::deadline_exceeded, "the call's deadline has passed", nullptr);
  held_ -= s->held();
  s->queue(message);
  held_ += s->held();
  if (s->streaming) {
    nghttp2_session_resume_data(session_, id);  // (an error when not deferred: nothing to do)
  } else {
    // The first message goes with the response's HEADERS. From now on the stream owes
    // nothing: only its call's grpc-timeout ends it, not the request timeout.
    s->streaming = true;
    --pending_;
    ++streaming_;
    s->deadline = s->timeout ? s->called_at + *s->timeout : kNever;
    const nghttp2_nv headers[] = {field(":status", "200"),
                                  field("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.read_callback = Callbacks::read;
    nghttp2_submit_response(session_, id, headers, std::size(headers), &provider);
  }
  answered();
}

void GrpcSession::answered() {
  if (parsing_ != 0) return;  // feed() sends
  send();
  if (on_answer_) on_answer_();
}

void GrpcSession::send() {
  for (;;) {
    const std::uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n <= 0) {
      if (n < 0) terminate(NGHTTP2_INTERNAL_ERROR);
      break;
    }
    output_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  if (!input_done_ && nghttp2_session_want_read(session_) == 0 &&
      nghttp2_session_want_write(session_) == 0) {
    // nghttp2 ended the connection (a GOAWAY of its own: a flood, a protocol error, the
    // client's GOAWAY with nothing left).
    forget_streams();
  }
}

void GrpcSession::forget_streams() {
  input_done_ = true;
  streams_.clear();
  held_ = 0;
  receiving_ = 0;
  pending_ = 0;
  streaming_ = 0;
}

void GrpcSession::terminate(std::uint32_t error) {
  if (input_done_) return;
  nghttp2_session_terminate_session(session_, error);
  const std::uint8_t* data = nullptr;
  for (ssize_t n; (n = nghttp2_session_mem_send(session_, &data)) > 0;)
    output_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  forget_streams();
}

bool GrpcSession::feed(std::string_view data) {
  if (input_done_) return false;
  ++parsing_;
  const ssize_t n = nghttp2_session_mem_recv(
      session_, reinterpret_cast<const std::uint8_t*>(data.data()), data.size());
  --parsing_;
  if (n < 0) {
    terminate(n == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
  } else {
    send();
  }
  return !input_done_;
}

bool GrpcSession::timed_out() {
  if (input_done_) {
    // No more input, and what is owed has had its time (an answer the client's flow
    // control never lets out, say): nothing is kept for it.
    forget_streams();
    return true;
  }
  if (!greeted_ || receiving_ != 0 || (pending_ == 0 && streaming_ == 0)) {
    // A request not coming whole in time, or an idle connection: it ends.
    terminate(NGHTTP2_NO_ERROR);
    return true;
  }
  // Answers owed past their deadlines (the call's, or the request timeout), and streams
  // kept open past their call's deadline, are given as DEADLINE_EXCEEDED; the connection
  // goes on. (So does one idle but for streams kept open: the idle timeout is not theirs.)
  const std::uint64_t t = now();
  std::vector<std::int32_t> late;
  for (const auto& [id, s] : streams_) {
    if (s->complete && !s->answered && s->deadline <= t) late.push_back(id);
  }
  ++parsing_;
  for (const std::int32_t id : late)
    answer(id, GrpcCode::deadline_exceeded, "no answer within the call's deadline", nullptr);
  --parsing_;
  ++timeouts_;
  send();
  return false;
}

std::uint64_t GrpcSession::owed_wait_ms(std::uint64_t otherwise) const noexcept {
  // (Streams kept open are owed nothing, but their deadlines are kept as well.)
  std::optional<std::uint64_t> first;
  for (const auto& [id, s] : streams_) {
    if (s->complete && !s->answered && s->deadline != kNever)
      first = std::min(first.value_or(s->deadline), s->deadline);
  }
  if (!first) return otherwise;
  const std::uint64_t t = now();
  return *first > t ? *first - t : 1;
}

std::uint64_t GrpcSession::receiving_wait_ms(std::uint64_t otherwise) const noexcept {
  // From the oldest stream still arriving: each request has `otherwise` from its opening,
  // however many others finished meanwhile.
  for (const auto& [id, s] : streams_) {
    if (s->complete) continue;
    const std::uint64_t t = now();
    return s->opened_at + otherwise > t ? s->opened_at + otherwise - t : 1;
  }
  return otherwise;
}

std::uint64_t GrpcSession::idle_wait_ms(std::uint64_t otherwise) const noexcept {
  if (streaming_ == 0) return otherwise;
  const std::uint64_t t = now();
  std::uint64_t wait = otherwise;
  for (const auto& [id, s] : streams_) {
    if (s->streaming && !s->answered && s->deadline != kNever)
      wait = std::min(wait, s->deadline > t ? s->deadline - t : 0);
  }
  return wait;
}

std::uint64_t GrpcSession::deadline_key() const noexcept {
  // Receiving: the oldest stream still arriving (a new one starts the timer again only
  // when it is the oldest: a client cannot keep a stream open by finishing others).
  // Otherwise: the requests so far and the answers cut, as HTTP/1.1 keys them.
  std::uint64_t key = 2 * requests_ + 1;
  if (!greeted_ || (requests_ == 0 && receiving_ == 0)) {
    key = 0;
  } else if (receiving_ != 0) {
    for (const auto& [id, s] : streams_) {
      if (!s->complete) {
        key = 2 * static_cast<std::uint64_t>(id);
        break;
      }
    }
    return key | (std::uint64_t{1} << 63);
  }
  return key + (timeouts_ << 40);
}

void GrpcSession::input_ended() {
  if (input_done_) return;
  input_done_ = true;
  // What had not come whole never will: forgotten, and so are streams kept open (their
  // client is gone: nothing it could still want comes on them). Answers owed still go out.
  for (auto it = streams_.begin(); it != streams_.end();) {
    Stream& s = *it->second;
    if (s.complete && !s.streaming) {
      ++it;
      continue;
    }
    if (!s.complete) {
      --receiving_;
    } else if (!s.answered) {
      --streaming_;
    }
    held_ -= s.held();
    it = streams_.erase(it);
  }
}

bool GrpcSession::drain() {
  if (!draining_ && !input_done_) {
    draining_ = true;
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    send();
    if (streams_.empty()) input_done_ = true;
  }
  return closing();
}

}  // namespace ratewin::server
