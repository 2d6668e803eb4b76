#include "http/http_loops.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/log.h"

namespace ratewin::server {

namespace {

std::string uv_message(int code) { return uv_strerror(code); }

class UvHttpLoop;

struct Connection {
  Connection(UvHttpLoop& w, std::unique_ptr<Session> s) : owner(w), session(std::move(s)) {}
  UvHttpLoop& owner;
  // The client's socket: TCP, or a Unix socket's (a listener on a path).
  union Handle {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } handle{};
  uv_stream_t* stream() noexcept { return reinterpret_cast<uv_stream_t*>(&handle); }
  uv_timer_t timer{};
  std::unique_ptr<Session> session;
  std::size_t writes = 0;  // in flight
  std::size_t queued = 0;  // bytes of the writes in flight
  std::size_t counted = 0;  // bytes of this connection in ConnectionCounters::buffered
  bool reading = false;
  bool input_ended = false;  // the client sent EOF (or its stream failed)
  // The timer runs as the request timeout of what this key named when it started (see
  // arm()): a request completing, even in the same read as the next one starts, ends its
  // deadline.
  std::optional<std::uint64_t> deadline_of;
  // The timer runs as the idle timeout, from `idle_since` (loop time, ms): a request
  // answered at once moves idle_since instead of the timer, which, when it fires early,
  // waits the rest (one timer update per idle period, not per request).
  bool idle = false;
  std::uint64_t idle_since = 0;
  // When the idle timer fires (loop time): the idle timeout, or sooner for a deadline of a
  // stream the session keeps open (Session::idle_wait_ms).
  std::uint64_t idle_due = 0;
  // Its place in the loop's list of idle connections, longest idle first (while idle).
  std::list<Connection*>::iterator idle_at;
  // Its place in the loop's list of connections waiting for a request to come whole (or
  // for their first), the longest waiting first (while waiting).
  std::list<Connection*>::iterator waiting_at;
  // Its peer's key in ConnectionCounters::per_address (empty: not counted there).
  std::string address;
  bool closing = false;
  // The timer runs as the wait for the client to take what was written (arm()'s first
  // branch, finish()): when it fires with writes still queued, the client is the slow one.
  // Otherwise a write in flight when it fires (a gRPC call's own short deadline) is no
  // reason to close.
  bool write_wait = false;
  bool yielded = false;  // its read stopped to let the loop's other connections have theirs
  int handles = 2;  // open libuv handles (tcp, timer)
};

// A listening socket of the loop, and what its connections speak.
struct ListenSocket {
  UvHttpLoop* owner = nullptr;
  Protocol protocol = Protocol::http1;
  bool unix_socket = false;
  std::shared_ptr<ServerTls> tls;  // null: plain
  Connection::Handle handle{};
  uv_stream_t* stream() noexcept { return reinterpret_cast<uv_stream_t*>(&handle); }
};

struct WriteRequest {
  uv_write_t req{};
  std::string data;
};

class UvHttpLoop final : public HttpLoop {
 public:
  UvHttpLoop(const Config& config, const HandlerFactory& handlers, ConnectionCounters& counters,
             const std::vector<Listener>& listeners)
      : config_(config), counters_(counters) {
    uv_loop_init(&loop_);
    handlers_ = handlers(&loop_);
    grpc_limits_ = config.grpc;
    grpc_limits_.answer_timeout_ms = config.request_timeout_ms;
    grpc_limits_.buffered = &counters.buffered;
    grpc_limits_.max_buffered = static_cast<std::int64_t>(config.max_buffer_bytes);
    grpc_limits_.now = [loop = &loop_] { return uv_now(loop); };
    for (const Listener& l : listeners) {
      auto& socket = *listeners_.emplace_back(std::make_unique<ListenSocket>());
      socket.owner = this;
      socket.protocol = l.protocol;
      socket.unix_socket = l.unix_socket;
      socket.tls = l.tls;
      int opened = 0;
      if (l.unix_socket) {
        uv_pipe_init(&loop_, &socket.handle.pipe, 0);
        opened = uv_pipe_open(&socket.handle.pipe, l.fd);
      } else {
        uv_tcp_init(&loop_, &socket.handle.tcp);
        opened = uv_tcp_open(&socket.handle.tcp, l.fd);
      }
      if (opened != 0 && open_failure_.ok())  // (start() says so)
        open_failure_ = Status(Status::Code::io, "listening socket: " + uv_message(opened));
      socket.stream()->data = &socket;
    }
    uv_async_init(&loop_, &wake_, on_wake);
    wake_.data = this;
    uv_timer_init(&loop_, &drain_timer_);
    drain_timer_.data = this;
    uv_check_init(&loop_, &resume_yielded_);
    resume_yielded_.data = this;
  }
  ~UvHttpLoop() override {
    if (thread_.joinable()) thread_.join();
    uv_loop_close(&loop_);
  }

