// GrpcSession (gRPC over HTTP/2 on nghttp2) against an nghttp2 client written here, bytes
// handed back and forth in memory, on a manual clock: unary calls answered at once and
// later, streams kept open (server streaming), statuses as trailers, the bounds (streams,
// header list, message, resets, CONTINUATION floods, buffered bytes), cancellation,
// deadlines, timeouts and draining.
#include "http/grpc_session.h"

#include <doctest/doctest.h>
#include <nghttp2/nghttp2.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ratewin::server {
namespace {

std::string framed(std::string_view message) {
  std::string out(1, '\0');
  const auto n = static_cast<std::uint32_t>(message.size());
  for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((n >> shift) & 0xff);
  out += message;
  return out;
}

// An HTTP/2 client: calls submitted, what came back kept by stream.
class Client {
 public:
  struct Got {
    std::map<std::string, std::string> headers;  // response headers and trailers
    std::string data;
    bool closed = false;
    std::uint32_t error = 0;  // the stream's close code (RST_STREAM's)
  };

  Client() { start(nullptr); }
  // A client whose receive window is `window` bytes (0: it lets no DATA in), and opens it
  // only by open_window() (none of nghttp2's own WINDOW_UPDATEs as it reads).
  explicit Client(std::uint32_t window) {
    nghttp2_option* options = nullptr;
    nghttp2_option_new(&options);
    nghttp2_option_set_no_auto_window_update(options, 1);
    start(options);
    nghttp2_option_del(options);
    const nghttp2_settings_entry e{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window};
    nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, &e, 1);
  }
  ~Client() { nghttp2_session_del(ng_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A call: its request message whole (end_stream) or only begun.
  std::int32_t call(std::string_view path, std::string_view message,
                    std::vector<std::pair<std::string, std::string>> extra = {},
                    bool end_stream = true) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {":method", "POST"}, {":scheme", "http"}, {":authority", "test"},
        {":path", std::string(path)}, {"content-type", "application/grpc"}, {"te", "trailers"}};
    for (auto& f : extra) fields.push_back(std::move(f));
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : fields) {
      nv.push_back(nghttp2_nv{reinterpret_cast<std::uint8_t*>(n.data()),
                              reinterpret_cast<std::uint8_t*>(v.data()), n.size(), v.size(),
                              NGHTTP2_NV_FLAG_NONE});
    }
    auto body = std::make_unique<Body>();
    body->bytes = framed(message);
    body->end_stream = end_stream;
    nghttp2_data_provider provider{};
    provider.source.ptr = body.get();
    provider.read_callback = [](nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t len,
                                std::uint32_t* flags, nghttp2_data_source* src, void*) -> ssize_t {
      auto* b = static_cast<Body*>(src->ptr);
      const std::size_t n = std::min(len, b->bytes.size() - b->taken);
      std::memcpy(buf, b->bytes.data() + b->taken, n);
      b->taken += n;
      if (b->taken == b->bytes.size()) {
        if (!b->end_stream) return n == 0 ? ssize_t{NGHTTP2_ERR_DEFERRED} : static_cast<ssize_t>(n);
        *flags |= NGHTTP2_DATA_FLAG_EOF;
      }
      return static_cast<ssize_t>(n);
    };
    const std::int32_t id = nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), &provider,
                                                   nullptr);
    REQUIRE(id > 0);
    bodies_.push_back(std::move(body));
    return id;
  }

  void cancel(std::int32_t id) { nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL); }
  // Lets `bytes` more of a stream's DATA in.
  void open_window(std::int32_t id, std::int32_t bytes) {
    nghttp2_submit_window_update(ng_, NGHTTP2_FLAG_NONE, id, bytes);
  }

  std::string out() {
    std::string bytes;
    const std::uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(ng_, &data)) > 0;)
      bytes.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    return bytes;
  }
  void in(std::string_view bytes) {
    if (!bytes.empty())
      nghttp2_session_mem_recv(ng_, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                               bytes.size());
  }

  std::map<std::int32_t, Got> got;
  std::optional<std::uint32_t> goaway;

 private:
  // The session, with its callbacks recording what comes back.
  void start(nghttp2_option* options) {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* n, std::size_t nl,
               const std::uint8_t* v, std::size_t vl, std::uint8_t, void* u) {
          static_cast<Client*>(u)->got[f->hd.stream_id].headers[std::string(
              reinterpret_cast<const char*>(n), nl)] = std::string(reinterpret_cast<const char*>(v), vl);
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cb, [](nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* d,
               std::size_t n, void* u) {
          static_cast<Client*>(u)->got[id].data.append(reinterpret_cast<const char*>(d), n);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cb, [](nghttp2_session*, std::int32_t id, std::uint32_t error, void* u) {
          Got& g = static_cast<Client*>(u)->got[id];
          g.closed = true;
          g.error = error;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, void* u) {
          if (f->hd.type == NGHTTP2_GOAWAY) static_cast<Client*>(u)->goaway = f->goaway.error_code;
          return 0;
        });
    nghttp2_session_client_new2(&ng_, cb, this, options);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }

  struct Body {
    std::string bytes;
    std::size_t taken = 0;
    bool end_stream = true;
  };
  nghttp2_session* ng_ = nullptr;
  std::vector<std::unique_ptr<Body>> bodies_;
};

