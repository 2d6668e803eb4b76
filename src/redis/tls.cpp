#include "redis/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "internal/ratewin_internal/engine_options.h"
#include "internal/ratewin_internal/tls_files.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// The sessions kept to resume, at most (one per server; a Cluster has a few dozen).
constexpr std::size_t kMaxSessions = 1024;

using internal::openssl_reason;

bool is_address(const std::string& host) {
  std::array<unsigned char, sizeof(in6_addr)> buffer{};
  return ::inet_pton(AF_INET, host.c_str(), buffer.data()) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buffer.data()) == 1;
}

static_assert(TLS1_2_VERSION == 0x0303 && TLS1_3_VERSION == 0x0304);

// The socket under a session, as an OpenSSL BIO of our own: sends with MSG_NOSIGNAL (a
// peer that closed must not kill the process with SIGPIPE), and reports a socket that
// would block as a retry, which SSL_get_error turns into want_read / want_write.
// (The BIO's data is the session's socket descriptor, an int the session holds.)
int bio_fd(BIO* bio) { return *static_cast<const int*>(BIO_get_data(bio)); }

int bio_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::send(bio_fd(bio), data, static_cast<std::size_t>(size), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return -1;
  }
}

int bio_read(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::recv(bio_fd(bio), data, static_cast<std::size_t>(size), 0);
    if (n >= 0) return static_cast<int>(n);  // 0: the end of the stream
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return -1;
  }
}

long bio_ctrl(BIO*, int command, long, void*) {
  // Nothing is buffered here: a flush has nothing to do; every other control is unknown.
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ratewin socket");
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

// An OpenSSL context made from `o` (the caller owns it), or what could not be used.
internal::Result<SSL_CTX*> build(const TlsOptions& o) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr)
    return Status(Status::Code::tls, "cannot make a TLS context: " + openssl_reason());
  const auto fail = [&](std::string what) {
    SSL_CTX_free(ctx);
    return Status(Status::Code::tls, std::move(what));
  };
  SSL_CTX_set_min_proto_version(ctx, tls_version(o.min_version).value_or(TLS1_2_VERSION));
  // A write that the socket takes in part returns what it took; a retried write may come
  // from a buffer that has moved (the connections append to theirs meanwhile).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A server that closes without close_notify (killed, restarted) ends the stream like
  // any close: RESP frames its own replies, so a cut reply is still detected.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  // A record's header and body in one read from the socket, and the records after it
  // that came too (buffered(): a reader must drain them before it waits on the socket).
  SSL_CTX_set_read_ahead(ctx, 1);
  if (!o.ca_file.empty() || !o.ca_dir.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.ca_file.empty() ? nullptr : o.ca_file.c_str(),
                                      o.ca_dir.empty() ? nullptr : o.ca_dir.c_str()) != 1) {
      return fail("cannot load the trusted CAs from " +
                  (o.ca_file.empty() ? "the folder '" + o.ca_dir + "'" : "'" + o.ca_file + "'") +
                  ": " + openssl_reason());
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return fail("cannot load the system's trusted CAs: " + openssl_reason());
  }
  if (!o.cert_file.empty()) {
    const std::string& key = o.key_file.empty() ? o.cert_file : o.key_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
      return fail("cannot load the client certificate '" + o.cert_file + "': " + openssl_reason());
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      const std::string reason = openssl_reason();
      if (reason.find("mismatch") != std::string::npos)
        return fail("the client key '" + key + "' does not match the certificate '" + o.cert_file +
                    "'");
      return fail("cannot load the client key '" + key + "': " + reason);
    }
    if (SSL_CTX_check_private_key(ctx) != 1)
      return fail("the client key '" + key + "' does not match the certificate '" + o.cert_file +
                  "'");
  }
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &TlsContext::on_new_session);
  // Called when the server asks for a certificate and this client has none: noted, so
  // that the server's closing the connection afterwards is explained.
  SSL_CTX_set_client_cert_cb(ctx, &TlsSession::on_certificate_request);
  return ctx;
}

// What a failed handshake's verification says, in words for people; empty when the
// certificate was not the problem.
std::string verify_problem(SSL* ssl, const std::string& name) {
  const long result = SSL_get_verify_result(ssl);
  if (result == X509_V_OK) return {};
  if (result == X509_V_ERR_HOSTNAME_MISMATCH || result == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    return "host name mismatch: the server's certificate is not for '" + name +
           "' (set the TLS server name to the name it is for, or verify=ca to check the "
           "chain only)";
  }
  return std::string("certificate verify failed: ") + X509_verify_cert_error_string(result);
}

// A hint for people after an OpenSSL reason that has a usual cause.
std::string hint_for(const std::string& reason) {
  if (reason.find("wrong version number") != std::string::npos ||
      reason.find("packet length too long") != std::string::npos ||
      reason.find("record layer failure") != std::string::npos) {
    return " (the server does not speak TLS there: a plain port wants redis://)";
  }
  if (reason.find("certificate required") != std::string::npos) {
    return " (the server wants a client certificate: set the TLS cert_file and key_file)";
  }
  if (reason.find("unknown ca") != std::string::npos ||
      reason.find("bad certificate") != std::string::npos) {
    return " (the server does not accept this client's certificate)";
  }
  return {};
}

}  // namespace