  Status start() override {
    if (!open_failure_.ok()) return open_failure_;
    for (const auto& socket : listeners_) {
      const int rc = uv_listen(socket->stream(), 1024, on_connection);
      if (rc != 0) return Status(Status::Code::io, "listen: " + uv_message(rc));
    }
    thread_ = std::thread([this] {
      uv_run(&loop_, UV_RUN_DEFAULT);
      handlers_ = LoopHandlers();
    });
    return {};
  }
  // From any thread: stop accepting, finish what is in progress, then end.
  void drain() override {
    draining_.store(true, std::memory_order_release);
    uv_async_send(&wake_);
  }
  void join() override {
    if (thread_.joinable()) thread_.join();
  }

 private:
  static void on_wake(uv_async_t* handle) {
    auto* self = static_cast<UvHttpLoop*>(handle->data);
    if (!self->draining_.load(std::memory_order_acquire) || self->drain_started_) return;
    self->drain_started_ = true;
    for (const auto& socket : self->listeners_)
      uv_close(reinterpret_cast<uv_handle_t*>(socket->stream()), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->wake_), nullptr);
    uv_timer_start(&self->drain_timer_, on_drain_deadline, self->config_.drain_timeout_ms, 0);
    uv_unref(reinterpret_cast<uv_handle_t*>(&self->drain_timer_));
    const std::vector<Connection*> all(self->connections_.begin(), self->connections_.end());
    for (Connection* c : all) {
      c->session->drain();
      self->flush(*c);  // (gRPC's GOAWAY goes now, its calls in flight still answered)
    }
    // The streams the gRPC handler keeps open (Health/Watch) are told and end, their
    // connections closing as they do (through on_answer).
    if (self->handlers_.grpc) self->handlers_.grpc->drain();
    self->maybe_finish();
  }
  static void on_drain_deadline(uv_timer_t* timer) {
    auto* self = static_cast<UvHttpLoop*>(timer->data);
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
      uv_close(reinterpret_cast<uv_handle_t*>(&resume_yielded_), nullptr);
      // Their connections to Redis: then the loop ends.
      if (handlers_.http) handlers_.http->close();
      if (handlers_.grpc) handlers_.grpc->close();
    }
  }

