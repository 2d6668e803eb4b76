// gRPC over HTTP/2 (GrpcSession, nghttp2): a client's bytes after the connection preface,
// cut into reads at places the input chooses, with calls answered at once, later (in an
// order the input chooses, some after their stream or the connection has gone) or never,
// the clock moved on and the timeouts and drain called between reads. Nothing may crash,
// leak or hit undefined behaviour; the session writes whole HTTP/2 frames only, and
// holds no more than its bounds allow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/grpc_session.h"

namespace {

using namespace ratewin::server;

struct Handler : GrpcHandler {
  void call(const GrpcCall& call, GrpcResponder responder) override {
    if (call.message.size() % 3 == 0) return responder.finish(std::string(call.message));
    if (call.message.size() % 3 == 1) return responder.fail(GrpcCode::not_found, call.method);
    held.push_back(std::move(responder));
  }
  std::vector<GrpcResponder> held;
};

// Whole frames only: a 9-byte header, then its length of payload.
void check(std::string_view out) {
  while (!out.empty()) {
    if (out.size() < 9) std::abort();
    const std::size_t length = (static_cast<std::size_t>(static_cast<unsigned char>(out[0])) << 16) |
                               (static_cast<std::size_t>(static_cast<unsigned char>(out[1])) << 8) |
                               static_cast<unsigned char>(out[2]);
    if (out.size() < 9 + length) std::abort();
    out.remove_prefix(9 + length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::uint64_t clock = 1000;
  Handler handler;
  GrpcLimits limits;
  limits.now = [&clock] { return clock; };
  limits.max_message_bytes = 4096;
  limits.max_header_list_bytes = 2048;
  limits.max_concurrent_streams = 8;
  auto session = std::make_unique<GrpcSession>(handler, "peer", limits);
  const std::uint8_t cut = data[0];  // how reads are cut, and what happens between them
  const std::uint8_t order = data[1];
  std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::string_view preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  session->feed(preface);
  std::size_t step = 1 + (cut & 0x3f);
  int round = 0;
  while (!input.empty() && !session->closing()) {
    const std::size_t n = std::min(step, input.size());
    session->feed(input.substr(0, n));
    input.remove_prefix(n);
    check(session->output());
    session->output().clear();
    if (session->buffered() > 8 * (4096 + 2048 + 64) + 64 * 1024) std::abort();
    ++round;
    if ((order >> (round % 8)) & 1 && !handler.held.empty()) {
      // One held call answered (the last, or the first), or dropped.
      const std::size_t pick = (order & 0x80) != 0 ? 0 : handler.held.size() - 1;
      if (round % 3 == 0) {
        handler.held[pick].finish("late");
      } else if (round % 3 == 1) {
        handler.held[pick].fail(GrpcCode::unavailable, "later");
      }
      handler.held.erase(handler.held.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    if ((cut & 0x40) != 0 && round % 5 == 0) {
      clock += 20000;
      session->timed_out();
    }
    if ((cut & 0x80) != 0 && round == 7) session->drain();
    step = 1 + ((step * 7 + static_cast<std::size_t>(order)) % 97);
  }
  if ((order & 1) != 0) session->input_ended();
  check(session->output());
  // Some answers after the session has gone.
  session.reset();
  for (GrpcResponder& r : handler.held) r.finish("gone");
  return 0;
}