// The identity of each file the context was made from: a rotated file has another inode,
// time or size.
struct TlsContext::Files {
  std::array<internal::FileStamp, 3> stamps;  // ca_file, cert_file, key_file

  static Files of(const TlsOptions& o) {
    using internal::FileStamp;
    return Files{{FileStamp::of(o.ca_file), FileStamp::of(o.cert_file), FileStamp::of(o.key_file)}};
  }
  bool operator==(const Files&) const = default;
};

TlsContext::TlsContext(TlsOptions options, Logger log)
    : options_(std::move(options)), log_(std::move(log)) {}

TlsContext::~TlsContext() {
  for (auto& [peer, session] : sessions_) SSL_SESSION_free(session);
  SSL_CTX_free(ctx_);
}

std::shared_ptr<TlsContext> TlsContext::make(const TlsOptions& options, Logger log) {
  const auto bad = [](const std::string& what) {
    throw std::invalid_argument("ratewin: TLS: " + what);
  };
  if (!tls_version(options.min_version))
    bad("min_version '" + options.min_version + "' is not " +
        internal::choices(internal::kTlsVersions));
  if (options.cert_file.empty() && !options.key_file.empty())
    bad("a key_file without its cert_file");
  std::shared_ptr<TlsContext> context(new TlsContext(options, std::move(log)));
  context->files_ = std::make_unique<Files>(Files::of(options));
  internal::Result<SSL_CTX*> built = build(options);
  if (!built) bad(built.message());
  context->ctx_ = *built;
  SSL_CTX_sess_set_new_cb(context->ctx_, &TlsContext::on_new_session);
  if (options.verify == TlsVerify::none && context->log_) {
    context->log_(LogLevel::warning,
                  "TLS verification is off (verify=none): connections to Redis are encrypted "
                  "but any server, or a man in the middle, is accepted");
  }
  return context;
}

SSL_CTX* TlsContext::current() {
  std::lock_guard lock(mutex_);
  Files now = Files::of(options_);
  if (!(now == *files_)) {
    *files_ = now;  // (reported once per change, not at every connection)
    if (internal::Result<SSL_CTX*> fresh = build(options_)) {
      SSL_CTX_free(ctx_);
      ctx_ = *fresh;
      // Sessions of the old certificates are not resumed with the new ones.
      for (auto& [peer, session] : sessions_) SSL_SESSION_free(session);
      sessions_.clear();
      if (log_) log_(LogLevel::info, "TLS: certificate files changed; loaded them again");
    } else if (log_) {
      log_(LogLevel::error, "TLS: certificate files changed but cannot be used (" +
                                fresh.message() + "); keeping the ones loaded before");
    }
  }
  SSL_CTX_up_ref(ctx_);
  return ctx_;
}

void TlsContext::keep(const std::string& peer, SSL_SESSION* session) {
  std::lock_guard lock(mutex_);
  auto [at, added] = sessions_.try_emplace(peer, session);
  if (!added) {
    SSL_SESSION_free(at->second);
    at->second = session;
  } else if (sessions_.size() > kMaxSessions) {
    for (auto& [other, old] : sessions_)
      if (old != session) SSL_SESSION_free(old);
    sessions_.clear();
    sessions_.emplace(peer, session);
  }
}

int TlsContext::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* owner = static_cast<TlsSession*>(SSL_get_ex_data(ssl, 0));
  if (owner == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  owner->context_->keep(owner->peer_, session);
  return 1;  // ours now
}

std::unique_ptr<TlsSession> TlsContext::start(int fd, const std::string& host, int port,
                                              Status& status) {
  SSL_CTX* ctx = current();
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  SSL_CTX_free(ctx);  // (the session holds its own reference)
  BIO* bio = ssl != nullptr ? BIO_new(socket_method()) : nullptr;
  if (bio == nullptr) {
    SSL_free(ssl);
    status = Status(Status::Code::tls, "cannot start TLS: " + openssl_reason());
    return nullptr;
  }
  SSL_set_bio(ssl, bio, bio);
  SSL_set_connect_state(ssl);
  const std::string& name = options_.server_name.empty() ? host : options_.server_name;
  const bool address = is_address(name);
  // SNI carries host names only (RFC 6066), never addresses.
  if (!address)
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(name.c_str()));
  if (options_.verify != TlsVerify::none) {
    SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
    if (options_.verify == TlsVerify::full) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (address) {
        X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
      } else {
        SSL_set1_host(ssl, name.c_str());
      }
    }
  } else {
    SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
  }
  std::string peer = host_port(host, port);
  {
    std::lock_guard lock(mutex_);
    const auto found = sessions_.find(peer);
    if (found != sessions_.end()) SSL_set_session(ssl, found->second);
  }
  std::unique_ptr<TlsSession> session(
      new TlsSession(shared_from_this(), ssl, std::move(peer), name));
  session->fd_ = fd;
  BIO_set_data(bio, &session->fd_);
  SSL_set_ex_data(ssl, 0, session.get());
  return session;
}

