// ratewin-bench rls: Envoy's rate limit service (gRPC) of one ratewin-server against the
// same server's HTTP forward-auth path, in one run: a private redis-server, one server
// with both listeners, and load clients written here (gRPC calls as streams of one HTTP/2
// connection, on nghttp2's client session; plain keep-alive HTTP/1.1), both on blocking
// sockets, each with 1 and 50 calls in flight. Reports calls/s, p50 and p99, the server's
// CPU per call (from /proc) and Redis' CPU per admitted call (INFO cpu), for a limit that
// admits everything (every call writes to Redis) and one that refuses everything (no call
// should reach Redis: its write commands are counted).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "redis_server.h"

namespace ratewin::bench {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

// CPU time (user + system) a process has used, in microseconds, from /proc/<pid>/stat.
double process_cpu_us(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt (fields 3-13)
  double utime = 0;
  double stime = 0;
  fields >> utime >> stime;
  return (utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One ratewin-server with an HTTP and a gRPC listener, stopped by PID.
class Server {
 public:
  Server(const std::string& binary, const std::vector<std::string>& args) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      std::_Exit(127);
    }
    ::close(out[1]);
    std::string text;
    char c = 0;
    int lines = 0;
    while (lines < 2 && ::read(out[0], &c, 1) == 1) {
      text += c;
      lines += c == '\n';
    }
    ::close(out[0]);
    const std::size_t http = text.find("listening on 127.0.0.1:");
    const std::size_t grpc = text.find("gRPC listening on 127.0.0.1:");
    if (lines < 2 || http == std::string::npos || grpc == std::string::npos) {
      stop();
      throw std::runtime_error("ratewin-server did not start (" + binary + "): " + text);
    }
    http_port_ = std::stoi(text.substr(http + 23));
    grpc_port_ = std::stoi(text.substr(grpc + 28));
  }
  ~Server() { stop(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }

 private:
  pid_t pid_ = -1;
  int http_port_ = 0;
  int grpc_port_ = 0;
};

// What one timed run measured.
struct Run {
  std::uint64_t calls = 0;
  std::uint64_t admitted = 0;
  double seconds = 0;
  std::vector<double> latency_us;  // a sample of every call's
  double server_cpu_us = 0;
  double client_cpu_us = 0;  // this process's: the load client's
  double redis_cpu_us = 0;
  long long redis_writes = 0;

  double per_second() const { return static_cast<double>(calls) / seconds; }
  double percentile(double p) {
    if (latency_us.empty()) return 0;
    std::sort(latency_us.begin(), latency_us.end());
    return latency_us[static_cast<std::size_t>(p * static_cast<double>(latency_us.size() - 1))];
  }
};

// Latencies of many threads, collected without contention on the hot path.
class Latencies {
 public:
  explicit Latencies(std::size_t streams) : per_stream_(streams) {}
  void add(std::size_t stream, double us) { per_stream_[stream].push_back(us); }
  std::vector<double> all() const {
    std::vector<double> out;
    for (const auto& v : per_stream_) out.insert(out.end(), v.begin(), v.end());
    return out;
  }

 private:
  std::vector<std::vector<double>> per_stream_;
};

// A TCP connection to a listener on 127.0.0.1, Nagle's algorithm off: both load clients
// write whole requests and then wait for their answers, which Nagle would hold back.
int connect_loopback(int port, const char* listener) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("cannot connect to the ") + listener + " listener");
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// ShouldRateLimit calls on one HTTP/2 connection: nghttp2's client session over a blocking
// socket, driven by the one thread that calls it, each call in flight a stream, as gRPC
// C++'s client did over its one channel. That client cost more CPU per call than the HTTP
// one, and the load client shares the cores with the server it measures: this one does no
// more than a call needs. A call is what gRPC's clients send: HEADERS (POST to the method's
// path, content-type application/grpc, te trailers) and one DATA frame, the framed request
// made once for every call. Its answer is read whole (HEADERS, DATA, the trailers) and
// checked as gRPC's client would: HTTP status 200, grpc-status 0, one uncompressed message
// that parses as a RateLimitResponse.
class GrpcConnection {
 public:
  // A call that ended: the slot start() was given, and whether the limit admitted it.
  struct Ended {
    std::size_t slot;
    bool admitted;
  };

