// The libuv transport: one loop per thread, each on its own SO_REUSEPORT socket, its
// connections' bytes through an HttpSession each and its requests to a Service worker.
// Connection slots, timeouts (request and idle), output bounds and draining live here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "http/http.h"
#include "service/service.h"

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

// One listening socket on config.host:port (SO_REUSEPORT, not listening yet); -1 and
// `error` on failure.
int listen_socket(const Config& config, int port, std::string& error);
// Whether a socket of another process already listens on config.host:config.port: one of
// ours, with SO_REUSEPORT, would join it there and share its clients. Port 0 never is.
bool port_in_use(const Config& config);
// The port a socket is bound to.
int bound_port(int fd);

// One event loop on its own thread, serving the connections of one listening socket.
class Worker {
 public:
  // Takes over `fd` (from listen_socket).
  static std::unique_ptr<Worker> create(const Config& config, Service& service, int fd);
  virtual ~Worker() = default;
  // Listens and starts the thread; false and `error` on failure.
  virtual bool start(std::string& error) = 0;
  // From any thread: stop accepting, finish what is in progress, then end.
  virtual void drain() = 0;
  // Waits for the thread to end (after drain()).
  virtual void join() = 0;
};

}  // namespace ratewin::server