// Bytes both ways until neither side has more to say.
void exchange(Client& client, GrpcSession& session) {
  for (int round = 0; round < 100; ++round) {
    const std::string to_server = client.out();
    if (!to_server.empty()) session.feed(to_server);
    std::string to_client;
    to_client.swap(session.output());
    client.in(to_client);
    if (to_server.empty() && to_client.empty()) return;
  }
  FAIL("the exchange did not settle");
}

// Answers "/t.S/Echo" at once with its message, fails "/t.S/Fail", sends "/t.S/Watch"'s
// message (its first 16 bytes) back at once and keeps the stream open, and keeps the
// others' responders (and the watches') for later, with those 16 bytes.
struct Handler : GrpcHandler {
  void call(const GrpcCall& call, GrpcResponder responder) override {
    ++calls;
    if (call.method == "/t.S/Echo") return responder.finish(std::string(call.message));
    if (call.method == "/t.S/Fail") return responder.fail(GrpcCode::not_found, "no such thing: ü");
    const std::string start(call.message.substr(0, 16));
    if (call.method == "/t.S/Watch") responder.send(start);
    held.push_back(std::move(responder));
    held_for.push_back(start);
  }
  // The responder kept for the call whose message began with `start`.
  GrpcResponder& of(std::string_view start) {
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (held_for[i].compare(0, start.size(), start) == 0) return held[i];
    }
    FAIL("no call began with " << start);
    return held.front();
  }
  int calls = 0;
  std::vector<GrpcResponder> held;
  std::vector<std::string> held_for;
};

struct Fixture {
  std::uint64_t clock = 1000;
  Handler handler;
  GrpcLimits limits() {
    GrpcLimits l;
    l.now = [this] { return clock; };
    l.answer_timeout_ms = 10000;
    return l;
  }
};

TEST_CASE("grpc: a unary call answered at once gets 200, its message and grpc-status 0") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  CHECK(session.mid_request());  // no greeting yet
  const std::int32_t id = client.call("/t.S/Echo", "hello");
  exchange(client, session);
  const Client::Got& got = client.got[id];
  CHECK(got.headers.at(":status") == "200");
  CHECK(got.headers.at("content-type") == "application/grpc");
  CHECK(got.headers.at("grpc-status") == "0");
  CHECK(got.data == framed("hello"));
  CHECK(got.closed);
  CHECK(session.requests() == 1);
  CHECK(session.pending() == 0);
  CHECK(session.streams() == 0);
  CHECK_FALSE(session.mid_request());
  CHECK_FALSE(session.closing());
}

TEST_CASE("grpc: a status other than OK comes as trailers only, its message percent-encoded") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t id = client.call("/t.S/Fail", "x");
  exchange(client, session);
  const Client::Got& got = client.got[id];
  CHECK(got.headers.at("grpc-status") == "5");
  CHECK(got.headers.at("grpc-message") == "no such thing: %C3%BC");
  CHECK(got.data.empty());
}

