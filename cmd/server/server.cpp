// ratewin-server: HTTP/1.1 on libuv, one loop per thread on SO_REUSEPORT sockets, each
// request limited by the rules (see service.h). The main thread handles signals (SIGHUP
// reloads the rules, SIGTERM/SIGINT drain) and watches the rules file.
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "forward_auth.h"
#include "http.h"
#include "overrides.h"
#include "ratewin/engine.h"
#include "service.h"

namespace ratewin::server {
namespace {

struct Config {
  std::string host = "127.0.0.1";
  int port = 8080;
  unsigned threads = 2;
  std::size_t max_connections = 10000;
  std::uint64_t request_timeout_ms = 10000;
  std::uint64_t idle_timeout_ms = 30000;
  std::uint64_t drain_timeout_ms = 10000;
  HttpLimits limits;
};

std::atomic<int> log_threshold{static_cast<int>(LogLevel::info)};

void log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < log_threshold.load(std::memory_order_relaxed)) return;
  static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s ratewin-server %s: %.*s\n", stamp, kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

std::string uv_message(int code) { return uv_strerror(code); }

// One listening socket on the shared port; the kernel spreads connections over them.
int listen_socket(const Config& config, int port, std::string& error) {
  sockaddr_storage address{};
  int rc = uv_ip4_addr(config.host.c_str(), port, reinterpret_cast<sockaddr_in*>(&address));
  if (rc != 0) rc = uv_ip6_addr(config.host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&address));
  if (rc != 0) {
    error = "not an IP address: " + config.host;
    return -1;
  }
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  const socklen_t size =
      address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0) {
    error = "cannot listen on " + config.host + ":" + std::to_string(port) + ": " +
            std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  return address.ss_family == AF_INET
             ? ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port)
             : ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
}

class Worker;

struct Connection {
  Connection(Worker& w, RequestHandler& handler, const HttpLimits& limits)
      : worker(w), session(handler, {}, limits) {}
  Worker& worker;
  uv_tcp_t tcp{};
  uv_timer_t timer{};
  HttpSession session;
  std::size_t writes = 0;  // in flight
  bool reading = false;
  // The timer runs as the deadline of the request after this many completed ones (a
  // request completing, even in the same read as the next one starts, ends its deadline).
  std::optional<std::uint64_t> deadline_of;
  bool closing = false;
  int handles = 2;  // open libuv handles (tcp, timer)
};

struct WriteRequest {
  uv_write_t req{};
  std::string data;
};

class Worker {
 public:
  Worker(const Config& config, Service& service, int fd)
      : config_(config), service_(service), handler_(service.worker()) {
    uv_loop_init(&loop_);
    uv_tcp_init(&loop_, &listener_);
    listener_.data = this;
    uv_tcp_open(&listener_, fd);
    uv_async_init(&loop_, &wake_, on_wake);
    wake_.data = this;
    uv_timer_init(&loop_, &drain_timer_);
    drain_timer_.data = this;
  }
  ~Worker() {
    if (thread_.joinable()) thread_.join();
    uv_loop_close(&loop_);
  }

