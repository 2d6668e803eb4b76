#include "http/server_tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "ratewin_internal/tls_files.h"

namespace ratewin::server {

namespace {

using internal::openssl_reason;

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ALPN: the protocol the listener speaks, when the client offers it among its own
// (`in`: length-prefixed names); a client that offers others only is refused with
// no_application_protocol (RFC 7301), as a gRPC server must not answer HTTP/1.1.
int select_alpn(SSL*, const unsigned char** out, unsigned char* out_size, const unsigned char* in,
                unsigned in_size, void* arg) {
  const std::string& wanted = *static_cast<const std::string*>(arg);
  for (unsigned i = 0; i < in_size;) {
    const unsigned n = in[i];
    if (i + 1 + n > in_size) break;
    if (n == wanted.size() && std::memcmp(in + i + 1, wanted.data(), n) == 0) {
      *out = in + i + 1;
      *out_size = static_cast<unsigned char>(n);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + n;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

// An OpenSSL context made from `o` (the caller owns it), or what cannot be used.
Result<SSL_CTX*> build(const ServerTlsOptions& o) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr)
    return Status(Status::Code::io, "cannot make a TLS context: " + openssl_reason());
  const auto fail = [&](std::string what) {
    SSL_CTX_free(ctx);
    return Status(Status::Code::invalid, std::move(what));
  };
  SSL_CTX_set_min_proto_version(ctx, o.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION);
  // Records go through memory buffers that always take a whole write; an idle
  // connection gives its read and write buffers back.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  // No renegotiation (TLS 1.2's: a client could make the server redo handshakes on one
  // connection); the server's cipher preference.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  const std::string& key = o.key_file.empty() ? o.cert_file : o.key_file;
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
    return fail("cannot load the certificate '" + o.cert_file + "': " + openssl_reason());
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string reason = openssl_reason();
    if (reason.find("mismatch") != std::string::npos)
      return fail("the key '" + key + "' does not match the certificate '" + o.cert_file + "'");
    return fail("cannot load the key '" + key + "': " + reason);
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail("the key '" + key + "' does not match the certificate '" + o.cert_file + "'");
  if (!o.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.client_ca_file.c_str(), nullptr) != 1) {
      return fail("cannot load the client CAs '" + o.client_ca_file + "': " + openssl_reason());
    }
    // The CAs named to the client in the certificate request (a client with several
    // certificates picks the one they signed).
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.client_ca_file.c_str()))
      SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  // Resumed sessions (tickets) must come from this listener: a context of its own.
  static constexpr unsigned char kContext[] = "ratewin-server";
  SSL_CTX_set_session_id_context(ctx, kContext, sizeof kContext - 1);
  if (!o.alpn.empty())
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, const_cast<std::string*>(&o.alpn));
  return ctx;
}

}  // namespace

// What the files were when last loaded: a rotated file has another inode, time or size.
struct ServerTls::Files {
  std::array<internal::FileStamp, 3> stamps;  // cert_file, key_file, client_ca_file

  static Files of(const ServerTlsOptions& o) {
    using internal::FileStamp;
    return Files{
        {FileStamp::of(o.cert_file), FileStamp::of(o.key_file), FileStamp::of(o.client_ca_file)}};
  }
  bool operator==(const Files&) const = default;
};

ServerTls::ServerTls(ServerTlsOptions options, Logger log)
    : options_(std::move(options)), log_(std::move(log)) {}

ServerTls::~ServerTls() { SSL_CTX_free(ctx_); }

Result<std::shared_ptr<ServerTls>> ServerTls::make(ServerTlsOptions options, Logger log) {
  if (options.min_version != "1.2" && options.min_version != "1.3")
    return invalid("the TLS version must be 1.2 or 1.3, not '" + options.min_version + "'");
  if (options.cert_file.empty()) return invalid("a certificate file is needed");
  std::shared_ptr<ServerTls> tls(new ServerTls(std::move(options), std::move(log)));
  tls->files_ = std::make_unique<Files>(Files::of(tls->options_));
  Result<SSL_CTX*> built = build(tls->options_);
  if (!built) return built.status();
  tls->ctx_ = *built;
  tls->checked_ms_ = steady_ms();
  return tls;
}

SSL_CTX* ServerTls::current() {
  std::lock_guard lock(mutex_);
  const std::int64_t now = steady_ms();
  if (now - checked_ms_ >= static_cast<std::int64_t>(options_.recheck_ms)) {
    checked_ms_ = now;
    Files files = Files::of(options_);
    if (!(files == *files_)) {
      *files_ = files;  // (reported once per change, not at every connection)
      if (Result<SSL_CTX*> fresh = build(options_)) {
        SSL_CTX_free(ctx_);
        ctx_ = *fresh;
        counters_.reloads.fetch_add(1, std::memory_order_relaxed);
        if (log_) log_(false, "TLS: certificate files changed; loaded them again");
      } else {
        counters_.reload_failures.fetch_add(1, std::memory_order_relaxed);
        if (log_) {
          log_(true, "TLS: certificate files changed but cannot be used (" + fresh.message() +
                         "); keeping the ones loaded before");
        }
      }
    }
  }
  SSL_CTX_up_ref(ctx_);
  return ctx_;
}