TEST_CASE("grpc: an answer given later goes out through on_answer, in any order") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  int answered = 0;
  session.on_answer([&] { ++answered; });
  Client client;
  const std::int32_t a = client.call("/t.S/Later", "a");
  const std::int32_t b = client.call("/t.S/Later", "b");
  exchange(client, session);
  REQUIRE(f.handler.held.size() == 2);
  CHECK(session.pending() == 2);
  CHECK(f.handler.held[1].waiting());
  f.handler.held[1].finish("B");
  CHECK(answered == 1);
  exchange(client, session);
  CHECK(client.got[b].data == framed("B"));
  CHECK_FALSE(client.got[a].closed);
  // Dropped without an answer: INTERNAL.
  f.handler.held.clear();
  exchange(client, session);
  CHECK(client.got[a].headers.at("grpc-status") == "13");
  CHECK(session.pending() == 0);
}

TEST_CASE("grpc: a call the client cancels is forgotten; its late answer is dropped") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t id = client.call("/t.S/Later", "a");
  exchange(client, session);
  REQUIRE(f.handler.held.size() == 1);
  client.cancel(id);
  exchange(client, session);
  CHECK_FALSE(f.handler.held[0].waiting());
  CHECK(session.pending() == 0);
  CHECK(session.streams() == 0);
  f.handler.held[0].finish("late");
  CHECK(session.output().empty());
}

TEST_CASE("grpc: grpc-encoding other than identity is UNIMPLEMENTED; not gRPC is refused") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t gzip = client.call("/t.S/Echo", "a", {{"grpc-encoding", "gzip"}});
  const std::int32_t plain = client.call("/t.S/Echo", "a", {{"content-type", "text/plain"}});
  exchange(client, session);
  CHECK(client.got[gzip].headers.at("grpc-status") == "12");
  // (content-type given twice: the last one read is text/plain.)
  CHECK(client.got[plain].headers.at("grpc-status") == "2");
  CHECK(f.handler.calls == 0);
}

TEST_CASE("grpc: a message over the bound is RESOURCE_EXHAUSTED, never handed on") {
  Fixture f;
  GrpcLimits limits = f.limits();
  limits.max_message_bytes = 1000;
  GrpcSession session(f.handler, "peer", limits);
  Client client;
  const std::int32_t big = client.call("/t.S/Echo", std::string(5000, 'x'));
  const std::int32_t fits = client.call("/t.S/Echo", std::string(1000, 'y'));
  exchange(client, session);
  CHECK(client.got[big].headers.at("grpc-status") == "8");
  CHECK(client.got[big].closed);
  CHECK(client.got[fits].headers.at("grpc-status") == "0");
  CHECK(f.handler.calls == 1);
  CHECK(session.streams() == 0);
}

TEST_CASE("grpc: arriving requests past the process's buffer bound are refused") {
  Fixture f;
  std::atomic<std::int64_t> buffered{1000};
  GrpcLimits limits = f.limits();
  limits.buffered = &buffered;
  limits.max_buffered = 1500;
  GrpcSession session(f.handler, "peer", limits);
  Client client;
  const std::int32_t id = client.call("/t.S/Echo", std::string(600, 'x'));
  exchange(client, session);
  CHECK(client.got[id].headers.at("grpc-status") == "8");
  buffered = 0;
  const std::int32_t next = client.call("/t.S/Echo", std::string(600, 'x'));
  exchange(client, session);
  CHECK(client.got[next].headers.at("grpc-status") == "0");
}

TEST_CASE("grpc: a header list over the bound resets its stream, the connection goes on") {
  Fixture f;
  GrpcLimits limits = f.limits();
  limits.max_header_list_bytes = 4096;
  GrpcSession session(f.handler, "peer", limits);
  Client client;
  const std::int32_t big = client.call("/t.S/Echo", "a", {{"x-big", std::string(8000, 'v')}});
  exchange(client, session);
  CHECK(client.got[big].closed);
  CHECK(client.got[big].error != 0);
  CHECK(f.handler.calls == 0);
  const std::int32_t next = client.call("/t.S/Echo", "b");
  exchange(client, session);
  CHECK(client.got[next].headers.at("grpc-status") == "0");
}