TlsSession::TlsSession(std::shared_ptr<TlsContext> context, SSL* ssl, std::string peer,
                       std::string name)
    : context_(std::move(context)),
      ssl_(ssl),
      peer_(std::move(peer)),
      name_(std::move(name)),
      fd_(-1) {}

TlsSession::~TlsSession() {
  // A close_notify, if the stream is sound, without waiting for the server's.
  if (!failed_ && SSL_is_init_finished(ssl_) == 1) {
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  SSL_set_ex_data(ssl_, 0, nullptr);
  SSL_free(ssl_);
}

bool TlsSession::resumed() const noexcept { return SSL_session_reused(ssl_) == 1; }

bool TlsSession::buffered() const noexcept { return SSL_has_pending(ssl_) == 1; }

int TlsSession::on_certificate_request(SSL* ssl, X509**, EVP_PKEY**) {
  if (auto* owner = static_cast<TlsSession*>(SSL_get_ex_data(ssl, 0)))
    owner->certificate_requested_ = true;
  return 0;  // none to give
}

Status TlsSession::explained(Status status) const {
  // A server that wants a client certificate, given none, lets a TLS 1.3 handshake end
  // and then drops the connection (often with a reset that loses its alert). When the
  // alert did come, its reason has the hint already (hint_for): one is enough.
  if (!certificate_requested_ || received_ ||
      status.message().find("client certificate") != std::string::npos)
    return status;
  return Status(Status::Code::tls, status.message() +
                                       " (the server asked for a client certificate and none is "
                                       "set: give the TLS cert_file and key_file)");
}

Io TlsSession::outcome(int code, const std::string& where, bool handshaking, Status& status) {
  // The stream ended (a close_notify, or the connection closed without one).
  const auto ended = [&]() -> Io {
    if (handshaking) {
      failed_ = true;
      status = Status(Status::Code::tls,
                      "TLS handshake with " + where + " failed: the server closed the connection");
      return {Io::Result::failed};
    }
    status = explained(Status(Status::Code::io, "connection closed by " + where));
    return {Io::Result::closed};
  };
  switch (code) {
    case SSL_ERROR_WANT_READ:
      return {Io::Result::want_read};
    case SSL_ERROR_WANT_WRITE:
      return {Io::Result::want_write};
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      return ended();
    case SSL_ERROR_SYSCALL: {
      const int error = errno;
      failed_ = true;
      ERR_clear_error();
      if (error == 0) return ended();
      status = explained(
          Status(Status::Code::io, "connection to " + where + " failed: " + errno_text(error)));
      return {Io::Result::failed};
    }
    default: {
      failed_ = true;
      std::string problem = handshaking ? verify_problem(ssl_, name_) : std::string();
      if (problem.empty()) {
        problem = openssl_reason();
        problem += hint_for(problem);
      } else {
        ERR_clear_error();
      }
      status = explained(Status(Status::Code::tls,
                                (handshaking ? "TLS handshake with " + where + " failed: "
                                             : "TLS error on the connection to " + where + ": ") +
                                    problem));
      return {Io::Result::failed};
    }
  }
}

Io TlsSession::handshake(const std::string& where, Status& status) {
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) return {Io::Result::done};
  return outcome(SSL_get_error(ssl_, rc), where, true, status);
}

Io TlsSession::write(const char* data, std::size_t size, const std::string& where, Status& status) {
  ERR_clear_error();
  errno = 0;
  std::size_t written = 0;
  const int rc = SSL_write_ex(ssl_, data, size, &written);
  if (rc == 1) return {Io::Result::done, written};
  return outcome(SSL_get_error(ssl_, rc), where, false, status);
}

Io TlsSession::read(char* data, std::size_t size, const std::string& where, Status& status) {
  ERR_clear_error();
  errno = 0;
  std::size_t got = 0;
  const int rc = SSL_read_ex(ssl_, data, size, &got);
  if (rc == 1) {
    received_ = true;
    return {Io::Result::done, got};
  }
  return outcome(SSL_get_error(ssl_, rc), where, false, status);
}

bool TlsSession::idle_alive() {
  if (failed_) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) == 0 && !buffered()) return true;
  // Something came while no reply was awaited: records without data (a session ticket)
  // leave it alive; data or the end of the stream do not.
  ERR_clear_error();
  char byte = 0;
  std::size_t got = 0;
  const int rc = SSL_peek_ex(ssl_, &byte, 1, &got);
  if (rc == 1) return false;
  const bool waiting = SSL_get_error(ssl_, rc) == SSL_ERROR_WANT_READ;
  ERR_clear_error();
  return waiting;
}

RedisAddress secured(RedisAddress address, const TlsOptions& options, TlsContext::Logger log) {
  if (!address.secure) {
    if (!(options == TlsOptions{})) {
      throw std::invalid_argument("ratewin: TLS settings are given, but the Redis address " +
                                  address.describe() + " is not TLS: use a rediss scheme");
    }
    return address;
  }
  address.use_tls(TlsContext::make(address.tls_params.over(options), std::move(log)));
  return address;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