  static void on_connection(uv_stream_t* server, int status) {
    const auto& socket = *static_cast<ListenSocket*>(server->data);
    UvHttpLoop* self = socket.owner;
    ConnectionCounters& counters = self->counters_;
    if (status < 0) {
      // Most likely the process's file limit (EMFILE): logged once a minute at most, with
      // how many failed since, rather than once per attempt (or not at all).
      counters.accept_failures.fetch_add(1, std::memory_order_relaxed);
      ++self->accept_failures_unlogged_;
      const std::uint64_t now = uv_now(&self->loop_);
      if (self->accept_failure_logged_ == 0 || now - self->accept_failure_logged_ >= 60'000) {
        log(LogLevel::warning,
            "accept: " + uv_message(status) + " (" +
                std::to_string(self->accept_failures_unlogged_) +
                " failed since the last message; at the process's file limit, raise "
                "LimitNOFILE or ulimit -n, or lower --max-connections)");
        self->accept_failure_logged_ = now;
        self->accept_failures_unlogged_ = 0;
      }
      return;
    }
    std::unique_ptr<Session> session = self->session(socket.protocol);
    bool refuse = false;
    if (socket.tls) {
      session = socket.tls->wrap(std::move(session));
      if (!session) {  // (OpenSSL is out of memory: accepted, to be closed at once)
        session = self->session(socket.protocol);
        refuse = true;
      }
    }
    auto* c = new Connection(*self, std::move(session));
    if (socket.unix_socket) {
      uv_pipe_init(&self->loop_, &c->handle.pipe, 0);
    } else {
      uv_tcp_init(&self->loop_, &c->handle.tcp);
    }
    uv_timer_init(&self->loop_, &c->timer);
    c->stream()->data = c;
    c->timer.data = c;
    c->idle_at = self->idle_.end();
    c->waiting_at = self->waiting_.end();
    if (uv_accept(server, c->stream()) != 0 || refuse) return self->close(*c);
    sockaddr_storage peer{};  // (a Unix socket's peer: no address, no per-address bound)
    char name[64] = "unix";
    int size = sizeof peer;
    if (!socket.unix_socket) {
      uv_tcp_nodelay(&c->handle.tcp, 1);
      std::strcpy(name, "unknown");
    }
    if (!socket.unix_socket &&
        uv_tcp_getpeername(&c->handle.tcp, reinterpret_cast<sockaddr*>(&peer), &size) == 0) {
      if (peer.ss_family == AF_INET)
        uv_ip4_name(reinterpret_cast<sockaddr_in*>(&peer), name, sizeof name);
      else if (peer.ss_family == AF_INET6)
        uv_ip6_name(reinterpret_cast<sockaddr_in6*>(&peer), name, sizeof name);
    }
    if (self->config_.max_connections_per_address != 0 && !self->count_address(*c, peer)) {
      counters.address_refused.fetch_add(1, std::memory_order_relaxed);
      return self->close(*c);
    }
    if (counters.open.load(std::memory_order_relaxed) >=
        static_cast<std::int64_t>(self->config_.max_connections)) {
      // Bounded. At the bound, the connection idle the longest (between requests) makes
      // room: keep-alive connections that ask now and then must not hold every slot.
      // With none idle, the one that has waited longest for a request to come whole (or
      // for its first): clients that send nothing, or a byte now and then, must not hold
      // them either, each until its request timeout. With neither, the new one is closed
      // at once (the client retries).
      if (!self->idle_.empty()) {
        counters.idle_closed.fetch_add(1, std::memory_order_relaxed);
        self->close(*self->idle_.front());
      } else if (!self->waiting_.empty()) {
        counters.slow_closed.fetch_add(1, std::memory_order_relaxed);
        self->close(*self->waiting_.front());
      } else {
        counters.refused.fetch_add(1, std::memory_order_relaxed);
        return self->close(*c);
      }
    }
    c->session->set_peer(name);
    // A deferred answer landed: write it out (and go on parsing what waited for it).
    c->session->on_answer([c] {
      if (c->closing) return;
      c->owner.flush(*c);
      c->owner.pump(*c);
    });
    self->connections_.insert(c);
    counters.open.fetch_add(1, std::memory_order_relaxed);
    counters.accepted.fetch_add(1, std::memory_order_relaxed);
    self->start_reading(*c);
    self->arm(*c);
  }

  // Counts the connection against its peer's address (an IPv6 one by its /64: one host
  // holds a whole /64); false, counting nothing, when the address has its most.
  bool count_address(Connection& c, const sockaddr_storage& peer) {
    std::string key;
    if (peer.ss_family == AF_INET) {
      const auto& a = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
      key.assign(reinterpret_cast<const char*>(&a), sizeof a);
    } else if (peer.ss_family == AF_INET6) {
      const auto& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
      const bool mapped = IN6_IS_ADDR_V4MAPPED(&a);
      key.assign(reinterpret_cast<const char*>(&a) + (mapped ? 12 : 0), mapped ? 4 : 8);
    } else {
      return true;
    }
    std::lock_guard lock(counters_.per_address_mutex);
    std::uint32_t& open = counters_.per_address[key];
    if (open >= config_.max_connections_per_address) {
      if (open == 0) counters_.per_address.erase(key);
      return false;
    }
    ++open;
    c.address = std::move(key);
    return true;
  }