TEST_CASE("grpc: streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused") {
  Fixture f;
  GrpcLimits limits = f.limits();
  limits.max_concurrent_streams = 4;
  GrpcSession session(f.handler, "peer", limits);
  Client client;
  // Sent before the server's SETTINGS reach the client (which would hold the extra ones
  // back itself).
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(client.call("/t.S/Later", "a", {}, false));
  exchange(client, session);
  CHECK(session.streams() <= 4);
  int refused = 0;
  for (const std::int32_t id : ids) refused += client.got[id].closed ? 1 : 0;
  CHECK(refused >= 2);
  CHECK(session.mid_request());  // half-open streams: the request timeout runs
}

TEST_CASE("grpc: a call's grpc-timeout bounds its answer: DEADLINE_EXCEEDED, the connection goes on") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t id = client.call("/t.S/Later", "a", {{"grpc-timeout", "50m"}});
  exchange(client, session);
  CHECK(session.owed_wait_ms(10000) == 50);
  const std::uint64_t key = session.deadline_key();
  f.clock += 50;
  CHECK_FALSE(session.timed_out());
  CHECK(session.deadline_key() != key);  // the transport's timer starts again
  exchange(client, session);
  CHECK(client.got[id].headers.at("grpc-status") == "4");
  CHECK_FALSE(f.handler.held[0].waiting());
  CHECK_FALSE(session.closing());
  CHECK(session.owed_wait_ms(10000) == 10000);
}

TEST_CASE("grpc: an answer later than the call's deadline is DEADLINE_EXCEEDED") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t id = client.call("/t.S/Later", "a", {{"grpc-timeout", "1S"}});
  exchange(client, session);
  f.clock += 1001;
  f.handler.held[0].finish("late");
  exchange(client, session);
  CHECK(client.got[id].headers.at("grpc-status") == "4");
}

TEST_CASE("grpc: a slow request, a silent connection and an idle one time out with GOAWAY") {
  Fixture f;
  SUBCASE("a request that does not come whole") {
    GrpcSession session(f.handler, "peer", f.limits());
    Client client;
    client.call("/t.S/Echo", "a", {}, false);
    exchange(client, session);
    CHECK(session.mid_request());
    CHECK(session.timed_out());
    CHECK(session.closing());
    client.in(session.output());
    CHECK(client.goaway.has_value());
  }
  SUBCASE("a client that never greets") {
    GrpcSession session(f.handler, "peer", f.limits());
    CHECK(session.mid_request());
    CHECK(session.timed_out());
    CHECK(session.closing());
  }
  SUBCASE("an idle connection") {
    GrpcSession session(f.handler, "peer", f.limits());
    Client client;
    client.call("/t.S/Echo", "a");
    exchange(client, session);
    CHECK_FALSE(session.mid_request());
    CHECK(session.pending() == 0);
    CHECK(session.timed_out());
    CHECK(session.closing());
  }
}

TEST_CASE("grpc: a stream kept arriving holds the deadline while others complete") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  client.call("/t.S/Echo", "slow", {}, false);
  exchange(client, session);
  const std::uint64_t key = session.deadline_key();
  for (int i = 0; i < 5; ++i) client.call("/t.S/Echo", "quick");
  exchange(client, session);
  CHECK(session.requests() == 5);
  CHECK(session.deadline_key() == key);  // the oldest stream arriving still sets it
}

TEST_CASE("grpc: drain sends GOAWAY, answers what is owed, then closes") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  client.call("/t.S/Later", "a");
  exchange(client, session);
  CHECK_FALSE(session.drain());
  exchange(client, session);
  CHECK(client.goaway == NGHTTP2_NO_ERROR);
  const std::int32_t after = client.call("/t.S/Echo", "b");
  exchange(client, session);
  CHECK(f.handler.calls == 1);  // the one after GOAWAY was not taken
  CHECK_FALSE(client.got[after].headers.count("grpc-status"));
  f.handler.held[0].finish("A");
  CHECK(session.closing());
}

