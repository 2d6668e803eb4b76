#include "redis/transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "redis/tls.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// A socket of `family`, non-blocking, closed on exec.
int new_socket(int family) {
  return ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

// A socket connecting (or connected) to the addresses of a TCP endpoint, one after
// another until one takes: what the connection is made of until it is established.
// With a TLS context, the session runs over the socket once it is connected.
class SocketTransport final : public Transport {
 public:
  SocketTransport(int fd, std::string where, const RedisEndpoint& endpoint,
                  std::vector<sockaddr_storage> next, bool connected)
      : Transport(fd, std::move(where)),
        next_(std::move(next)),
        connected_(connected),
        tls_context_(endpoint.tls),
        host_(endpoint.host),
        port_(endpoint.port) {}
  ~SocketTransport() override;

  Io handshake(Status& status) override;
  Io write(const char* data, std::size_t size, Status& status) override;
  Io read(char* data, std::size_t size, Status& status) override;
  bool idle_alive() override;
  bool buffered() const noexcept override { return tls_ != nullptr && tls_->buffered(); }
  const TlsSession* tls() const noexcept override { return tls_.get(); }

 private:
  std::vector<sockaddr_storage> next_;  // addresses left to try if this one fails
  bool connected_;
  std::shared_ptr<TlsContext> tls_context_;  // null: plain
  std::string host_;
  int port_;
  std::unique_ptr<TlsSession> tls_;  // once connected, with a context
};

socklen_t length_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Starts connecting to `address` on a new socket: its fd, with `connected` set when it
// took at once; -1 with `error` set when it failed at once.
int start_connect(const sockaddr* address, socklen_t length, bool& connected, int& error) {
  const int fd = new_socket(address->sa_family);
  if (fd < 0) {
    error = errno;
    return -1;
  }
  if (address->sa_family != AF_UNIX) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  int rc = 0;
  do {
    rc = ::connect(fd, address, length);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    connected = true;
    return fd;
  }
  if (errno == EINPROGRESS || (address->sa_family == AF_UNIX && errno == EAGAIN)) {
    connected = false;
    return fd;
  }
  error = errno;
  ::close(fd);
  return -1;
}

}  // namespace

Transport::~Transport() {
  if (fd_ >= 0) ::close(fd_);
}

void Transport::replace_fd(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::unique_ptr<Transport> Transport::open(const RedisEndpoint& endpoint, Status& status) {
  const std::string where = endpoint.describe();
  if (endpoint.secure && (endpoint.tls == nullptr || !endpoint.unix_path.empty())) {
    status = Status(Status::Code::tls, "cannot connect to " + where + ": no TLS context");
    return nullptr;
  }
  bool connected = false;
  int error = 0;
  if (!endpoint.unix_path.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (endpoint.unix_path.size() >= sizeof address.sun_path) {
      status = Status(Status::Code::connect, "cannot connect to " + where + ": path too long");
      return nullptr;
    }
    std::memcpy(address.sun_path, endpoint.unix_path.c_str(), endpoint.unix_path.size() + 1);
    const int fd = start_connect(reinterpret_cast<const sockaddr*>(&address), sizeof address,
                                 connected, error);
    if (fd < 0) {
      status = Status(Status::Code::connect, "cannot connect to " + where + ": " + errno_text(error));
      return nullptr;
    }
    return std::make_unique<SocketTransport>(fd, where, endpoint, std::vector<sockaddr_storage>{},
                                             connected);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (const int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    status = Status(Status::Code::connect, "cannot connect to " + where + ": " + ::gai_strerror(rc));
    return nullptr;
  }
  std::vector<sockaddr_storage> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    sockaddr_storage s{};
    std::memcpy(&s, a->ai_addr, a->ai_addrlen);
    addresses.push_back(s);
  }
  ::freeaddrinfo(found);
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const int fd = start_connect(reinterpret_cast<const sockaddr*>(&addresses[i]),
                                 length_of(addresses[i]), connected, error);
    if (fd < 0) continue;
    return std::make_unique<SocketTransport>(
        fd, where, endpoint,
        std::vector<sockaddr_storage>(addresses.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                      addresses.end()),
        connected);
  }
  status = Status(Status::Code::connect,
                  "cannot connect to " + where + ": " +
                      (addresses.empty() ? std::string("no address") : errno_text(error)));
  return nullptr;
}

