// TLS on OpenSSL for the Redis connections of rediss://, rediss-cluster:// and
// rediss-sentinel:// addresses: the settings an address carries, the context every
// connection of an engine shares (certificates, trust, resumable sessions), and one
// connection's session, which the transport (redis/transport.h) runs over its socket.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ratewin/engine.h"
#include "redis/endpoint.h"
#include "redis/status.h"
#include "redis/transport.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;

namespace ratewin {
inline namespace v1 {
namespace detail {

class TlsSession;

// What every TLS connection of an engine shares: one OpenSSL context made from the
// options (trusted CAs, this client's certificate and key, the lowest version), and the
// last resumable session of each server, so that a reconnection skips the full
// handshake. The context is made again, on a later connection, when one of its files has
// changed (rotated certificates take effect without a restart); a change that cannot be
// loaded is reported and the previous context kept. Thread-safe.
class TlsContext : public std::enable_shared_from_this<TlsContext> {
 public:
  using Logger = std::function<void(LogLevel, const std::string&)>;
  // Checks the options and loads their files. Throws std::invalid_argument naming what
  // cannot be used. With verify none, warns through `log` once.
  static std::shared_ptr<TlsContext> make(const TlsOptions& options, Logger log);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const TlsOptions& options() const noexcept { return options_; }
  // A session on the connected socket `fd` to the server `host` at `port` (the name it
  // verifies and sends, unless options().server_name is set), resuming that server's last
  // session if there is one. Null, with `status` set, when it cannot be made.
  std::unique_ptr<TlsSession> start(int fd, const std::string& host, int port, Status& status);
  // (OpenSSL's callback: a session the server gave, to resume later.)
  static int on_new_session(SSL* ssl, SSL_SESSION* session);

 private:
  struct Files;  // what the files were when last loaded
  TlsContext(TlsOptions options, Logger log);
  // The current OpenSSL context (a reference the caller frees), made again first if a
  // file changed.
  SSL_CTX* current();
  // Keeps `session` (owned) as `peer`'s to resume.
  void keep(const std::string& peer, SSL_SESSION* session);

  const TlsOptions options_;
  const Logger log_;
  std::mutex mutex_;
  SSL_CTX* ctx_ = nullptr;
  std::unique_ptr<Files> files_;
  std::unordered_map<std::string, SSL_SESSION*> sessions_;  // owned, by "host:port"
  friend class TlsSession;
};

// One connection's TLS, over its non-blocking socket: the handshake, then records in and
// out. Its socket writes never raise SIGPIPE. Not thread-safe.
class TlsSession {
 public:
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // As Transport's: `where` names the server in messages.
  Io handshake(const std::string& where, Status& status);
  Io write(const char* data, std::size_t size, const std::string& where, Status& status);
  Io read(char* data, std::size_t size, const std::string& where, Status& status);
  // Whether the stream is still open while no reply is awaited: records that carry no
  // data (a session ticket) are taken in; data or the end of the stream mean it is not.
  bool idle_alive();
  // Whether bytes read from the socket wait in the session, decrypted or not: read()
  // can return them though the socket is not readable.
  bool buffered() const noexcept;
  // Whether the handshake resumed an earlier session.
  bool resumed() const noexcept;
  // (OpenSSL's callback: the server asks for a client certificate and none is set.)
  static int on_certificate_request(SSL* ssl, X509** certificate, EVP_PKEY** key);

 private:
  friend class TlsContext;
  TlsSession(std::shared_ptr<TlsContext> context, SSL* ssl, std::string peer, std::string name);
  // `status`, explained when the server asked for a client certificate this client did
  // not have and then ended the connection before sending anything.
  Status explained(Status status) const;
  // What an OpenSSL call that did not complete (its SSL_get_error `code`) means: wait
  // for the socket, or the stream ended or failed (`status` says how).
  Io outcome(int code, const std::string& where, bool handshaking, Status& status);

  std::shared_ptr<TlsContext> context_;  // for the sessions it learns
  SSL* ssl_;
  const std::string peer_;  // "host:port": the key of its resumable session
  const std::string name_;  // the name verified
  int fd_;
  bool failed_ = false;                 // a fatal error: no close_notify, not alive
  bool certificate_requested_ = false;  // the server asked for one this client lacks
  bool received_ = false;               // data has come in
};

// `address` ready to connect: with a rediss scheme, its servers' TLS context made from
// `options` with the URL's TLS parameters over them. Throws std::invalid_argument when
// TLS settings cannot be used, or are given (`options` not the defaults) for a plain
// address.
RedisAddress secured(RedisAddress address, const TlsOptions& options, TlsContext::Logger log);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
