// The libuv transport: one loop per thread, each on its own SO_REUSEPORT socket of every
// port served (HTTP/1.1, and gRPC over HTTP/2), its connections' bytes through a Session
// each (an HttpSession, or a GrpcSession) and their requests to the handlers the loop was
// given. Connection slots, timeouts (request and idle), buffer bounds and draining live
// here, one set for both protocols, and their counts (ConnectionCounters).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/outcome.h"
#include "http/grpc_session.h"
#include "http/http.h"
#include "http/server_tls.h"

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
  // gRPC's own (its answer timeout, buffer count and clock are the transport's).
  GrpcLimits grpc;
};

// Connection counts, kept by the transport.
struct ConnectionCounters {
  std::atomic<std::int64_t> open{0};
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> refused{0};    // over --max-connections, none idle to close
  // Closed, the longest idle, to make room for a new one at --max-connections.
  std::atomic<std::uint64_t> idle_closed{0};
  // Closed, none being idle, the one that had waited longest for a request to come whole,
  // to make room for a new one at --max-connections.
  std::atomic<std::uint64_t> slow_closed{0};
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

// One listening socket on host:port (SO_REUSEPORT, not listening yet), or why not
// (`invalid` for a host that is no IP address).
Result<int> listen_socket(const std::string& host, int port);
// Whether a socket of another process already listens on host:port: one of ours, with
// SO_REUSEPORT, would join it there and share its clients. Port 0 never is.
bool port_in_use(const std::string& host, int port);
// A Unix socket bound to `path` (not listening yet), or why not. A socket file that no
// process listens on (one a server left) is replaced; a live one, or a file that is not a
// socket, is refused.
Result<int> listen_unix_socket(const std::string& path);
// The port a socket is bound to.
int bound_port(int fd);

// The handlers of one loop, made on the loop (its thread's own: see app/router.h): one per
// protocol it serves.
struct LoopHandlers {
  std::unique_ptr<RequestHandler> http;  // for Protocol::http1 listeners
  std::unique_ptr<GrpcHandler> grpc;     // for Protocol::grpc listeners
};
using HandlerFactory = std::function<LoopHandlers(uv_loop_s* loop)>;

enum class Protocol : std::uint8_t { http1, grpc };

// A listening socket (from listen_socket or listen_unix_socket) and what its connections
// speak. Each loop takes its own descriptor (a Unix socket's: a dup of one, the loops
// then sharing its clients).
struct Listener {
  int fd = -1;
  Protocol protocol = Protocol::http1;
  bool unix_socket = false;  // its clients have no address: no per-address bound
  std::shared_ptr<ServerTls> tls;  // not null: its connections speak TLS (shared by the loops)
};

// One event loop on its own thread, serving the connections of its listening sockets.
class HttpLoop {
 public:
  // Takes over the listeners' sockets. The loop's handlers come from `handlers`, called
  // once, here (one for each protocol of `listeners`); `counters` (shared by every loop)
  // must outlive the loop.
  static std::unique_ptr<HttpLoop> create(const Config& config, const HandlerFactory& handlers,
                                          ConnectionCounters& counters,
                                          const std::vector<Listener>& listeners);
  virtual ~HttpLoop() = default;
  // Listens and starts the thread, or says why it cannot.
  virtual Status start() = 0;
  // From any thread: stop accepting, finish what is in progress, then end.
  virtual void drain() = 0;
  // Waits for the thread to end (after drain()).
  virtual void join() = 0;
};

}  // namespace ratewin::server
