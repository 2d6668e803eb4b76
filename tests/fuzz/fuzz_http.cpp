// The request path: bytes from a client, cut into reads at places the input chooses,
// through the HTTP parser (framing, trailers, targets, percent-decoding), the rules (the
// shipped example), the engine and the admin API, as one connection. Nothing may crash,
// leak or hit undefined behaviour, and the session must answer with well-formed
// responses only. With bit 0x40 of the first byte, the second chooses which requests are
// answered later (deferred), in an order the input chooses, some of them after the
// connection has gone.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "admin/admin.h"
#include "app/router.h"
#include "http/http.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"
#include "rules/overrides.h"
#include "service/service.h"

namespace {

using namespace ratewin;
using namespace ratewin::server;

struct World {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(std::chrono::hours(500000));
  Engine engine{[this] {
    Options o;
    o.clock = clock;
    o.max_limiters = 4096;
    o.logger = [](LogLevel, std::string_view) {};
    return o;
  }()};
  Overrides overrides{RedisTarget(), "fuzz", [](LogLevel, std::string_view) {}};
  Service service{engine, overrides, [] {
                    ServiceOptions o;
                    o.rules_path = RATEWIN_RULES_EXAMPLE;
                    o.admin_token = "token";
                    // The session's peer is a trusted proxy: forwarded headers are read.
                    o.trusted_proxies = *AddressRanges::parse("192.0.2.0/24, ::1");
                    return o;
                  }(),
                  [](LogLevel, std::string_view) {}};
  AdminApi admin{service, overrides, service.options().admin_token};
  std::unique_ptr<RequestHandler> handler = std::make_unique<Router>(service, &admin);
};

// Every response starts with a status line and carries its Content-Length of body (none
// for HEAD); a session never writes anything else.
void check(std::string_view out) {
  while (!out.empty()) {
    constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    if (out.starts_with(kContinue)) {
      out.remove_prefix(kContinue.size());
      continue;
    }
    if (!out.starts_with("HTTP/1.1 ")) std::abort();
    const std::size_t end = out.find("\r\n\r\n");
    if (end == std::string_view::npos) std::abort();
    const std::size_t at = out.find("Content-Length: ");
    if (at == std::string_view::npos || at > end) std::abort();
    const std::size_t length = std::strtoull(out.data() + at + 16, nullptr, 10);
    out.remove_prefix(end + 4);
    // A response to HEAD declares a length but has no body: what follows is the next
    // response (no body here starts like one: they are JSON or Prometheus text).
    if (out.empty() || out.starts_with("HTTP/1.1 ")) continue;
    if (length > out.size()) std::abort();
    out.remove_prefix(length);
  }
}

// Answers the requests `pattern` picks later (the others through the service at once).
struct Deferring final : RequestHandler {
  RequestHandler* inner = nullptr;
  std::uint8_t pattern = 0;
  unsigned count = 0;
  std::vector<Responder> held;
  void handle(const Request& request, std::string_view peer, Reply& reply) override {
    const unsigned bit = count++ % 8;
    if (((pattern >> bit) & 1U) == 0) return inner->handle(request, peer, reply);
    Response going_on;  // (bit 6: the server's own work, with a late answer of its own)
    going_on.status = 202;
    going_on.body = "going on";
    Responder later = bit == 6 ? reply.defer(1000, std::move(going_on)) : reply.defer();
    if (bit == 7) {  // answered before handle() returns
      Response r;
      r.body = request.path;
      later.respond(std::move(r));
    }
    held.push_back(std::move(later));
  }
  // Answers (or drops, answering 500) one held request, chosen by `choice`.
  void answer_one(unsigned choice) {
    if (held.empty()) return;
    // Out of the list first: an answer may parse more requests, and add to it.
    auto it = held.begin() + static_cast<std::ptrdiff_t>(choice % held.size());
    Responder later = std::move(*it);
    held.erase(it);
    if ((choice & 4U) != 0) {
      Response r;
      r.status = 429;
      r.body = "later";
      later.respond(std::move(r));
    }
  }  // a Responder not answered is answered 500 on the way out
};

// Writes what the session produced, then parses what it held back (as the server does).
void flush(HttpSession& session, bool& more) {
  check(session.output());
  session.output().clear();
  while (more && session.blocked()) {
    const std::uint64_t before = session.requests();
    more = session.resume();
    check(session.output());
    session.output().clear();
    if (session.requests() == before && session.blocked()) break;  // answers owed
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world;
  if (size == 0) return 0;
  // The first byte: how the input is cut into reads, and how time moves between them.
  const std::size_t step = 1 + data[0] % 64;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  Deferring deferring;
  deferring.inner = world.handler.get();
  if ((data[0] & 0x40) != 0 && !input.empty()) {
    deferring.pattern = static_cast<std::uint8_t>(input.front());
    input.remove_prefix(1);
  }
  {
    HttpLimits limits;
    limits.max_pending = 4;
    HttpSession session(deferring, "192.0.2.1", limits);
    bool more = true;
    session.on_answer([&] { flush(session, more); });
    unsigned round = 0;
    while (!input.empty()) {
      const std::size_t n = std::min(step, input.size());
      more = session.feed(input.substr(0, n));
      flush(session, more);
      input.remove_prefix(n);
      world.clock->advance(std::chrono::milliseconds(data[0] % 7));
      if (round++ % 2 == 1) deferring.answer_one(round + deferring.pattern);
      if (!more && session.pending() == 0) break;
    }
    if ((data[0] & 0x80) != 0) {
      session.drain();
      deferring.answer_one(deferring.pattern);
    } else {
      session.timed_out();
    }
    check(session.output());
  }
  // The connection is gone: late answers do nothing.
  while (!deferring.held.empty()) deferring.answer_one(deferring.pattern);
  return 0;
}