  void uncount_address(Connection& c) {
    if (c.address.empty()) return;
    std::lock_guard lock(counters_.per_address_mutex);
    const auto it = counters_.per_address.find(c.address);
    if (it != counters_.per_address.end() && --it->second == 0) counters_.per_address.erase(it);
    c.address.clear();
  }

  // Idle: at the end of the list (a connection idle again, or answered at once while
  // idle, moves there); busy: out of it.
  void set_idle(Connection& c, bool idle) {
    if (c.idle_at != idle_.end()) {
      idle_.erase(c.idle_at);
      c.idle_at = idle_.end();
    }
    if (idle) c.idle_at = idle_.insert(idle_.end(), &c);
  }

  // Waiting for a request: at the end of the list when it starts waiting, where it stays
  // until the request is whole (so the front has waited longest); out of it otherwise.
  void set_waiting(Connection& c, bool waiting) {
    if (waiting == (c.waiting_at != waiting_.end())) return;
    if (waiting) {
      c.waiting_at = waiting_.insert(waiting_.end(), &c);
    } else {
      waiting_.erase(c.waiting_at);
      c.waiting_at = waiting_.end();
    }
  }

  void start_reading(Connection& c) {
    if (c.reading || c.closing || c.input_ended || c.yielded) return;
    c.reading = uv_read_start(c.stream(), on_alloc, on_read) == 0;
  }

  // The request timeout runs from a connection's accept until its first request is in,
  // from the first byte of each later request, and while answers are owed (unless they
  // have waits of their own, HttpSession::owed_wait_ms: an answer owed to the server's
  // own slow work, a reload's parse, is not cut by the request timeout but given late,
  // see Reply::defer); the idle timeout only between requests, once one has been
  // answered. So a client that sends nothing holds its slot no longer than one that
  // sends slowly. Streams a session keeps open (gRPC's Health/Watch) owe no answer: their
  // connection is idle, evictable as idle, its timer running to the first of the idle
  // timeout and their deadlines (Session::idle_wait_ms); the session, timed out, ends what
  // is due and says whether the connection goes on.
  void arm(Connection& c) {
    if (c.closing || c.session->closing()) return;  // finish() keeps the time left to write
    const Session& s = *c.session;
    if (c.writes != 0 && !c.reading && !c.input_ended) {
      // Waiting for the client to take its responses: each write it takes restarts this.
      c.deadline_of.reset();
      c.idle = false;
      c.write_wait = true;
      set_idle(c, false);
      set_waiting(c, false);
      uv_timer_start(&c.timer, on_timeout, config_.request_timeout_ms, 0);
      return;
    }
    c.write_wait = false;
    if (s.mid_request() || s.requests() == 0 || s.pending() != 0) {
      // What the deadline is of: the request being received (or the first to come), else
      // the answers owed after the requests received so far.
      const bool receiving = s.mid_request() || s.requests() == 0;
      set_waiting(c, receiving);
      const std::uint64_t key = s.deadline_key();
      if (c.deadline_of == key) return;
      c.deadline_of = key;
      c.idle = false;
      set_idle(c, false);
      uv_timer_start(&c.timer, on_timeout,
                     receiving ? s.receiving_wait_ms(config_.request_timeout_ms)
                               : s.owed_wait_ms(config_.request_timeout_ms),
                     0);
    } else {
      c.deadline_of.reset();
      const std::uint64_t now = uv_now(&loop_);
      c.idle_since = now;
      set_idle(c, true);
      set_waiting(c, false);
      const std::uint64_t due = now + s.idle_wait_ms(config_.idle_timeout_ms);
      if (c.idle && c.idle_due <= due) return;  // the timer runs already, due no later
      c.idle = true;
      c.idle_due = due;
      uv_timer_start(&c.timer, on_timeout, due - now, 0);
    }
  }