TEST_CASE("grpc: a client that is not HTTP/2 gets GOAWAY and is closed") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  CHECK_FALSE(session.feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(session.closing());
}

TEST_CASE("grpc: resets past the rate end the connection (rapid reset)") {
  Fixture f;
  GrpcLimits limits = f.limits();
  limits.reset_burst = 10;
  limits.resets_per_second = 1;
  GrpcSession session(f.handler, "peer", limits);
  Client client;
  for (int i = 0; i < 40 && !session.closing(); ++i) {
    const std::int32_t id = client.call("/t.S/Later", "a", {}, false);
    exchange(client, session);  // (a reset before its HEADERS went would cancel them instead)
    client.cancel(id);
    exchange(client, session);
  }
  CHECK(session.closing());
  CHECK(client.goaway.has_value());
}

// Raw HTTP/2 frames, for what nghttp2's client will not send.
std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream, std::string_view payload) {
  std::string f;
  const auto n = static_cast<std::uint32_t>(payload.size());
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (const int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & 0xff);
  f += payload;
  return f;
}

TEST_CASE("grpc: a CONTINUATION flood ends the connection, its bytes never held") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  std::string greeting = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  greeting += frame(NGHTTP2_SETTINGS, 0, 0, "");
  session.feed(greeting);
  // A literal header whose value never ends, across HEADERS and CONTINUATIONs.
  std::string block = "\x00\x05x-big";
  block += "\x7f";  // a value of 127 + ... (an endless length, 7-bit prefix continued)
  block += "\xff\xff\xff\x03";
  session.feed(frame(NGHTTP2_HEADERS, 0, 1, block));
  int frames = 0;
  const std::string filler(16 * 1024 - 9, 'a');
  while (!session.closing() && frames < 40000) {
    session.feed(frame(NGHTTP2_CONTINUATION, 0, 1, filler));
    ++frames;
    CHECK(session.buffered() < 256 * 1024);
  }
  CHECK(session.closing());
  CHECK(frames < 100);
}

TEST_CASE("grpc: the bytes held come back to nothing after calls (none counted twice or lost)") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  exchange(client, session);
  const auto held = [&] { return session.buffered() - session.output().capacity(); };
  const std::size_t idle = held();
  for (int i = 0; i < 50; ++i) client.call("/t.S/Echo", std::string(100 + i, 'x'));
  client.call("/t.S/Echo", std::string(100000, 'x'));  // refused early: over the bound
  exchange(client, session);
  CHECK(session.streams() == 0);
  CHECK(held() == idle);
  // A header value held while its request arrives is counted.
  client.call("/t.S/Later", "a", {{"grpc-encoding", std::string(15000, 'e')}}, false);
  exchange(client, session);
  CHECK(held() >= idle + 15000);
}

TEST_CASE("grpc: each stream arriving has the request timeout from its own start") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  const std::int32_t first = client.call("/t.S/Later", "a", {}, false);
  exchange(client, session);
  f.clock += 6000;
  client.call("/t.S/Later", "b", {}, false);
  exchange(client, session);
  CHECK(session.receiving_wait_ms(10000) == 4000);  // the first's, not a fresh 10 s
  client.cancel(first);
  exchange(client, session);
  CHECK(session.receiving_wait_ms(10000) == 10000);  // the second's, opened just now
  f.clock += 5000;
  CHECK(session.receiving_wait_ms(10000) == 5000);
}

TEST_CASE("grpc: a client gone with answers it never let out does not keep its connection") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client(0);  // no window: the answer's DATA can never go
  client.call("/t.S/Echo", "hello");
  exchange(client, session);
  CHECK(session.streams() == 1);
  session.input_ended();
  CHECK_FALSE(session.closing());
  CHECK(session.timed_out());
  CHECK(session.closing());
  CHECK(session.streams() == 0);
}