std::unique_ptr<Session> ServerTls::wrap(std::unique_ptr<Session> inner) {
  SSL_CTX* ctx = current();
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  SSL_CTX_free(ctx);  // (the connection holds its own reference)
  if (ssl == nullptr) {
    ERR_clear_error();
    return nullptr;
  }
  auto session = std::make_unique<TlsSession>(ssl, std::move(inner), counters_);
  return session;
}

TlsSession::TlsSession(SSL* ssl, std::unique_ptr<Session> inner, TlsCounters& counters)
    : ssl_(ssl),
      in_(BIO_new(BIO_s_mem())),
      out_(BIO_new(BIO_s_mem())),
      inner_(std::move(inner)),
      counters_(counters) {
  // An empty input buffer is "more to come", not the end of the stream.
  BIO_set_mem_eof_return(in_, -1);
  SSL_set_bio(ssl_, in_, out_);  // (the SSL owns both now)
  SSL_set_accept_state(ssl_);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

bool TlsSession::feed(std::string_view data) {
  if (ended_ || input_done_ || inner_done_) return false;
  while (!data.empty()) {
    const int n =
        BIO_write(in_, data.data(), static_cast<int>(std::min<std::size_t>(data.size(), INT_MAX)));
    if (n <= 0) {
      fail();
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return advance();
}

bool TlsSession::advance() {
  ERR_clear_error();
  if (!ready_) {
    const int rc = SSL_do_handshake(ssl_);
    if (rc != 1) {
      const int code = SSL_get_error(ssl_, rc);
      if (code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE) {
        unfinished();
        fail();
        return false;
      }
      take_records();
      return true;
    }
    ready_ = true;
    counters_.handshakes.fetch_add(1, std::memory_order_relaxed);
  }
  // What can be decrypted goes to the protocol, for as long as it takes more (what it
  // holds back stays here, as records, until resume()).
  char plain[16 * 1024];
  held_back_ = false;
  while (!inner_done_ && !input_done_ && !ended_) {
    if (inner_->blocked()) {
      held_back_ = true;
      break;
    }
    const int n = SSL_read(ssl_, plain, sizeof plain);
    if (n > 0) {
      if (!inner_->feed(std::string_view(plain, static_cast<std::size_t>(n)))) inner_done_ = true;
      continue;
    }
    const int code = SSL_get_error(ssl_, n);
    if (code == SSL_ERROR_WANT_READ) break;
    if (code == SSL_ERROR_ZERO_RETURN) {  // the client's close_notify: no more input
      input_done_ = true;
      inner_->input_ended();
      break;
    }
    fail();
  }
  take_records();  // (tickets, key updates, alerts)
  return !(ended_ || input_done_ || inner_done_);
}

void TlsSession::unfinished() {
  if (unfinished_) return;
  unfinished_ = true;
  counters_.failed.fetch_add(1, std::memory_order_relaxed);
}

void TlsSession::fail() {
  ended_ = true;
  ERR_clear_error();
  take_records();
}

bool TlsSession::blocked() const noexcept {
  // Records held back while the protocol was blocked: parsing goes on at resume(). (Not
  // merely bytes waiting: a record cut by the network waits for its rest, which must be
  // read.)
  return inner_->blocked() || (held_back_ && !ended_ && !input_done_ && !inner_done_);
}

bool TlsSession::resume() {
  if (ended_ || input_done_ || inner_done_) return false;
  if (inner_->blocked() && !inner_->resume()) {
    inner_done_ = true;
    return false;
  }
  return inner_->blocked() ? true : advance();
}

std::size_t TlsSession::buffered() const noexcept {
  return output_.capacity() + inner_->buffered() + BIO_ctrl_pending(in_) + BIO_ctrl_pending(out_) +
         sizeof(*this);
}

bool TlsSession::timed_out() {
  if (!ready_) {
    // The handshake did not finish within the request timeout.
    unfinished();
    ended_ = true;
    return true;
  }
  return inner_->timed_out();
}

void TlsSession::input_ended() {
  if (!ready_) unfinished();  // the client left during the handshake (refused it, say)
  input_done_ = true;
  inner_->input_ended();
}

bool TlsSession::drain() {
  if (!ready_) {
    ended_ = true;
    return true;
  }
  return inner_->drain();
}

std::string& TlsSession::output() noexcept {
  if (ready_ && !ended_) {
    std::string& plain = inner_->output();
    if (!plain.empty()) {
      ERR_clear_error();
      std::size_t written = 0;
      // (A memory buffer takes all of it, in records of at most 16 KiB.)
      if (SSL_write_ex(ssl_, plain.data(), plain.size(), &written) != 1) {
        fail();
      }
      plain.clear();
      if (plain.capacity() > Session::kOutputCap) std::string().swap(plain);
    }
    if (!ended_ && !notified_ && inner_->closing()) {
      notified_ = true;
      ERR_clear_error();
      SSL_shutdown(ssl_);  // close_notify, not waiting for the client's
      ERR_clear_error();
    }
  }
  take_records();
  return output_;
}

void TlsSession::take_records() {
  char* data = nullptr;
  const long size = BIO_get_mem_data(out_, &data);
  if (size <= 0) return;
  output_.append(data, static_cast<std::size_t>(size));
  (void)BIO_reset(out_);
}

}  // namespace ratewin::server