  static void on_alloc(uv_handle_t* handle, std::size_t, uv_buf_t* buf) {
    // Input is parsed before the next read: one buffer per loop serves every connection.
    auto& owner = static_cast<Connection*>(handle->data)->owner;
    *buf = uv_buf_init(owner.read_buffer_, sizeof owner.read_buffer_);
  }

  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* c = static_cast<Connection*>(stream->data);
    UvHttpLoop& self = c->owner;
    if (nread < 0) {
      // The client is gone (or half-closed): what is being written still goes out, and
      // the answers owed to it (within the request timeout).
      uv_read_stop(stream);
      c->reading = false;
      c->input_ended = true;
      c->session->input_ended();
      self.flush(*c);
      self.arm(*c);
      return;
    }
    if (nread == 0) return;
    const bool more = c->session->feed(std::string_view(buf->base, static_cast<std::size_t>(nread)));
    self.flush(*c);
    if (!more) {
      self.arm(*c);  // answers may still be owed
      return;
    }
    self.pump(*c);
    // A full read: more is likely waiting, and libuv would read it in this same callback
    // (up to 32 reads). The connection yields instead, and reads again after the loop has
    // polled the others: a client pipelining a flood gets a read per turn like every other
    // connection of its loop, whose requests would otherwise wait (and time out) behind it.
    if (static_cast<std::size_t>(nread) == sizeof self.read_buffer_ && c->reading) self.yield(*c);
  }

  void yield(Connection& c) {
    uv_read_stop(c.stream());
    c.reading = false;
    c.yielded = true;
    if (yielded_.empty()) uv_check_start(&resume_yielded_, on_resume_yielded);
    yielded_.push_back(&c);
  }

  // After the loop's poll: the connections that yielded read again at the next one.
  static void on_resume_yielded(uv_check_t* handle) {
    auto* self = static_cast<UvHttpLoop*>(handle->data);
    uv_check_stop(handle);
    std::vector<Connection*> resumed;
    resumed.swap(self->yielded_);
    for (Connection* c : resumed) {
      c->yielded = false;
      self->pump(*c);  // reads again unless its answers are not being taken
    }
  }

  // After output went out (or an answer landed): parses input held back while the
  // output was full or answers were owed, for as long as the socket takes the responses
  // at once. A client that does not read its responses is not read either; if it stays
  // that way, its timer closes it.
  void pump(Connection& c) {
    while (c.session->blocked() && c.writes == 0 && !c.closing) {
      const std::uint64_t before = c.session->requests();
      const bool more = c.session->resume();
      flush(c);
      if (!more) break;
      if (c.session->requests() == before && c.session->blocked()) break;  // answers owed
    }
    if (c.closing) return;
    // Answers not taken: no more is read until they are (per connection, at most
    // kOutputCap in the session and as much queued to the socket, plus a read held back).
    const bool backlog = c.session->blocked() || c.queued > Session::kOutputCap;
    if (backlog) {
      if (c.reading) uv_read_stop(c.stream());
      c.reading = false;
      if (c.queued != 0 &&
          counters_.buffered.load(std::memory_order_relaxed) >
              static_cast<std::int64_t>(config_.max_buffer_bytes)) {
        // The connections' buffers are over their bound: one whose client does not take
        // its answers goes (a slow reader among many, or one of a flood of them).
        counters_.shed.fetch_add(1, std::memory_order_relaxed);
        close(c);
        return;
      }
    } else {
      start_reading(c);
    }
    arm(c);
  }

  // Brings the connection's part of ConnectionCounters::buffered up to date, giving back
  // the output buffer's memory once it has grown past the cap.
  void account(Connection& c) {
    std::string& out = c.session->output();
    if (out.empty() && out.capacity() > Session::kOutputCap) std::string().swap(out);
    const std::size_t now = c.closing ? 0 : c.session->buffered() + c.queued;
    if (now == c.counted) return;
    counters_.buffered.fetch_add(
        static_cast<std::int64_t>(now) - static_cast<std::int64_t>(c.counted),
        std::memory_order_relaxed);
    c.counted = now;
  }

  static void on_timeout(uv_timer_t* timer) {
    auto* c = static_cast<Connection*>(timer->data);
    if (c->idle) {
      const std::uint64_t now = uv_now(timer->loop);
      const std::uint64_t idle_for = now - c->idle_since;
      const std::uint64_t timeout = c->owner.config_.idle_timeout_ms;
      // It has been busy since the timer started: it waits the rest, unless a stream its
      // session keeps open is due.
      const std::uint64_t rest =
          idle_for < timeout ? c->session->idle_wait_ms(timeout - idle_for) : 0;
      if (rest != 0) {
        c->idle_due = now + rest;
        uv_timer_start(timer, on_timeout, rest, 0);
        return;
      }
      c->idle = false;
      c->owner.set_idle(*c, false);
    }
    std::atomic<std::uint64_t>& timed_out = c->owner.counters_.timed_out;
    if (c->writes != 0 && c->write_wait) {
      // Its responses have not been taken for a whole timeout: a client that does not
      // read does not keep a connection (and its buffers).
      timed_out.fetch_add(1, std::memory_order_relaxed);
      c->owner.close(*c);
      return;
    }
    if (!c->session->timed_out()) {
      // Late answers stood in for the answers owed (the server's own work outlasted its
      // wait): the client was not the slow one, and its connection goes on.
      c->owner.flush(*c);
      if (!c->closing) c->owner.pump(*c);
      return;
    }
    timed_out.fetch_add(1, std::memory_order_relaxed);
    c->owner.flush(*c);
  }

  // Writes what the session produced; closes once the session is done and all is sent.
  // Most responses go out at once with uv_try_write (one system call, no allocation, no
  // completion callback, no change to the poll set); only what the socket does not take
  // is queued.
  void flush(Connection& c) {
    std::string& out = c.session->output();
    if (!out.empty() && !c.closing) {
      uv_stream_t* stream = c.stream();
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
        c.queued += w->data.capacity();
      }
    }
    out.clear();
    account(c);
    if (c.session->closing()) finish(c);
  }

  static void on_written(uv_write_t* req, int status) {
    std::unique_ptr<WriteRequest> w(reinterpret_cast<WriteRequest*>(req));
    auto* c = static_cast<Connection*>(req->data);
    --c->writes;
    c->queued -= w->data.capacity();
    UvHttpLoop& self = c->owner;
    self.account(*c);
    if (status < 0) {
      self.close(*c);
      return;
    }
    if (c->session->closing()) {
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
      c.idle = false;
      c.write_wait = true;
      set_idle(c, false);
      uv_timer_start(&c.timer, on_timeout, config_.request_timeout_ms, 0);
    }
  }

  void close(Connection& c) {
    if (c.closing) return;
    c.closing = true;
    if (c.yielded) {
      c.yielded = false;
      yielded_.erase(std::find(yielded_.begin(), yielded_.end(), &c));
    }
    account(c);  // (gives back its part)
    set_idle(c, false);
    set_waiting(c, false);
    uncount_address(c);
    if (connections_.erase(&c) != 0)
      counters_.open.fetch_sub(1, std::memory_order_relaxed);
    const auto closed = [](uv_handle_t* h) {
      auto* conn = static_cast<Connection*>(h->data);
      if (--conn->handles == 0) delete conn;
    };
    uv_close(reinterpret_cast<uv_handle_t*>(&c.timer), closed);
    uv_close(reinterpret_cast<uv_handle_t*>(c.stream()), closed);
    maybe_finish();
  }

  // A new connection's session, for what its listener speaks.
  std::unique_ptr<Session> session(Protocol protocol) {
    if (protocol == Protocol::grpc)
      return std::make_unique<GrpcSession>(*handlers_.grpc, std::string(), grpc_limits_);
    return std::make_unique<HttpSession>(*handlers_.http, std::string(), config_.limits);
  }

  const Config& config_;
  ConnectionCounters& counters_;
  LoopHandlers handlers_;
  GrpcLimits grpc_limits_;  // the configured ones, with this loop's clock and counts
  uv_loop_t loop_{};
  std::vector<std::unique_ptr<ListenSocket>> listeners_;
  Status open_failure_;  // a listener's socket the loop could not take
  uv_async_t wake_{};
  uv_timer_t drain_timer_{};
  uv_check_t resume_yielded_{};
  std::vector<Connection*> yielded_;  // their reads resume after the loop's next poll
  std::atomic<bool> draining_{false};
  bool drain_started_ = false;
  bool drain_timer_closed_ = false;
  std::unordered_set<Connection*> connections_;
  std::list<Connection*> idle_;  // idle connections, the longest idle first
  // Connections waiting for a request to come whole, the longest waiting first.
  std::list<Connection*> waiting_;
  std::uint64_t accept_failure_logged_ = 0;  // loop time of the last message (0: none)
  std::uint64_t accept_failures_unlogged_ = 0;
  std::thread thread_;
  // (16 KiB: what a connection reads while its answers are not taken is held back, up to
  // a read.)
  char read_buffer_[16 * 1024];
};

}  // namespace