  // A connection with room for `slots` calls in flight, each asking for the descriptor
  // client=`key` in the domain "bench".
  GrpcConnection(int port, const std::string& key, std::size_t slots)
      : fd_(connect_loopback(port, "gRPC")),
        authority_("127.0.0.1:" + std::to_string(port)),
        calls_(slots) {
    pb::RateLimitRequest request;
    request.set_domain("bench");
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key("client");
    entry->set_value(key);
    const std::string message = request.SerializeAsString();
    // gRPC's framing: a flag byte (0: not compressed), the length (big-endian), the bytes.
    const auto length = static_cast<std::uint32_t>(message.size());
    framed_request_.assign(1, '\0');
    for (const int shift : {24, 16, 8, 0})
      framed_request_ += static_cast<char>((length >> shift) & 0xff);
    framed_request_ += message;
    // The fields outlive the session, so nghttp2 need not copy them for every call.
    for (const auto& [name, fixed_value] : fields_) {
      const std::string_view field(name);
      const std::string_view value =
          field == ":authority" ? std::string_view(authority_) : std::string_view(fixed_value);
      headers_.push_back(
          nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(field.data())),
                     reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), field.size(),
                     value.size(), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE});
    }

    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, stream_closed);
    nghttp2_session_client_new(&session_, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~GrpcConnection() {
    nghttp2_session_del(session_);
    ::close(fd_);
  }
  GrpcConnection(const GrpcConnection&) = delete;
  GrpcConnection& operator=(const GrpcConnection&) = delete;

  // Begins a call in `slot` (one not in flight); it goes out with the next exchange().
  void start(std::size_t slot) {
    Call& call = calls_[slot];
    call.request_sent = 0;
    call.http_status.clear();
    call.grpc_status.clear();
    call.grpc_message.clear();
    call.data.clear();
    nghttp2_data_provider body{};
    body.read_callback = read_request;
    const std::int32_t stream_id =
        nghttp2_submit_request(session_, nullptr, headers_.data(), headers_.size(), &body, &call);
    if (stream_id < 0) throw std::runtime_error("nghttp2_submit_request failed");
  }

  // Sends what the session has to send (the calls begun, and nghttp2's SETTINGS acks and
  // window updates), waits for the server's next bytes and reads them. Returns the calls
  // they ended, in that order (valid until the next exchange); throws when one failed or
  // the connection closed.
  const std::vector<Ended>& exchange() {
    ended_.clear();
    output_.clear();
    const std::uint8_t* frames = nullptr;
    ssize_t n = 0;
    while ((n = nghttp2_session_mem_send(session_, &frames)) > 0)
      output_.append(reinterpret_cast<const char*>(frames), static_cast<std::size_t>(n));
    if (n < 0)
      throw std::runtime_error(std::string("nghttp2: ") + nghttp2_strerror(static_cast<int>(n)));
    for (std::size_t sent = 0; sent < output_.size();) {
      const ssize_t w = ::send(fd_, output_.data() + sent, output_.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) throw std::runtime_error("gRPC send failed");
      sent += static_cast<std::size_t>(w);
    }
    const ssize_t got = ::recv(fd_, input_, sizeof input_, 0);
    if (got <= 0) throw std::runtime_error("gRPC connection closed");
    const ssize_t used = nghttp2_session_mem_recv(session_, input_, static_cast<std::size_t>(got));
    if (used < 0) {
      throw std::runtime_error(failure_.empty() ? std::string("nghttp2: ") +
                                                      nghttp2_strerror(static_cast<int>(used))
                                                : failure_);
    }
    return ended_;
  }

 private:
  // One slot's call: its request's progress and its answer as it comes.
  struct Call {
    std::size_t request_sent = 0;
    std::string http_status;
    std::string grpc_status;
    std::string grpc_message;
    std::string data;
  };

  static Call& call_of(nghttp2_session* session, std::int32_t stream_id) {
    return *static_cast<Call*>(nghttp2_session_get_stream_user_data(session, stream_id));
  }

  // The request's bytes, as much of them as the flow-control window lets out (all, but
  // for a window nearly spent), then the end of the stream.
  static ssize_t read_request(nghttp2_session* session, std::int32_t stream_id,
                              std::uint8_t* buffer, std::size_t length, std::uint32_t* flags,
                              nghttp2_data_source*, void* user) {
    const std::string& request = static_cast<GrpcConnection*>(user)->framed_request_;
    Call& call = call_of(session, stream_id);
    const std::size_t n = std::min(length, request.size() - call.request_sent);
    std::memcpy(buffer, request.data() + call.request_sent, n);
    call.request_sent += n;
    if (call.request_sent == request.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  // The response's headers and trailers: only the three the check needs are kept.
  static int header(nghttp2_session* session, const nghttp2_frame* frame, const std::uint8_t* name,
                    std::size_t name_length, const std::uint8_t* value, std::size_t value_length,
                    std::uint8_t, void*) {
    const std::string_view field(reinterpret_cast<const char*>(name), name_length);
    const std::string_view text(reinterpret_cast<const char*>(value), value_length);
    Call& call = call_of(session, frame->hd.stream_id);
    if (field == ":status")
      call.http_status = text;
    else if (field == "grpc-status")
      call.grpc_status = text;
    else if (field == "grpc-message")
      call.grpc_message = text;
    return 0;
  }

  static int data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream_id,
                        const std::uint8_t* data, std::size_t length, void*) {
    call_of(session, stream_id).data.append(reinterpret_cast<const char*>(data), length);
    return 0;
  }

  // A call's end: checked, and its result kept for exchange() (no exception may cross
  // nghttp2's C frames: a failure is kept, and the callback fails the read).
  static int stream_closed(nghttp2_session* session, std::int32_t stream_id,
                           std::uint32_t error_code, void* user) {
    auto& self = *static_cast<GrpcConnection*>(user);
    Call& call = call_of(session, stream_id);
    const std::size_t slot = static_cast<std::size_t>(&call - self.calls_.data());
    std::uint32_t length = 0;
    for (std::size_t i = 1; i < 5 && i < call.data.size(); ++i)
      length = (length << 8) | static_cast<unsigned char>(call.data[i]);
    if (error_code != NGHTTP2_NO_ERROR) {
      self.failure_ =
          "a gRPC call's stream was reset (HTTP/2 error " + std::to_string(error_code) + ")";
    } else if (call.http_status != "200" || call.grpc_status != "0") {
      self.failure_ = "a gRPC call failed: HTTP status " + call.http_status + ", grpc-status " +
                      call.grpc_status + " " + call.grpc_message;
    } else if (call.data.size() < 5 || call.data[0] != '\0' || length != call.data.size() - 5 ||
               !self.response_.ParseFromArray(call.data.data() + 5, static_cast<int>(length))) {
      self.failure_ = "a gRPC call's answer is not one RateLimitResponse";
    } else {
      self.ended_.push_back(
          Ended{slot, self.response_.overall_code() == pb::RateLimitResponse::OK});
      return 0;
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  // A call's request headers (:authority's value is this connection's).
  static constexpr std::pair<const char*, const char*> fields_[] = {
      {":method", "POST"},
      {":scheme", "http"},
      {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
      {":authority", ""},
      {"content-type", "application/grpc"},
      {"te", "trailers"},
  };

  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  std::string authority_;
  std::string framed_request_;
  std::vector<nghttp2_nv> headers_;
  std::vector<Call> calls_;
  pb::RateLimitResponse response_;  // each answer's, parsed in turn
  std::vector<Ended> ended_;
  std::string failure_;
  std::string output_;
  std::uint8_t input_[16384];
};

// The end of a timed run: its calls and their latencies, over the time since `start`.
Run finished_run(Clock::time_point start, std::uint64_t calls, std::uint64_t admitted,
                 const Latencies& latencies) {
  Run run;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.calls = calls;
  run.admitted = admitted;
  run.latency_us = latencies.all();
  return run;
}

// When a run that starts at `start` stops starting calls.
Clock::time_point run_end(Clock::time_point start, double seconds) {
  return start +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// `streams` ShouldRateLimit calls in flight on one HTTP/2 connection, for `seconds`, from
// this one thread: each call that ends is followed at once by the next in its slot, so the
// calls that end in one read go out again in one write (as from a proxy multiplexing its
// calls on one connection; the HTTP client's connections each write their own).
Run grpc_run(int port, const std::string& key, int streams, double seconds) {
  GrpcConnection connection(port, key, static_cast<std::size_t>(streams));
  std::vector<Clock::time_point> sent(static_cast<std::size_t>(streams));
  const auto send = [&](std::size_t slot) {
    sent[slot] = Clock::now();
    connection.start(slot);
  };
  Latencies latencies(sent.size());
  std::uint64_t calls = 0;
  std::uint64_t admitted = 0;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = run_end(start, seconds);
  for (std::size_t i = 0; i < sent.size(); ++i) send(i);
  std::size_t running = sent.size();
  while (running > 0) {
    for (const GrpcConnection::Ended& ended : connection.exchange()) {
      const Clock::time_point now = Clock::now();
      latencies.add(ended.slot,
                    std::chrono::duration<double, std::micro>(now - sent[ended.slot]).count());
      ++calls;
      if (ended.admitted) ++admitted;
      if (now < end) {
        send(ended.slot);
      } else {
        --running;
      }
    }
  }
  return finished_run(start, calls, admitted, latencies);
}

// One keep-alive connection asking forward-auth checks.
class HttpStream {
 public:
  HttpStream(int port, const std::string& key) : fd_(connect_loopback(port, "HTTP")) {
    request_ =
        "GET /ratewin/check HTTP/1.1\r\nHost: bench\r\nX-Original-URI: /api\r\n"
        "X-Original-Method: GET\r\nX-Real-IP: 10.0.0.1\r\nX-API-Key: " +
        key + "\r\n\r\n";
  }
  ~HttpStream() { ::close(fd_); }
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  // The status of one check.
  int check() {
    if (::send(fd_, request_.data(), request_.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request_.size()))
      throw std::runtime_error("HTTP send failed");
    for (;;) {
      const std::size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::size_t length = 0;
        const std::size_t cl = buffer_.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) length = std::stoul(buffer_.substr(cl + 16));
        if (buffer_.size() >= head_end + 4 + length) {
          const int status = std::stoi(buffer_.substr(9, 3));
          buffer_.erase(0, head_end + 4 + length);
          return status;
        }
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) throw std::runtime_error("HTTP connection closed");
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  std::string request_;
  std::string buffer_;
};

// `streams` connections, one check in flight on each, for `seconds`.
Run http_run(int port, const std::string& key, int streams, double seconds) {
  std::vector<std::unique_ptr<HttpStream>> connections;
  for (int i = 0; i < streams; ++i) connections.push_back(std::make_unique<HttpStream>(port, key));
  Latencies latencies(connections.size());
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> admitted{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = run_end(start, seconds);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < connections.size(); ++i) {
    threads.emplace_back([&, i] {
      for (Clock::time_point now = Clock::now(); now < end;) {
        const int status = connections[i]->check();
        const Clock::time_point after = Clock::now();
        latencies.add(i, std::chrono::duration<double, std::micro>(after - now).count());
        calls.fetch_add(1, std::memory_order_relaxed);
        if (status == 200) admitted.fetch_add(1, std::memory_order_relaxed);
        now = after;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return finished_run(start, calls.load(), admitted.load(), latencies);
}

long long write_commands(const test::RedisServer& redis) {
  long long n = 0;
  for (const char* c : {"bitfield", "append", "evalsha", "eval"}) n += redis.calls(c);
  return n;
}

std::string default_server() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "ratewin-server").string();
}

}  // namespace

int run_rls(const cxxopts::ParseResult& args) {
  const std::string binary = args["server"].as<std::string>().empty()
                                 ? default_server()
                                 : args["server"].as<std::string>();
  const double seconds = args["seconds"].as<double>();
  const int rounds = args.count("runs") != 0 ? std::max(1, args["runs"].as<int>()) : 3;
  test::RedisServer redis;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ratewin-bench-rls-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "rls");
  // The same two limits on both paths: one too large to reach (every call admitted and
  // written), one of 1 per hour (every call but the first refused).
  std::ofstream(dir / "rls" / "bench.yaml")
      << "domain: bench\ndescriptors:\n"
         "  - key: client\n    value: allow\n"
         "    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
         "  - key: client\n    value: reject\n"
         "    rate_limit: {unit: hour, requests_per_unit: 1}\n";
  std::ofstream(dir / "rules.yaml")
      << "tiers:\n  allow:\n    limits:\n"
         "      - {name: per-second, max: 4000000000, window: 1s}\n"
         "  reject:\n    limits:\n      - {name: per-hour, max: 1, window: 1h}\n"
         "keys:\n  - {match: allow, tier: allow}\n  - {match: reject, tier: reject}\n";
  Server server(binary, {"--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--threads",
                         "2", "--mode", "forward-auth", "--trust-proxy", "127.0.0.1/32", "--rules",
                         (dir / "rules.yaml").string(), "--rls-config", (dir / "rls").string(),
                         "--redis", redis.url(), "--log-level", "warning"});
  std::printf(
      "ratewin-bench rls: one ratewin-server (2 threads, Redis) serving gRPC and HTTP "
      "forward-auth; %d rounds of %.1f s per case, interleaved\n",
      rounds, seconds);
  // Warm up both paths (connections to Redis, the refusing counters at their limit), and
  // check that each answers as the case claims: all admitted, or all but the first refused.
  for (const bool grpc : {true, false}) {
    const auto run = [&](const std::string& key, int streams, double s) {
      return grpc ? grpc_run(server.grpc_port(), key, streams, s)
                  : http_run(server.http_port(), key, streams, s);
    };
    const Run reject = run("reject", 1, 0.2);
    const Run allow = run("allow", 4, 0.3);
    if (reject.admitted > 1 || reject.calls < 2 || allow.admitted != allow.calls ||
        allow.calls == 0) {
      throw std::runtime_error(std::string(grpc ? "gRPC" : "HTTP") +
                               " answers are not the cases' (" + std::to_string(reject.admitted) +
                               " of " + std::to_string(reject.calls) +
                               " refusing calls admitted, " + std::to_string(allow.admitted) +
                               " of " + std::to_string(allow.calls) + " allowing ones)");
    }
  }

  struct Key {
    std::string path;
    int streams;
    std::string kind;
    bool operator<(const Key& o) const {
      return std::tie(kind, streams, path) < std::tie(o.kind, o.streams, o.path);
    }
  };
  std::map<Key, std::vector<Run>> results;
  for (int round = 0; round < rounds; ++round) {
    for (const int streams : {1, 50}) {
      for (const std::string kind : {"allow", "reject"}) {
        for (const std::string path : {"grpc", "http"}) {
          const double cpu0 = process_cpu_us(server.pid());
          const double self0 = process_cpu_us(::getpid());
          const double redis0 = redis.cpu_us();
          const long long writes0 = write_commands(redis);
          Run run = path == "grpc" ? grpc_run(server.grpc_port(), kind, streams, seconds)
                                   : http_run(server.http_port(), kind, streams, seconds);
          run.server_cpu_us = process_cpu_us(server.pid()) - cpu0;
          run.client_cpu_us = process_cpu_us(::getpid()) - self0;
          run.redis_cpu_us = redis.cpu_us() - redis0;
          run.redis_writes = write_commands(redis) - writes0;
          results[Key{path, streams, kind}].push_back(std::move(run));
        }
      }
    }
  }
  std::printf("\n%-7s %-5s %7s %11s %9s %9s %12s %12s %14s %12s\n", "case", "path", "streams",
              "calls/s", "p50 us", "p99 us", "server us/c", "client us/c", "redis us/adm",
              "redis writes");
  // By case: gRPC's and HTTP's calls/s, and their server CPU per call.
  struct Pair {
    double grpc_rate = 0, http_rate = 0, grpc_cpu = 0, http_cpu = 0;
  };
  std::map<std::pair<std::string, int>, Pair> pairs;
  for (auto& [key, runs] : results) {
    std::vector<double> rate, p50, p99, cpu, client_cpu, redis_cpu;
    long long writes = 0;
    for (Run& r : runs) {
      rate.push_back(r.per_second());
      p50.push_back(r.percentile(0.5));
      p99.push_back(r.percentile(0.99));
      cpu.push_back(r.server_cpu_us / static_cast<double>(r.calls));
      client_cpu.push_back(r.client_cpu_us / static_cast<double>(r.calls));
      if (r.admitted > 0) redis_cpu.push_back(r.redis_cpu_us / static_cast<double>(r.admitted));
      writes += r.redis_writes;
    }
    const double median_rate = median(rate);
    Pair& pair = pairs[{key.kind, key.streams}];
    (key.path == "grpc" ? pair.grpc_rate : pair.http_rate) = median_rate;
    (key.path == "grpc" ? pair.grpc_cpu : pair.http_cpu) = median(cpu);
    std::printf("%-7s %-5s %7d %11.0f %9.1f %9.1f %12.1f %12.1f %14s %12lld\n", key.kind.c_str(),
                key.path.c_str(), key.streams, median_rate, median(p50), median(p99), median(cpu),
                median(client_cpu),
                redis_cpu.empty() ? "-" : std::to_string(median(redis_cpu)).substr(0, 6).c_str(),
                writes);
  }
  std::printf(
      "\ngRPC over HTTP forward-auth: calls/s (target: at least 0.9x) and server CPU per call "
      "(target: at most 1.2x):\n");
  bool met = true;
  for (const auto& [key, pair] : pairs) {
    const double rate = pair.grpc_rate / pair.http_rate;
    const double cpu = pair.grpc_cpu / pair.http_cpu;
    met = met && rate >= 0.9 && cpu <= 1.2;
    std::printf("  %-6s %2d streams: calls %.2fx, server CPU %.2fx\n", key.first.c_str(),
                key.second, rate, cpu);
  }
  long long reject_writes = 0;
  for (auto& [key, runs] : results)
    if (key.kind == "reject" && key.path == "grpc")
      for (const Run& r : runs) reject_writes += r.redis_writes;
  std::printf("Redis write commands during gRPC rejections: %lld (target 0)\n", reject_writes);
  std::printf("%s\n", met && reject_writes == 0 ? "targets met" : "TARGET MISSED");
  server.stop();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace ratewin::bench
