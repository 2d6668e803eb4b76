// The request path: bytes from a client, cut into reads at places the input chooses,
// through the HTTP parser, the rules (the shipped example), the engine and the admin
// API, as one connection. Nothing may crash, leak or hit undefined behaviour, and the
// session must answer with well-formed responses only.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "http.h"
#include "overrides.h"
#include "ratewin/clock.h"
#include "ratewin/engine.h"
#include "service.h"

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
  Overrides overrides{"", "fuzz", [](LogLevel, std::string_view) {}};
  Service service{engine, overrides, [] {
                    ServiceOptions o;
                    o.rules_path = RATEWIN_RULES_EXAMPLE;
                    o.admin_token = "token";
                    // The session's peer is a trusted proxy: forwarded headers are read.
                    std::string error;
                    o.trusted_proxies = *AddressRanges::parse("192.0.2.0/24, ::1", error);
                    return o;
                  }(),
                  [](LogLevel, std::string_view) {}};
  std::unique_ptr<RequestHandler> handler = service.worker();
};

// Every response starts with a status line; a session never writes anything else.
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
    if (end + 4 + length > out.size()) std::abort();
    out.remove_prefix(end + 4 + length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world;
  if (size == 0) return 0;
  // The first byte: how the input is cut into reads, and how time moves between them.
  const std::size_t step = 1 + data[0] % 64;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  HttpSession session(*world.handler, "192.0.2.1");
  while (!input.empty()) {
    const std::size_t n = std::min(step, input.size());
    bool more = session.feed(input.substr(0, n));
    check(session.output());
    session.output().clear();
    // Output written: input held back while it was full is parsed (as the server does).
    while (more && session.blocked()) {
      more = session.resume();
      check(session.output());
      session.output().clear();
    }
    input.remove_prefix(n);
    world.clock->advance(std::chrono::milliseconds(data[0] % 7));
    if (!more) break;
  }
  if ((data[0] & 0x80) != 0) {
    session.drain();
  } else {
    session.timed_out();
  }
  check(session.output());
  return 0;
}