// The kernel spreads connections over the sockets sharing a port.
namespace {

// A TCP socket bound to host:port (SO_REUSEADDR, and SO_REUSEPORT when `shared`), or why
// not (errno kept, for port_in_use()).
Result<int> bound_socket(const std::string& host, int port, bool shared) {
  sockaddr_storage address{};
  int rc = uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(&address));
  if (rc != 0) rc = uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&address));
  if (rc != 0) {
    Status refused = invalid("not an IP address: " + host);
    errno = EINVAL;
    return refused;
  }
  const int fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int socket_errno = errno;
    Status failed(Status::Code::io, std::string("socket: ") + std::strerror(socket_errno));
    errno = socket_errno;
    return failed;
  }
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (shared) ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  const socklen_t size =
      address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0) {
    const int bind_errno = errno;
    Status failed(Status::Code::io, "cannot listen on " + host + ":" + std::to_string(port) + ": " +
                                        std::strerror(bind_errno));
    ::close(fd);
    errno = bind_errno;
    return failed;
  }
  return fd;
}

}  // namespace

Result<int> listen_socket(const std::string& host, int port) {
  return bound_socket(host, port, true);
}

Result<int> listen_unix_socket(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return invalid("a Unix socket's path must be 1 to " +
                   std::to_string(sizeof address.sun_path - 1) + " bytes: " + path);
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const auto* where = reinterpret_cast<const sockaddr*>(&address);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Status(Status::Code::io, "cannot listen on unix:" + path + ": not a socket file");
    // (Non-blocking: a listener whose backlog is full answers EAGAIN at once, and is
    // live; only a socket nobody listens on refuses.)
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) return Status(Status::Code::io, std::string("socket: ") + std::strerror(errno));
    const int connected = ::connect(probe, where, sizeof address);
    const int connect_errno = errno;
    ::close(probe);
    if (connected != 0 && connect_errno != ECONNREFUSED && connect_errno != EAGAIN) {
      return Status(Status::Code::io,
                    "cannot listen on unix:" + path + ": " + std::strerror(connect_errno));
    }
    if (connected == 0 || connect_errno == EAGAIN) {
      return Status(Status::Code::io, "cannot listen on unix:" + path +
                                          ": another process listens there (another "
                                          "ratewin-server?)");
    }
    ::unlink(path.c_str());  // left by a server that is gone
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(Status::Code::io, std::string("socket: ") + std::strerror(errno));
  if (::bind(fd, where, sizeof address) != 0) {
    Status failed(Status::Code::io,
                  "cannot listen on unix:" + path + ": " + std::strerror(errno));
    ::close(fd);
    return failed;
  }
  return fd;
}

bool port_in_use(const std::string& host, int port) {
  if (port == 0) return false;
  // A bind without SO_REUSEPORT fails where any socket listens (SO_REUSEADDR lets it
  // past connections still in TIME_WAIT only). Other failures are listen_socket's to say.
  const Result<int> fd = bound_socket(host, port, false);
  if (fd) {
    ::close(*fd);
    return false;
  }
  return errno == EADDRINUSE;
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  return address.ss_family == AF_INET
             ? ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port)
             : ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
}

std::unique_ptr<HttpLoop> HttpLoop::create(const Config& config, const HandlerFactory& handlers,
                                           ConnectionCounters& counters,
                                           const std::vector<Listener>& listeners) {
  return std::make_unique<UvHttpLoop>(config, handlers, counters, listeners);
}

}  // namespace ratewin::server