Io Transport::handshake(Status&) { return {Io::Result::done}; }
bool Transport::idle_alive() {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}
Io Transport::write(const char*, std::size_t, Status&) { return {Io::Result::failed}; }
Io Transport::read(char*, std::size_t, Status&) { return {Io::Result::failed}; }

Io SocketTransport::handshake(Status& status) {
  while (!connected_) {
    pollfd p{fd(), POLLOUT, 0};
    if (::poll(&p, 1, 0) == 0) return {Io::Result::want_write};
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
    if (error == 0) {
      connected_ = true;
      break;
    }
    // This address failed: the next one, on a socket of its own.
    int next_fd = -1;
    while (next_fd < 0 && !next_.empty()) {
      const sockaddr_storage a = next_.front();
      next_.erase(next_.begin());
      int next_error = 0;
      next_fd = start_connect(reinterpret_cast<const sockaddr*>(&a), length_of(a), connected_,
                              next_error);
      if (next_fd < 0) error = next_error;
    }
    if (next_fd < 0) {
      status = Status(Status::Code::connect, "cannot connect to " + where() + ": " + errno_text(error));
      return {Io::Result::failed};
    }
    replace_fd(next_fd);
  }
  if (tls_context_ == nullptr) return {Io::Result::done};
  if (tls_ == nullptr) {
    tls_ = tls_context_->start(fd(), host_, port_, status);
    if (tls_ == nullptr) return {Io::Result::failed};
  }
  return tls_->handshake(where(), status);
}

SocketTransport::~SocketTransport() { tls_.reset(); }  // (before the socket closes)

bool SocketTransport::idle_alive() { return tls_ != nullptr ? tls_->idle_alive() : Transport::idle_alive(); }

Io SocketTransport::write(const char* data, std::size_t size, Status& status) {
  if (tls_ != nullptr) return tls_->write(data, size, where(), status);
  for (;;) {
    const ssize_t n = ::send(fd(), data, size, MSG_NOSIGNAL);
    if (n >= 0) return {Io::Result::done, static_cast<std::size_t>(n)};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::Result::want_write};
    status = Status(Status::Code::io, "writing to " + where() + ": " + errno_text(errno));
    return {Io::Result::failed};
  }
}

Io SocketTransport::read(char* data, std::size_t size, Status& status) {
  if (tls_ != nullptr) return tls_->read(data, size, where(), status);
  for (;;) {
    const ssize_t n = ::recv(fd(), data, size, 0);
    if (n > 0) return {Io::Result::done, static_cast<std::size_t>(n)};
    if (n == 0) {
      status = Status(Status::Code::io, "connection closed by " + where());
      return {Io::Result::closed};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::Result::want_read};
    status = Status(Status::Code::io, "reading from " + where() + ": " + errno_text(errno));
    return {Io::Result::failed};
  }
}

Status connect_timed_out(const Transport* transport, const std::string& where,
                         std::chrono::milliseconds timeout) {
  const std::string ms = std::to_string(timeout.count()) + " ms";
  if (transport != nullptr && transport->tls() != nullptr) {
    return Status(Status::Code::tls, "TLS handshake with " + where + " got no answer within " + ms +
                                         " (a plain port does not answer a TLS hello: it wants redis://)");
  }
  return Status(Status::Code::connect, "cannot connect to " + where + ": timed out after " + ms);
}

Status Transport::wait(int fd, Io::Result wanted, std::chrono::steady_clock::time_point deadline) {
  pollfd p{fd, static_cast<short>(wanted == Io::Result::want_write ? POLLOUT : POLLIN), 0};
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero())
      return Status(Status::Code::timeout, "timed out");
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(ms, 1 << 30)));
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return Status(Status::Code::io, "poll: " + errno_text(errno));
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