  bool start(std::string& error) {
    const int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 1024, on_connection);
    if (rc != 0) {
      error = "listen: " + uv_message(rc);
      return false;
    }
    thread_ = std::thread([this] {
      uv_run(&loop_, UV_RUN_DEFAULT);
      handler_.reset();
    });
    return true;
  }
  // From any thread: stop accepting, finish what is in progress, then end.
  void drain() {
    draining_.store(true, std::memory_order_release);
    uv_async_send(&wake_);
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  static void on_wake(uv_async_t* handle) {
    auto* self = static_cast<Worker*>(handle->data);
    if (!self->draining_.load(std::memory_order_acquire) || self->drain_started_) return;
    self->drain_started_ = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&self->listener_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->wake_), nullptr);
    uv_timer_start(&self->drain_timer_, on_drain_deadline, self->config_.drain_timeout_ms, 0);
    uv_unref(reinterpret_cast<uv_handle_t*>(&self->drain_timer_));
    const std::vector<Connection*> all(self->connections_.begin(), self->connections_.end());
    for (Connection* c : all) {
      if (c->session.drain()) self->flush(*c);
    }
    self->maybe_finish();
  }
  static void on_drain_deadline(uv_timer_t* timer) {
    auto* self = static_cast<Worker*>(timer->data);
    const std::vector<Connection*> all(self->connections_.begin(), self->connections_.end());
    if (!all.empty())
      log(LogLevel::warning, "drain deadline: closing " + std::to_string(all.size()) +
                                 " connection(s) still busy");
    for (Connection* c : all) self->close(*c);
    self->maybe_finish();
  }
  void maybe_finish() {
    if (drain_started_ && connections_.empty() && !drain_timer_closed_) {
      drain_timer_closed_ = true;
      uv_close(reinterpret_cast<uv_handle_t*>(&drain_timer_), nullptr);
    }
  }

  static void on_connection(uv_stream_t* server, int status) {
    auto* self = static_cast<Worker*>(server->data);
    if (status < 0) {
      log(LogLevel::warning, "accept: " + uv_message(status));
      return;
    }
    ConnectionCounters& counters = self->service_.connections();
    auto* c = new Connection(*self, *self->handler_, self->config_.limits);
    uv_tcp_init(&self->loop_, &c->tcp);
    uv_timer_init(&self->loop_, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) return self->close(*c);
    if (counters.open.load(std::memory_order_relaxed) >=
        static_cast<std::int64_t>(self->config_.max_connections)) {
      // Bounded: over the limit, a connection is closed at once (the client retries).
      counters.refused.fetch_add(1, std::memory_order_relaxed);
      return self->close(*c);
    }
    uv_tcp_nodelay(&c->tcp, 1);
    sockaddr_storage peer{};
    int size = sizeof peer;
    char name[64] = "unknown";
    if (uv_tcp_getpeername(&c->tcp, reinterpret_cast<sockaddr*>(&peer), &size) == 0) {
      if (peer.ss_family == AF_INET)
        uv_ip4_name(reinterpret_cast<sockaddr_in*>(&peer), name, sizeof name);
      else if (peer.ss_family == AF_INET6)
        uv_ip6_name(reinterpret_cast<sockaddr_in6*>(&peer), name, sizeof name);
    }
    c->session.set_peer(name);
    self->connections_.insert(c);
    counters.open.fetch_add(1, std::memory_order_relaxed);
    counters.accepted.fetch_add(1, std::memory_order_relaxed);
    self->start_reading(*c);
    self->arm(*c);
  }

  void start_reading(Connection& c) {
    if (c.reading || c.closing) return;
    c.reading = uv_read_start(reinterpret_cast<uv_stream_t*>(&c.tcp), on_alloc, on_read) == 0;
  }

  // The idle timeout between requests; the request timeout from a request's first byte.
  void arm(Connection& c) {
    if (c.closing) return;
    if (c.writes != 0 && !c.reading) {
      // Waiting for the client to take its responses: each write it takes restarts this.
      c.deadline_of.reset();
      uv_timer_start(&c.timer, on_timeout, config_.request_timeout_ms, 0);
    } else if (c.session.mid_request()) {
      if (c.deadline_of == c.session.requests()) return;
      c.deadline_of = c.session.requests();
      uv_timer_start(&c.timer, on_timeout, config_.request_timeout_ms, 0);
    } else {
      c.deadline_of.reset();
      uv_timer_start(&c.timer, on_timeout, config_.idle_timeout_ms, 0);
    }
  }

  static void on_alloc(uv_handle_t* handle, std::size_t, uv_buf_t* buf) {
    // Input is parsed before the next read: one buffer per loop serves every connection.
    auto& worker = static_cast<Connection*>(handle->data)->worker;
    *buf = uv_buf_init(worker.read_buffer_, sizeof worker.read_buffer_);
  }

  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* c = static_cast<Connection*>(stream->data);
    Worker& self = c->worker;
    if (nread < 0) {
      // The client is gone (or half-closed): what is being written still goes out.
      uv_read_stop(stream);
      c->reading = false;
      self.finish(*c);
      return;
    }
    if (nread == 0) return;
    const bool more = c->session.feed(std::string_view(buf->base, static_cast<std::size_t>(nread)));
    self.flush(*c);
    if (!more) return;
    self.pump(*c);
  }

  // After output went out: parses input held back while the output was full, for as
  // long as the socket takes the responses at once. A client that does not read its
  // responses is not read either; if it stays that way, its timer closes it.
  void pump(Connection& c) {
    while (c.session.blocked() && c.writes == 0 && !c.closing) {
      const bool more = c.session.resume();
      flush(c);
      if (!more) return;
    }
    if (c.closing) return;
    const bool backlog = c.session.blocked() ||
        uv_stream_get_write_queue_size(reinterpret_cast<uv_stream_t*>(&c.tcp)) > (1U << 20);
    if (backlog) {
      if (c.reading) uv_read_stop(reinterpret_cast<uv_stream_t*>(&c.tcp));
      c.reading = false;
    } else {
      start_reading(c);
    }
    arm(c);
  }

  static void on_timeout(uv_timer_t* timer) {
    auto* c = static_cast<Connection*>(timer->data);
    c->worker.service_.connections().timed_out.fetch_add(1, std::memory_order_relaxed);
    if (c->writes != 0) {
      // Its responses have not been taken for a whole timeout: a client that does not
      // read does not keep a connection (and its buffers).
      c->worker.close(*c);
      return;
    }
    c->session.timed_out();
    c->worker.flush(*c);
  }

  // Writes what the session produced; closes once the session is done and all is sent.
  // Most responses go out at once with uv_try_write (one system call, no allocation, no
  // completion callback, no change to the poll set); only what the socket does not take
  // is queued.
  void flush(Connection& c) {
    std::string& out = c.session.output();
    if (!out.empty() && !c.closing) {
      auto* stream = reinterpret_cast<uv_stream_t*>(&c.tcp);
      std::size_t sent = 0;
      if (c.writes == 0) {  // with writes queued, this must queue behind them
        const uv_buf_t all = uv_buf_init(out.data(), static_cast<unsigned>(out.size()));
        const int n = uv_try_write(stream, &all, 1);
        if (n < 0 && n != UV_EAGAIN && n != UV_ENOSYS) {
          close(c);
          return;
        }
        sent = n > 0 ? static_cast<std::size_t>(n) : 0;
      }
      if (sent < out.size()) {
        auto* w = new WriteRequest;
        w->data.assign(out, sent);
        w->req.data = &c;
        const uv_buf_t buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
        if (uv_write(&w->req, stream, &buf, 1, on_written) != 0) {
          delete w;
          close(c);
          return;
        }
        ++c.writes;
      }
    }
    out.clear();
    if (c.session.closing()) finish(c);
  }

  static void on_written(uv_write_t* req, int status) {
    std::unique_ptr<WriteRequest> w(reinterpret_cast<WriteRequest*>(req));
    auto* c = static_cast<Connection*>(req->data);
    --c->writes;
    Worker& self = c->worker;
    if (status < 0) {
      self.close(*c);
      return;
    }
    if (c->session.closing()) {
      self.finish(*c);
    } else {
      self.pump(*c);
    }
  }

  // Closes once the last write has gone (within the request timeout).
  void finish(Connection& c) {
    if (c.writes == 0) {
      close(c);
    } else if (!c.closing) {
      uv_timer_start(&c.timer, on_timeout, config_.request_timeout_ms, 0);
    }
  }

  void close(Connection& c) {
    if (c.closing) return;
    c.closing = true;
    if (connections_.erase(&c) != 0)
      service_.connections().open.fetch_sub(1, std::memory_order_relaxed);
    const auto closed = [](uv_handle_t* h) {
      auto* conn = static_cast<Connection*>(h->data);
      if (--conn->handles == 0) delete conn;
    };
    uv_close(reinterpret_cast<uv_handle_t*>(&c.timer), closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&c.tcp), closed);
    maybe_finish();
  }

  const Config& config_;
  Service& service_;
  std::unique_ptr<RequestHandler> handler_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_async_t wake_{};
  uv_timer_t drain_timer_{};
  std::atomic<bool> draining_{false};
  bool drain_started_ = false;
  bool drain_timer_closed_ = false;
  std::unordered_set<Connection*> connections_;
  std::thread thread_;
  char read_buffer_[64 * 1024];
};