TEST_CASE("grpc: a streaming answer: messages as they come, the stream kept open, then trailers") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  int answered = 0;
  session.on_answer([&] { ++answered; });
  Client client;
  const std::int32_t ok = client.call("/t.S/Watch", "one");
  const std::int32_t failed = client.call("/t.S/Watch", "x");
  exchange(client, session);
  REQUIRE(f.handler.held.size() == 2);
  CHECK(client.got[ok].headers.at(":status") == "200");
  CHECK(client.got[ok].data == framed("one"));
  CHECK_FALSE(client.got[ok].headers.count("grpc-status"));
  CHECK_FALSE(client.got[ok].closed);
  CHECK(session.streaming() == 2);
  CHECK(session.pending() == 0);  // nothing owed
  CHECK(f.handler.held[0].waiting());
  f.handler.held[0].send("two");
  CHECK(answered == 1);
  exchange(client, session);
  CHECK(client.got[ok].data == framed("one") + framed("two"));
  CHECK_FALSE(client.got[ok].closed);
  f.handler.held[0].finish("three");
  exchange(client, session);
  CHECK(client.got[ok].data == framed("one") + framed("two") + framed("three"));
  CHECK(client.got[ok].headers.at("grpc-status") == "0");
  CHECK(client.got[ok].closed);
  CHECK(client.got[ok].error == 0);
  // Ended with a status other than OK: its messages first, then the trailers.
  f.handler.held[1].send("y");
  f.handler.held[1].fail(GrpcCode::unavailable, "going away");
  exchange(client, session);
  CHECK(client.got[failed].data == framed("x") + framed("y"));
  CHECK(client.got[failed].headers.at("grpc-status") == "14");
  CHECK(client.got[failed].headers.at("grpc-message") == "going away");
  CHECK(client.got[failed].closed);
  CHECK(session.streaming() == 0);
  CHECK(session.streams() == 0);
  CHECK_FALSE(f.handler.held[1].waiting());
}

TEST_CASE("grpc: a stream kept open is not cut by the request timeout, only by its grpc-timeout") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());  // a 10 s request timeout
  Client client;
  const std::int32_t open = client.call("/t.S/Watch", "a");
  const std::int32_t timed = client.call("/t.S/Watch", "b", {{"grpc-timeout", "20S"}});
  exchange(client, session);
  // Nothing owed: the transport keeps the connection as idle, its timer to the deadline.
  CHECK_FALSE(session.mid_request());
  CHECK(session.pending() == 0);
  CHECK(session.idle_wait_ms(60000) == 20000);
  CHECK(session.idle_wait_ms(5000) == 5000);
  f.clock += 10001;  // past the request timeout (and the idle timeout the timer may run)
  CHECK_FALSE(session.timed_out());
  exchange(client, session);
  CHECK_FALSE(client.got[open].closed);
  CHECK_FALSE(client.got[timed].closed);
  CHECK(session.streaming() == 2);
  CHECK(session.idle_wait_ms(60000) == 9999);
  f.clock += 9999;  // the grpc-timeout is due
  CHECK(session.idle_wait_ms(60000) == 0);
  CHECK_FALSE(session.timed_out());
  exchange(client, session);
  CHECK(client.got[timed].data == framed("b"));
  CHECK(client.got[timed].headers.at("grpc-status") == "4");
  CHECK(client.got[timed].closed);
  CHECK_FALSE(client.got[open].closed);
  CHECK(session.streaming() == 1);
  CHECK(session.idle_wait_ms(60000) == 60000);
  CHECK_FALSE(session.closing());
  // A unary call beside it still has the request timeout (the stream kept open does not
  // lengthen it).
  client.call("/t.S/Later", "c");
  exchange(client, session);
  CHECK(session.owed_wait_ms(10000) == 10000);
}

