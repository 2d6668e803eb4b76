// server_tls.h: TLS for a listener (the server's side of it), on OpenSSL, independent of
// sockets. ServerTls is what every connection of a listener shares: the certificate and
// key, the CAs a client's certificate must chain to (mutual TLS), ALPN; its files are
// read again when they change. TlsSession is one connection's TLS as a Session
// (session.h) over the protocol's session: records in, records out, through memory
// buffers, so the transport (http_loops.h) serves it as it serves a plain connection,
// under the same slots, timeouts and buffer bound. The handshake is part of the first
// request: it must be done within the request timeout.
//
// Threads: ServerTls is thread-safe; a TlsSession belongs to its connection's loop.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/outcome.h"
#include "http/session.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace ratewin::server {

struct ServerTlsOptions {
  std::string cert_file;  // the server's certificate chain (PEM)
  std::string key_file;   // its private key (PEM); empty: in cert_file
  // Not empty: clients must present a certificate signed by one of these CAs (PEM).
  std::string client_ca_file;
  std::string min_version = "1.2";  // 1.2 or 1.3
  // The protocol a client must agree to by ALPN when it offers any ("h2" for gRPC);
  // a client that offers none is served.
  std::string alpn;
  // How often, at most, a new connection looks whether the files changed.
  std::uint64_t recheck_ms = 1000;
};

// The handshakes a listener's connections finished and failed, for /metrics.
struct TlsCounters {
  std::atomic<std::uint64_t> handshakes{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> reloads{0};          // the files changed and were loaded
  std::atomic<std::uint64_t> reload_failures{0};  // the files changed and could not be
};

class ServerTls {
 public:
  using Logger = std::function<void(bool error, const std::string& message)>;
  // Loads the files, or says what cannot be used. `log` hears of files reloaded (or kept
  // when the new ones cannot be used).
  static Result<std::shared_ptr<ServerTls>> make(ServerTlsOptions options, Logger log);
  ~ServerTls();
  ServerTls(const ServerTls&) = delete;
  ServerTls& operator=(const ServerTls&) = delete;

  // A new connection's TLS over `inner` (the protocol's session); null when OpenSSL
  // cannot make one (out of memory): the connection is to be closed.
  std::unique_ptr<Session> wrap(std::unique_ptr<Session> inner);
  const ServerTlsOptions& options() const noexcept { return options_; }
  TlsCounters& counters() noexcept { return counters_; }

 private:
  struct Files;
  ServerTls(ServerTlsOptions options, Logger log);
  // The current context, with a reference for the caller; made again first when the
  // files changed (looked at every recheck_ms at most).
  SSL_CTX* current();

  const ServerTlsOptions options_;
  const Logger log_;
  TlsCounters counters_;
  std::mutex mutex_;
  SSL_CTX* ctx_ = nullptr;
  std::unique_ptr<Files> files_;
  std::int64_t checked_ms_ = 0;  // steady clock
};

class TlsSession final : public Session {
 public:
  // Takes `ssl` (server mode, no BIO yet).
  TlsSession(SSL* ssl, std::unique_ptr<Session> inner, TlsCounters& counters);
  ~TlsSession() override;
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  bool feed(std::string_view data) override;
  bool blocked() const noexcept override;
  bool resume() override;
  std::size_t buffered() const noexcept override;
  bool timed_out() override;
  std::uint64_t owed_wait_ms(std::uint64_t otherwise) const noexcept override {
    return inner_->owed_wait_ms(otherwise);
  }
  std::uint64_t receiving_wait_ms(std::uint64_t otherwise) const noexcept override {
    return inner_->receiving_wait_ms(otherwise);
  }
  std::uint64_t idle_wait_ms(std::uint64_t otherwise) const noexcept override {
    return inner_->idle_wait_ms(otherwise);
  }
  void input_ended() override;
  bool drain() override;
  void on_answer(std::function<void()> callback) override {
    inner_->on_answer(std::move(callback));
  }
  // The records of what the protocol's session has written since the last call (and of
  // the handshake, and a close_notify once it is closing).
  std::string& output() noexcept override;
  bool mid_request() const noexcept override { return !ready_ || inner_->mid_request(); }
  bool closing() const noexcept override { return ended_ || inner_->closing(); }
  std::uint64_t requests() const noexcept override { return inner_->requests(); }
  std::size_t pending() const noexcept override { return inner_->pending(); }
  std::uint64_t deadline_key() const noexcept override { return inner_->deadline_key(); }
  void set_peer(std::string peer) override { inner_->set_peer(std::move(peer)); }

  // The handshake is done (tests).
  bool ready() const noexcept { return ready_; }

 private:
  // Runs the handshake, then hands what can be decrypted to the inner session while it
  // takes more. As feed().
  bool advance();
  // Moves the records waiting in the write buffer into output_.
  void take_records();
  // The handshake or a record failed: the connection ends (with the alert, if any).
  void fail();
  // The handshake will not finish: counted (once) as failed.
  void unfinished();

  SSL* ssl_;
  BIO* in_;   // records from the client (ours: SSL reads them)
  BIO* out_;  // records to the client (ours: SSL writes them)
  std::unique_ptr<Session> inner_;
  TlsCounters& counters_;
  std::string output_;
  bool ready_ = false;  // the handshake is done
  // The connection ends now: the handshake or a record failed, or the handshake had not
  // finished in time or when the server drained. Only what is in output_ goes out.
  bool ended_ = false;
  bool input_done_ = false;  // close_notify came, or input ended
  bool inner_done_ = false;  // the inner session wants no more input
  bool notified_ = false;    // our close_notify is in output_
  bool unfinished_ = false;  // counted as a failed handshake
  // Decrypting stopped because the protocol was blocked: records wait for resume().
  bool held_back_ = false;
};

}  // namespace ratewin::server