// The main thread: signals and the rules file.
class Control {
 public:
  Control(Service& service, std::vector<std::unique_ptr<Worker>>& workers)
      : service_(service), workers_(workers) {
    uv_loop_init(&loop_);
    for (uv_signal_t* s : {&sigterm_, &sigint_, &sighup_}) {
      uv_signal_init(&loop_, s);
      s->data = this;
    }
    uv_signal_start(&sigterm_, on_stop, SIGTERM);
    uv_signal_start(&sigint_, on_stop, SIGINT);
    uv_signal_start(&sighup_, on_hup, SIGHUP);
    uv_timer_init(&loop_, &debounce_);
    debounce_.data = this;
    uv_fs_event_init(&loop_, &watch_);
    watch_.data = this;
    if (!service_.rules_path().empty()) {
      // The directory, not the file: editors and deploy tools replace the file (a new
      // inode), which a watch on the old one would miss.
      const std::filesystem::path path = std::filesystem::absolute(service_.rules_path());
      const int rc = uv_fs_event_start(&watch_, on_change, path.parent_path().c_str(), 0);
      if (rc != 0) log(LogLevel::warning, "cannot watch the rules file (SIGHUP still reloads): " + uv_message(rc));
    }
  }
  ~Control() { uv_loop_close(&loop_); }