TEST_CASE("grpc: streams kept open hold no request, and their bytes come back to nothing") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client;
  exchange(client, session);
  const auto held = [&] { return session.buffered() - session.output().capacity(); };
  const std::size_t idle = held();
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(client.call("/t.S/Watch", "w" + std::to_string(i) + std::string(20000, 'r')));
  }
  exchange(client, session);
  REQUIRE(f.handler.held.size() == 8);
  // Each holds its state and its 16-byte message, not its 20 KB request (read by then).
  CHECK(held() < idle + 8 * 1000);
  for (int round = 0; round < 20; ++round) {
    for (GrpcResponder& r : f.handler.held) r.send(std::string(100 + round, 's'));
    exchange(client, session);
  }
  f.handler.of("w0").finish("done");
  f.handler.of("w1").fail(GrpcCode::unavailable, std::string(400, 'w'));
  client.cancel(ids[2]);
  exchange(client, session);
  CHECK(client.got[ids[0]].headers.at("grpc-status") == "0");
  CHECK(client.got[ids[1]].headers.at("grpc-status") == "14");
  CHECK(session.streaming() == 5);
  session.drain();  // the others: ended by the handler after GOAWAY
  for (int i = 3; i < 8; ++i) {
    GrpcResponder& r = f.handler.of("w" + std::to_string(i));
    r.send("last");
    r.fail(GrpcCode::unavailable, "shutting down");
  }
  exchange(client, session);
  exchange(client, session);
  CHECK(session.streams() == 0);
  CHECK(session.streaming() == 0);
  CHECK(held() == idle);
  CHECK(session.closing());
}

TEST_CASE("grpc: a client that lets no DATA in holds one message a stream, however many come") {
  Fixture f;
  GrpcSession session(f.handler, "peer", f.limits());
  Client client(0);  // no window: no message can go
  const std::int32_t id = client.call("/t.S/Watch", "s0000");
  exchange(client, session);
  REQUIRE(f.handler.held.size() == 1);
  CHECK(client.got[id].data.empty());
  const std::size_t first = session.buffered();
  for (int i = 1; i <= 1000; ++i) {
    f.handler.held[0].send("s" + std::to_string(10000 + i).substr(1));  // 5 bytes each
    exchange(client, session);
    CHECK(session.buffered() == first);
  }
  // Let in (and 3 bytes more): only the latest comes (the ones before it were replaced,
  // never sent).
  client.open_window(id, 10 + 3);
  exchange(client, session);
  CHECK(client.got[id].data == framed("s1000"));
  CHECK_FALSE(client.got[id].closed);
  // One begun and held back part way goes whole first, then only the latest after it.
  f.handler.held[0].send("t0001");
  exchange(client, session);
  CHECK(client.got[id].data == framed("s1000") + framed("t0001").substr(0, 3));
  const std::size_t before = session.buffered();
  for (int i = 2; i <= 100; ++i) {
    f.handler.held[0].send("t" + std::to_string(1000 + i));
    CHECK(session.buffered() == before);
  }
  client.open_window(id, 1000);
  exchange(client, session);
  CHECK(client.got[id].data == framed("s1000") + framed("t0001") + framed("t1100"));
}

TEST_CASE("grpc: a stream kept open that the client cancels, or leaves, is forgotten") {
  Fixture f;
  SUBCASE("cancelled (RST_STREAM)") {
    GrpcSession session(f.handler, "peer", f.limits());
    Client client;
    exchange(client, session);
    const std::size_t idle = session.buffered() - session.output().capacity();
    const std::int32_t id = client.call("/t.S/Watch", "a");
    exchange(client, session);
    REQUIRE(f.handler.held.size() == 1);
    client.cancel(id);
    exchange(client, session);
    CHECK_FALSE(f.handler.held[0].waiting());
    CHECK(session.streams() == 0);
    CHECK(session.streaming() == 0);
    CHECK(session.buffered() - session.output().capacity() == idle);
    f.handler.held[0].send("late");
    f.handler.held[0].fail(GrpcCode::unavailable, "late");
    CHECK(session.output().empty());
    // Idle again: the idle timeout ends it.
    CHECK(session.idle_wait_ms(60000) == 60000);
    CHECK(session.timed_out());
    CHECK(session.closing());
  }
  SUBCASE("the client gone (its input ended)") {
    GrpcSession session(f.handler, "peer", f.limits());
    Client client;
    client.call("/t.S/Watch", "a");
    exchange(client, session);
    session.input_ended();
    CHECK(session.streams() == 0);
    CHECK(session.closing());
    CHECK_FALSE(f.handler.held[0].waiting());
  }
}

}  // namespace
}  // namespace ratewin::server
