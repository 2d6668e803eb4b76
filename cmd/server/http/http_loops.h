// The libuv transport: one loop per thread, each on its own SO_REUSEPORT socket, its
// connections' bytes through an HttpSession each and its requests to the RequestHandler
// the loop was given. Connection slots, timeouts (request and idle), output bounds and
// draining live here, and their counts (ConnectionCounters).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/outcome.h"
#include "http/http.h"

struct uv_loop_s;

namespace ratewin::server {

struct Config {
  std::string host = "127.0.0.1";
  int port = 8080;
  unsigned threads = 2;
  std::size_t max_connections = 10000;
  // Most connections open at once from one peer address (an IPv6 one by its /64); 0: no
  // bound of its own.
  std::size_t max_connections_per_address = 1000;
  std::uint64_t request_timeout_ms = 10000;
  std::uint64_t idle_timeout_ms = 30000;
  std::uint64_t drain_timeout_ms = 10000;
  // Over this many bytes in the connections' buffers (ConnectionCounters::buffered), a
  // connection that is not reading its answers is closed.
  std::size_t max_buffer_bytes = std::size_t{64} << 20;
  HttpLimits limits;
};

// Connection counts, kept by the transport.
struct ConnectionCounters {
  std::atomic<std::int64_t> open{0};
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};    // over --max-connections, none idle to close
  // Closed, the longest idle, to make room for a new one at --max-connections.
  std::atomic<std::uint64_t> idle_closed{0};
  // Refused: over --max-connections-per-address from its address.
  std::atomic<std::uint64_t> address_refused{0};
  // Accepts that failed (the process's file limit, most likely).
  std::atomic<std::uint64_t> accept_failures{0};
  std::atomic<std::uint64_t> timed_out{0};  // slow or idle clients
  // Closed for holding answers it did not read while the connections' buffers were over
  // --max-buffer-memory.
  std::atomic<std::uint64_t> shed{0};
  // Bytes the connections hold in buffers: answers not taken yet (the session's and
  // those queued to the socket), input held back, requests arriving.
  std::atomic<std::int64_t> buffered{0};
  // Connections open per peer address (IPv6 by its /64), for --max-connections-per-address.
  std::mutex per_address_mutex;
  std::map<std::string, std::uint32_t, std::less<>> per_address;
};

// One listening socket on config.host:port (SO_REUSEPORT, not listening yet), or why not
// (`invalid` for a host that is no IP address).
Result<int> listen_socket(const Config& config, int port);
// Whether a socket of another process already listens on config.host:config.port: one of
// ours, with SO_REUSEPORT, would join it there and share its clients. Port 0 never is.
bool port_in_use(const Config& config);
// The port a socket is bound to.
int bound_port(int fd);

// The request handler of one loop, made on the loop (its thread's own: see app/router.h).
using HandlerFactory = std::function<std::unique_ptr<RequestHandler>(uv_loop_s* loop)>;

// One event loop on its own thread, serving the connections of one listening socket.
class HttpLoop {
 public:
  // Takes over `fd` (from listen_socket). The loop's handler comes from `handlers`, called
  // once, here; `counters` (shared by every loop) must outlive the loop.
  static std::unique_ptr<HttpLoop> create(const Config& config, const HandlerFactory& handlers,
                                          ConnectionCounters& counters, int fd);
  virtual ~HttpLoop() = default;
  // Listens and starts the thread, or says why it cannot.
  virtual Status start() = 0;
  // From any thread: stop accepting, finish what is in progress, then end.
  virtual void drain() = 0;
  // Waits for the thread to end (after drain()).
  virtual void join() = 0;
};

}  // namespace ratewin::server