  // Until a stop signal, and the workers have been told to drain.
  void run() { uv_run(&loop_, UV_RUN_DEFAULT); }
  // After the workers have ended: the signal handles go.
  void close() {
    for (uv_signal_t* h : {&sigterm_, &sigint_, &sighup_})
      uv_close(reinterpret_cast<uv_handle_t*>(h), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
  }

 private:
  static void on_stop(uv_signal_t* s, int signum) {
    auto* self = static_cast<Control*>(s->data);
    if (self->stopping_) {
      log(LogLevel::info, "already draining");  // a second signal must not kill us
      return;
    }
    self->stopping_ = true;
    log(LogLevel::info, std::string(signum == SIGTERM ? "SIGTERM" : "SIGINT") +
                            ": draining in-flight requests, then exiting");
    for (auto& w : self->workers_) w->drain();
    // The signal handles stay (a repeated signal is ignored) but no longer keep the
    // loop alive: it ends with the workers' drain.
    for (uv_signal_t* h : {&self->sigterm_, &self->sigint_, &self->sighup_})
      uv_unref(reinterpret_cast<uv_handle_t*>(h));
    for (uv_handle_t* h : {reinterpret_cast<uv_handle_t*>(&self->debounce_),
                           reinterpret_cast<uv_handle_t*>(&self->watch_)}) {
      if (!uv_is_closing(h)) uv_close(h, nullptr);
    }
  }
  static void on_hup(uv_signal_t* s, int) { static_cast<Control*>(s->data)->service_.reload("SIGHUP"); }
  static void on_change(uv_fs_event_t* handle, const char*, int, int status) {
    auto* self = static_cast<Control*>(handle->data);
    // Any change in the directory: the file may be reached through a symlink swapped
    // there (a Kubernetes ConfigMap). Unchanged bytes are not a new version.
    if (status < 0) return;
    // A save is often several events (truncate, write, rename): reload once they settle.
    uv_timer_start(&self->debounce_, on_settled, 100, 0);
  }
  static void on_settled(uv_timer_t* t) {
    static_cast<Control*>(t->data)->service_.reload("file changed");
  }

  Service& service_;
  std::vector<std::unique_ptr<Worker>>& workers_;
  uv_loop_t loop_{};
  uv_signal_t sigterm_{}, sigint_{}, sighup_{};
  uv_timer_t debounce_{};
  uv_fs_event_t watch_{};
  bool stopping_ = false;
};

bool parse_listen(const std::string& text, Config& config) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (end == text.c_str() + colon + 1 || *end != '\0' || port < 0 || port > 65535) return false;
  config.host = host;
  config.port = static_cast<int>(port);
  return true;
}

