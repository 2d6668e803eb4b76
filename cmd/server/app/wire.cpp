#include "app/wire.h"

#include <pthread.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "admin/admin.h"
#include "app/control.h"
#include "common/log.h"
#include "common/prometheus.h"
#include "app/router.h"
#include "http/http_loops.h"
#include "ratewin/engine.h"
#include "rls/rls_calls.h"
#include "rls/rls_service.h"
#include "rules/overrides.h"
#include "rules/rules.h"
#include "service/service.h"

namespace ratewin::server {
namespace {

// The process's file limit raised, as far as its hard limit allows, to hold
// --max-connections and what else the server opens; a warning when it cannot (accepts
// past it fail, and are logged).
void raise_file_limit(std::size_t max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const auto wanted = static_cast<rlim_t>(max_connections + 256);
  if (limit.rlim_cur >= wanted) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur < wanted) {
    log(LogLevel::warning,
        "the process may open " + std::to_string(limit.rlim_cur) +
            " files, fewer than --max-connections " + std::to_string(max_connections) +
            " needs: raise LimitNOFILE (or ulimit -n), or lower --max-connections");
  }
}

// --grpc-tls-*: the gRPC listener's TLS, its files loaded (null without
// --grpc-tls-cert-file), or why they cannot be used.
Result<std::shared_ptr<ServerTls>> grpc_tls_of(const ServerSettings& settings) {
  if (settings.grpc_tls.cert_file.empty()) return std::shared_ptr<ServerTls>();
  ServerTlsOptions options = settings.grpc_tls;
  options.alpn = "h2";
  Result<std::shared_ptr<ServerTls>> made =
      ServerTls::make(std::move(options), [](bool error, const std::string& message) {
        log(error ? LogLevel::error : LogLevel::info, "--grpc-listen: " + message);
      });
  if (!made) return Status(made.status().code(), "--grpc-tls-cert-file: " + made.message());
  return made;
}

// The TLS listener's handshakes and reloads, for /metrics.
void write_tls_metrics(PrometheusText& out, ServerTls& tls) {
  const TlsCounters& c = tls.counters();
  out.family("ratewin_server_grpc_tls_handshakes_total", "counter",
             "TLS handshakes on --grpc-listen, by outcome (failed: refused, broken, or not "
             "done within --request-timeout-ms)");
  out.sample("outcome=\"ok\"", static_cast<double>(c.handshakes.load(std::memory_order_relaxed)));
  out.sample("outcome=\"failed\"", static_cast<double>(c.failed.load(std::memory_order_relaxed)));
  out.family("ratewin_server_grpc_tls_reloads_total", "counter",
             "Times --grpc-tls-* files changed, by outcome (failed: the ones loaded before kept)");
  out.sample("outcome=\"ok\"", static_cast<double>(c.reloads.load(std::memory_order_relaxed)));
  out.sample("outcome=\"failed\"",
             static_cast<double>(c.reload_failures.load(std::memory_order_relaxed)));
}

// --check: the rules file loaded as the server would (checked_rules()), its rules printed
// as JSON on stdout; the --rls-config folder loaded as the gRPC listener loads it. 0 when
// valid, 1 with the message a reload logs when not.
int check_files(const ServerSettings& settings) {
  const std::string& path = settings.service.rules_path;
  Options engine_options = settings.engine;
  engine_options.redis.clear();  // the memory bound is what counts; no store is needed
  engine_options.tls = TlsOptions();
  engine_options.logger = log;
  Engine engine(engine_options);
  if (!path.empty()) {
    try {
      const Rules rules =
          checked_rules(Rules::read(path), path, engine, settings.service.allow_empty_rules, log);
      std::printf("%s\n", rules.describe_json().c_str());
      std::fprintf(stderr, "ratewin-server: %s: valid, version %s, %zu limits\n", path.c_str(),
                   rules.version().c_str(), rules.limit_count());
    } catch (const RulesError& e) {
      std::fprintf(stderr, "ratewin-server: rules rejected: %s\n", e.what());
      return 1;
    }
  }
  if (const Result<std::shared_ptr<ServerTls>> tls = grpc_tls_of(settings); !tls) {
    std::fprintf(stderr, "ratewin-server: %s\n", tls.message().c_str());
    return 1;
  } else if (*tls) {
    std::fprintf(stderr, "ratewin-server: %s: valid%s\n", settings.grpc_tls.cert_file.c_str(),
                 settings.grpc_tls.client_ca_file.empty() ? "" : ", clients' CAs loaded");
  }
  if (!settings.rls.folder.empty()) {
    try {
      rls::ServiceOptions options = settings.rls;
      options.config.capacity = [&engine](const Limit& limit) { return engine.capacity(limit); };
      const rls::RateLimitService service(engine, options, [](LogLevel, std::string_view) {});
      const std::shared_ptr<const rls::Config> config = service.config();
      std::fprintf(stderr, "ratewin-server: %s: valid, version %s, %zu domains, %zu rate limits\n",
                   settings.rls.folder.c_str(), config->version().c_str(), config->domain_count(),
                   config->rule_count());
    } catch (const RulesError& e) {
      std::fprintf(stderr, "ratewin-server: rls config rejected: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}

// A peer that resets its connection while a response is being written must not end the
// process (libuv writes without MSG_NOSIGNAL). Until the control loop handles them, the
// stop and reload signals wait (a SIGHUP from a deploy tool during start-up would
// otherwise end the process); threads started meanwhile inherit the mask and never
// receive them. The signals held.
sigset_t hold_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  return handled;
}

// An event loop per thread, each on its own socket of every port served: --listen's
// (HTTP/1.1; `port`: the one bound, when --listen asked for 0) and --grpc-listen's (gRPC
// over HTTP/2, with `rls_service`; `grpc_port` likewise). A loop's HTTP requests are
// routed by a Router of its own to `service` and `admin` (null without an admin API), its
// gRPC calls by RLS calls of its own; both kinds of connection share the loops' slots,
// timeouts and buffer bound. False, the reason logged and the loops started drained,
// when a port is another process's (without --reuse-port) or a loop cannot start.
bool start_loops(const ServerSettings& settings, Service& service, AdminApi* admin,
                 rls::RateLimitService* rls_service, const std::shared_ptr<ServerTls>& grpc_tls,
                 Engine& engine, std::vector<std::unique_ptr<HttpLoop>>& loops, int& port,
                 int& grpc_port) {
  const Config& config = settings.http;
  struct Served {
    const std::string& host;
    int& port;
    Protocol protocol;
    const char* flag;
    const std::string& unix_path;  // not empty: a Unix socket, bound once, shared by the loops
    std::shared_ptr<ServerTls> tls;  // not null: TLS
  };
  static const std::string kNoPath;
  std::vector<Served> served;
  if (settings.serve_http)
    served.push_back({config.host, port, Protocol::http1, "--listen", kNoPath, nullptr});
  if (rls_service != nullptr) {
    served.push_back({settings.grpc_host, grpc_port, Protocol::grpc, "--grpc-listen",
                      settings.grpc_unix_path, grpc_tls});
  }
  for (const Served& s : served) {
    if (settings.reuse_port || !s.unix_path.empty() || !port_in_use(s.host, s.port)) continue;
    log(LogLevel::error,
        std::string(s.flag) + ": cannot listen on " + s.host + ":" + std::to_string(s.port) +
            ": another process listens there (another ratewin-server?). To serve one "
            "port from several processes, give each --reuse-port and the same --redis");
    return false;
  }
  if (settings.reuse_port) {
    log(LogLevel::warning,
        "--reuse-port: other processes may serve port " + std::to_string(config.port) +
            " too; they must all use the same --redis" +
            (settings.engine.redis.empty()
                 ? std::string(" (this one has none: its counts are its own, and a "
                               "client gets its limit once per process)")
                 : std::string()));
  }
  raise_file_limit(config.max_connections);
  const HandlerFactory handlers = [&settings, &service, admin, rls_service,
                                   &engine](uv_loop_s* loop) {
    LoopHandlers h;
    if (settings.serve_http) h.http = std::make_unique<Router>(service, admin, loop);
    if (rls_service != nullptr) h.grpc = make_rls_calls(*rls_service, engine, loop);
    return h;
  };
  int unix_fd = -1;  // the loops' shared Unix socket (each takes a dup of it)
  for (unsigned i = 0; i < config.threads; ++i) {
    std::vector<Listener> listeners;
    Status started;
    for (const Served& s : served) {
      if (!s.unix_path.empty()) {
        if (unix_fd < 0) {
          const Result<int> fd = listen_unix_socket(s.unix_path);
          if (!fd) {
            started = Status(fd.status().code(), std::string(s.flag) + ": " + fd.status().message());
            break;
          }
          unix_fd = *fd;
          listeners.push_back(Listener{unix_fd, s.protocol, true, s.tls});
        } else {
          const int dup = ::fcntl(unix_fd, F_DUPFD_CLOEXEC, 0);
          if (dup < 0) {
            started = Status(Status::Code::io, std::string(s.flag) + ": unix:" + s.unix_path +
                                                   ": " + std::strerror(errno));
            break;
          }
          listeners.push_back(Listener{dup, s.protocol, true, s.tls});
        }
        continue;
      }
      const Result<int> fd = listen_socket(s.host, s.port);
      if (!fd) {
        started = Status(fd.status().code(), std::string(s.flag) + ": " + fd.status().message());
        break;
      }
      if (i == 0) s.port = bound_port(*fd);  // port 0: the others share the one picked
      listeners.push_back(Listener{*fd, s.protocol, false, s.tls});
    }
    if (started.ok()) {
      loops.push_back(HttpLoop::create(config, handlers, service.connections(), listeners));
      started = loops.back()->start();
      if (started.ok()) continue;
    } else {
      for (const Listener& l : listeners) ::close(l.fd);
    }
    log(LogLevel::error, started.message());
    for (auto& loop : loops) loop->drain();
    // The socket file this server made goes with it (a later start would replace it,
    // but nothing else should find it meanwhile).
    if (unix_fd >= 0) ::unlink(settings.grpc_unix_path.c_str());
    return false;
  }
  return true;
}

// What is served where, on stdout (scripts and tests read the ports picked from it).
void say_listening(const ServerSettings& settings, int port, int grpc_port,
                   const Service& service, const rls::RateLimitService* rls_service) {
  const char* store = settings.engine.redis.empty() ? "local-only" : "Redis";
  if (settings.serve_http) {
    std::printf("ratewin-server listening on %s:%d (%u threads, %s, rules %s)\n",
                settings.http.host.c_str(), port, settings.http.threads, store,
                service.rules()->version().c_str());
  }
  const char* tls = settings.grpc_tls.cert_file.empty()         ? ""
                    : settings.grpc_tls.client_ca_file.empty() ? "TLS, "
                                                               : "mutual TLS, ";
  if (rls_service != nullptr && !settings.grpc_unix_path.empty()) {
    std::printf("ratewin-server gRPC listening on unix:%s (%s%s, rls config %s)\n",
                settings.grpc_unix_path.c_str(), tls, store,
                rls_service->config()->version().c_str());
  } else if (rls_service != nullptr) {
    std::printf("ratewin-server gRPC listening on %s:%d (%s%s, rls config %s)\n",
                settings.grpc_host.c_str(), grpc_port, tls, store,
                rls_service->config()->version().c_str());
  }
  std::fflush(stdout);
}

// Serves until a stop signal, then drains.
int serve(const ServerSettings& settings) {
  const sigset_t handled = hold_signals();
  try {
    Options engine_options = settings.engine;
    engine_options.logger = log;
    Engine engine(engine_options);
    Overrides overrides(settings.engine.redis.empty()
                            ? RedisTarget()
                            : RedisTarget(settings.engine.redis, settings.engine.tls),
                        settings.engine.key_prefix, log);
    Service service(engine, overrides, settings.service, log, log_event);
    // The admin API, with --admin-token (one for every loop; its lockout is shared).
    std::unique_ptr<AdminApi> admin;
    if (!settings.service.admin_token.empty()) {
      admin = std::make_unique<AdminApi>(service, overrides, settings.service.admin_token);
      service.add_metrics([api = admin.get()](PrometheusText& out) { api->write_metrics(out); },
                          Service::MetricsPlace::after_rules);
    }
    std::unique_ptr<rls::RateLimitService> rls_service;
    if (!settings.grpc_listen.empty()) {
      rls::ServiceOptions rls_options = settings.rls;
      rls_options.config.capacity = [&engine](const Limit& limit) {
        return engine.capacity(limit);
      };
      rls_service = std::make_unique<rls::RateLimitService>(engine, rls_options, log);
      service.add_metrics([&rls_service](PrometheusText& out) { rls_service->write_metrics(out); });
      // /healthz and the status page: the --rls-config in force, and why the last load
      // failed (empty when it did not).
      service.add_status_fields([&rls_service](JsonWriter& j) {
        const std::shared_ptr<const rls::Config> config = rls_service->config();
        j.key("rls").begin_object();
        j.key("version").string(config->version());
        j.key("folder").string(rls_service->folder());
        j.key("rate_limits").number(config->rule_count());
        j.key("last_error").string(rls_service->last_reload_error());
        j.end_object();
      });
    }
    // --grpc-tls-*: the gRPC listener's TLS, its files loaded now (a problem ends the
    // start), again when they change.
    Result<std::shared_ptr<ServerTls>> tls = grpc_tls_of(settings);
    if (!tls) {
      log(LogLevel::error, tls.message());
      return 1;
    }
    const std::shared_ptr<ServerTls> grpc_tls = rls_service != nullptr ? *tls : nullptr;
    if (grpc_tls)
      service.add_metrics([grpc_tls](PrometheusText& out) { write_tls_metrics(out, *grpc_tls); });
    std::vector<std::unique_ptr<HttpLoop>> loops;
    int port = settings.http.port;
    int grpc_port = settings.grpc_port;
    if (!start_loops(settings, service, admin.get(), rls_service.get(), grpc_tls, engine, loops,
                     port, grpc_port))
      return 1;
    Control control(service, loops, rls_service.get());
    say_listening(settings, port, grpc_port, service, rls_service.get());
    // From here on the signals reach this thread (and only it: every other thread was
    // started with them blocked).
    pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
    control.run();
    for (auto& loop : loops) loop->join();
    if (!settings.grpc_unix_path.empty()) ::unlink(settings.grpc_unix_path.c_str());
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

int wire(const ServerSettings& settings) {
  set_log_threshold(settings.log_level);
  set_log_format(settings.log_format);
  if (settings.check) return check_files(settings);
  return serve(settings);
}

}  // namespace ratewin::server