int run(int argc, char** argv) {
  cxxopts::Options cli("ratewin-server",
                       "An HTTP server that rate-limits every request by client key and endpoint "
                       "(a demo backend: allowed requests get 200 and a small JSON body), and "
                       "answers forward-auth checks for a gateway in front of other servers.");
  const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
  // clang-format off
  cli.add_options()
    ("listen", "Address and port to serve HTTP on (host:port; port 0 picks a free one, "
               "printed on stdout)", cxxopts::value<std::string>()->default_value("127.0.0.1:8080"))
    ("redis", "Share counts with every instance through this Redis "
              "(redis://[user[:password]@]host[:port][/db] or unix://...); without it, "
              "local-only", cxxopts::value<std::string>()->default_value(""))
    ("key-prefix", "Prefix of every Redis key and channel",
     cxxopts::value<std::string>()->default_value("ratewin"))
    ("rules", "YAML rules file (see cmd/server/rules.example.yaml); reloaded when it "
              "changes and on SIGHUP. Without it no request is limited",
     cxxopts::value<std::string>()->default_value(""))
    ("threads", "Event loops (each on its own SO_REUSEPORT socket)",
     cxxopts::value<unsigned>()->default_value(std::to_string(cores)))
    ("admin-token", "Enables the admin API (/admin/...), which then requires "
                    "'Authorization: Bearer <token>'. Also read from RATEWIN_ADMIN_TOKEN, "
                    "which keeps it out of the process list",
     cxxopts::value<std::string>()->default_value(""))
    ("trust-proxy", "CIDR[,CIDR...]: the proxies in front of this server. From a peer in "
                    "one of these ranges, X-Forwarded-For (its right-most entry that is not "
                    "itself a trusted proxy) and X-Real-IP name the client, and forward-auth "
                    "checks are answered; from any other peer they are ignored",
     cxxopts::value<std::string>()->default_value(""))
    ("check-path", "Forward-auth checks (nginx auth_request, Traefik ForwardAuth, Envoy "
                   "ext_authz) go to this path, the original request in X-Original-URI / "
                   "X-Original-Method or X-Forwarded-Uri / X-Forwarded-Method, or under it, "
                   "the original path after it (Envoy's path_prefix). Answered for "
                   "--trust-proxy peers only",
     cxxopts::value<std::string>()->default_value("/ratewin/check"))
    ("mode", "gateway: requests are limited, then answered by a demo backend; "
             "forward-auth: only checks are answered (other paths get 404)",
     cxxopts::value<std::string>()->default_value("gateway"))
    ("log-level", "debug, info, warning or error",
     cxxopts::value<std::string>()->default_value("info"))
    ("max-connections", "Client connections open at once; more are closed at once",
     cxxopts::value<std::size_t>()->default_value("10000"))
    ("request-timeout-ms", "Time a client has to send a whole request (408 after it)",
     cxxopts::value<std::uint64_t>()->default_value("10000"))
    ("idle-timeout-ms", "Keep-alive connections idle this long are closed",
     cxxopts::value<std::uint64_t>()->default_value("30000"))
    ("drain-timeout-ms", "On SIGTERM, connections still busy after this are closed",
     cxxopts::value<std::uint64_t>()->default_value("10000"))
    ("max-limiters", "Limiters the engine holds at most (least recently used evicted)",
     cxxopts::value<std::size_t>()->default_value("1000000"))
    ("h,help", "Print this help");
  // clang-format on
  cxxopts::ParseResult args;
  try {
    args = cli.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "ratewin-server: %s (see --help)\n", e.what());
    return 2;
  }
  if (args.count("help") != 0) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  const std::string level = args["log-level"].as<std::string>();
  const std::string levels[] = {"debug", "info", "warning", "error"};
  const auto found = std::find(std::begin(levels), std::end(levels), level);
  if (found == std::end(levels)) {
    std::fprintf(stderr, "ratewin-server: --log-level must be debug, info, warning or error\n");
    return 2;
  }
  log_threshold = static_cast<int>(found - std::begin(levels));

  Config config;
  if (!parse_listen(args["listen"].as<std::string>(), config)) {
    std::fprintf(stderr, "ratewin-server: --listen must be host:port\n");
    return 2;
  }
  config.threads = args["threads"].as<unsigned>();
  config.max_connections = args["max-connections"].as<std::size_t>();
  config.request_timeout_ms = args["request-timeout-ms"].as<std::uint64_t>();
  config.idle_timeout_ms = args["idle-timeout-ms"].as<std::uint64_t>();
  config.drain_timeout_ms = args["drain-timeout-ms"].as<std::uint64_t>();
  if (config.threads == 0 || config.threads > 256 || config.max_connections == 0 ||
      config.request_timeout_ms == 0 || config.idle_timeout_ms == 0) {
    std::fprintf(stderr, "ratewin-server: --threads must be 1..256; counts and timeouts above 0\n");
    return 2;
  }

  ServiceOptions service_options;
  service_options.rules_path = args["rules"].as<std::string>();
  service_options.admin_token = args["admin-token"].as<std::string>();
  if (service_options.admin_token.empty()) {
    if (const char* env = std::getenv("RATEWIN_ADMIN_TOKEN")) service_options.admin_token = env;
  }
  service_options.check_path = args["check-path"].as<std::string>();
  if (const std::string problem = check_path_problem(service_options.check_path);
      !problem.empty()) {
    std::fprintf(stderr, "ratewin-server: --check-path %s: %s\n",
                 service_options.check_path.c_str(), problem.c_str());
    return 2;
  }
  const std::string mode = args["mode"].as<std::string>();
  if (mode != "gateway" && mode != "forward-auth") {
    std::fprintf(stderr, "ratewin-server: --mode must be gateway or forward-auth\n");
    return 2;
  }
  service_options.forward_auth_only = mode == "forward-auth";
  if (args.count("trust-proxy") != 0) {
    std::string error;
    std::optional<AddressRanges> ranges =
        AddressRanges::parse(args["trust-proxy"].as<std::string>(), error);
    if (!ranges) {
      std::fprintf(stderr, "ratewin-server: --trust-proxy: %s\n", error.c_str());
      return 2;
    }
    service_options.trusted_proxies = std::move(*ranges);
  }

  Options engine_options;
  engine_options.redis = args["redis"].as<std::string>();
  engine_options.key_prefix = args["key-prefix"].as<std::string>();
  engine_options.max_limiters = args["max-limiters"].as<std::size_t>();
  engine_options.logger = log;

  // A peer that resets its connection while a response is being written must not end
  // the process (libuv writes without MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);
  // Until the control loop handles them, the stop and reload signals wait (a SIGHUP
  // from a deploy tool during start-up would otherwise end the process); threads
  // started meanwhile inherit the mask and never receive them.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  try {
    Engine engine(engine_options);
    Overrides overrides(engine_options.redis, engine_options.key_prefix, log);
    Service service(engine, overrides, service_options, log);

    std::vector<std::unique_ptr<Worker>> workers;
    int port = config.port;
    for (unsigned i = 0; i < config.threads; ++i) {
      std::string error;
      const int fd = listen_socket(config, port, error);
      if (fd < 0) {
        log(LogLevel::error, error);
        for (auto& w : workers) w->drain();
        return 1;
      }
      if (i == 0) port = bound_port(fd);  // port 0: the others share the one picked
      workers.push_back(std::make_unique<Worker>(config, service, fd));
      if (!workers.back()->start(error)) {
        log(LogLevel::error, error);
        for (auto& w : workers) w->drain();
        return 1;
      }
    }
    Control control(service, workers);
    std::printf("ratewin-server listening on %s:%d (%u threads, %s, rules %s)\n",
                config.host.c_str(), port, config.threads,
                engine_options.redis.empty() ? "local-only" : "Redis",
                service.rules()->version().c_str());
    std::fflush(stdout);
    // From here on the signals reach this thread (and only it: every other thread was
    // started with them blocked).
    pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
    control.run();
    for (auto& w : workers) w->join();
    control.close();
    log(LogLevel::info, "drained; exiting");
    return 0;
  } catch (const RulesError& e) {
    log(LogLevel::error, std::string("rules: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    log(LogLevel::error, e.what());
    return 1;
  }
}

}  // namespace
}  // namespace ratewin::server

int main(int argc, char** argv) { return ratewin::server::run(argc, argv); }
