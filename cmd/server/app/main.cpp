// ratewin-server: the command line and main(). HTTP/1.1 on libuv, one loop per thread
// on SO_REUSEPORT sockets (http_loops.h), each request limited by the rules (service.h);
// the main thread handles signals and watches the rules file (control.h).
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "app/control.h"
#include "app/log.h"
#include "app/redis_password.h"
#include "http/http_loops.h"
#include "ratewin/engine.h"
#include "rls/grpc_front.h"
#include "rls/rls_service.h"
#include "rules/overrides.h"
#include "rules/rules.h"
#include "service/forward_auth.h"
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


// "65536", "64K", "256M", "1G" (powers of 1024; "KiB", "MiB", "GiB" too).
bool parse_bytes(const std::string& text, std::size_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0 || text.front() == '-') return false;
  const std::string suffix(end);
  unsigned shift = 0;
  if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (!suffix.empty()) {
    return false;
  }
  if (n > (std::numeric_limits<std::size_t>::max() >> shift)) return false;
  out = static_cast<std::size_t>(n) << shift;
  return true;
}

bool parse_listen(const std::string& text, Config& config) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (end == text.c_str() + colon + 1 || *end != '\0' || port < 0 || port > 65535) return false;
  config.host = host;
  config.port = static_cast<int>(port);
  return true;
}

// The Redis password (--redis-password-file, else RATEWIN_REDIS_PASSWORD) put into
// options.redis, and the --redis-tls-* flags into options.tls; false (the problem said)
// when they cannot be used. The files are the engine's to read and check.
bool redis_settings(const cxxopts::ParseResult& args, Options& options) {
  std::string password;
  const std::string password_file = args["redis-password-file"].as<std::string>();
  if (!password_file.empty()) {
    std::string error;
    std::optional<std::string> read = read_password_file(password_file, error);
    if (!read) {
      std::fprintf(stderr, "ratewin-server: --redis-password-file: %s\n", error.c_str());
      return false;
    }
    if (options.redis.empty()) {
      std::fprintf(stderr, "ratewin-server: --redis-password-file needs --redis\n");
      return false;
    }
    password = std::move(*read);
  } else if (const char* env = std::getenv("RATEWIN_REDIS_PASSWORD");
             env != nullptr && !options.redis.empty()) {
    password = env;
  }
  if (!password.empty()) {
    std::string error;
    std::optional<std::string> url = with_redis_password(options.redis, password, error);
    if (!url) {
      std::fprintf(stderr, "ratewin-server: --redis: %s\n", error.c_str());
      return false;
    }
    options.redis = std::move(*url);
  }

  TlsOptions& tls = options.tls;
  tls.ca_file = args["redis-tls-ca-file"].as<std::string>();
  tls.ca_dir = args["redis-tls-ca-dir"].as<std::string>();
  tls.cert_file = args["redis-tls-cert-file"].as<std::string>();
  tls.key_file = args["redis-tls-key-file"].as<std::string>();
  tls.server_name = args["redis-tls-server-name"].as<std::string>();
  const std::string verify = args["redis-tls-verify"].as<std::string>();
  if (verify == "full") {
    tls.verify = TlsVerify::full;
  } else if (verify == "ca") {
    tls.verify = TlsVerify::ca;
  } else if (verify == "none") {
    tls.verify = TlsVerify::none;
  } else {
    std::fprintf(stderr, "ratewin-server: --redis-tls-verify must be full, ca or none\n");
    return false;
  }
  tls.min_version = args["redis-tls-min-version"].as<std::string>();
  if (tls.min_version != "1.2" && tls.min_version != "1.3") {
    std::fprintf(stderr, "ratewin-server: --redis-tls-min-version must be 1.2 or 1.3\n");
    return false;
  }
  return true;
}

// --check: the rules file loaded as the server would (checked_rules()), its rules printed
// as JSON on stdout. 0 when valid, 1 with the message a reload logs when not, 2 without
// --rules.
int check_rules_file(const ServiceOptions& service_options, Options engine_options) {
  if (service_options.rules_path.empty()) {
    std::fprintf(stderr, "ratewin-server: --check needs a rules file (--rules FILE)\n");
    return 2;
  }
  engine_options.redis.clear();  // the memory bound is what counts; no store is needed
  engine_options.tls = TlsOptions();
  engine_options.logger = log;
  try {
    const Engine engine(engine_options);
    const Rules rules = checked_rules(Rules::read(service_options.rules_path),
                                      service_options.rules_path, engine,
                                      service_options.allow_empty_rules, log);
    std::printf("%s\n", rules.describe_json().c_str());
    std::fprintf(stderr, "ratewin-server: %s: valid, version %s, %zu limits\n",
                 service_options.rules_path.c_str(), rules.version().c_str(),
                 rules.limit_count());
    return 0;
  } catch (const RulesError& e) {
    std::fprintf(stderr, "ratewin-server: rules rejected: %s\n", e.what());
    return 1;
  }
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
               "printed on stdout). A port another process listens on is refused, unless "
               "--reuse-port", cxxopts::value<std::string>()->default_value("127.0.0.1:8080"))
    ("reuse-port", "Share the --listen port with other processes (SO_REUSEPORT: the kernel "
                   "spreads connections over them). They must share one --redis: each "
                   "process counts apart otherwise, and a client gets its limit once per "
                   "process")
    ("redis", "Share counts with every instance through this Redis; without it, "
              "local-only. One server: redis://[user[:password]@]host[:port][/db], "
              "rediss://... (the same over TLS) or unix://[user[:password]@]/path[?db=N]; a "
              "Redis Cluster's seed nodes: redis-cluster://[user[:password]@]host:port[,host:"
              "port...] or rediss-cluster://... (TLS); a primary behind Redis Sentinel: "
              "redis-sentinel://[user[:password]@]host:port[,host:port...]/master-name"
              "[?sentinel_password=...&sentinel_user=...&db=N] or rediss-sentinel://... "
              "(TLS). A rediss URL may also give the TLS settings as parameters "
              "(?tls_ca_file=...&tls_verify=ca), which win over the --redis-tls-* flags",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-password-file", "Read the Redis password from this file (its content, a "
                            "trailing newline dropped) and put it into the --redis URL, which "
                            "must hold no password (a lone user@ there is the ACL user name). "
                            "Without it, RATEWIN_REDIS_PASSWORD does the same from the "
                            "environment. Either keeps the password out of the process list",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-ca-file", "TLS (rediss): the CAs trusted to sign Redis' certificate (PEM); "
                          "without it or --redis-tls-ca-dir, the system's",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-ca-dir", "TLS: a folder of trusted CAs named by hash (openssl rehash)",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-cert-file", "TLS: this client's certificate (PEM), for Redis' "
                            "--tls-auth-clients",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-key-file", "TLS: its private key (PEM); without it, the key is in "
                           "--redis-tls-cert-file",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-server-name", "TLS: the name sent (SNI) and verified in Redis' certificate, "
                              "instead of each server's host",
     cxxopts::value<std::string>()->default_value(""))
    ("redis-tls-verify", "TLS: full (the certificate's chain and name), ca (its chain only) "
                         "or none (nothing: encrypted but unauthenticated; logged as a "
                         "warning)",
     cxxopts::value<std::string>()->default_value("full"))
    ("redis-tls-min-version", "TLS: the oldest version accepted, 1.2 or 1.3",
     cxxopts::value<std::string>()->default_value("1.2"))
    ("require-redis", "Refuse to start (exit 1, with the reason) when --redis cannot be used: "
                      "unreachable, credentials or TLS refused, or an ACL that forbids the "
                      "--key-prefix. Without it the server starts degraded and connects when "
                      "it can")
    ("key-prefix", "Prefix of every Redis key and channel",
     cxxopts::value<std::string>()->default_value("ratewin"))
    ("partition-share", "failure_policy: partitioned: while Redis is unreachable, each "
                        "instance admits max x this / live instances (0.01 to 1000)",
     cxxopts::value<double>()->default_value("1.0"))
    ("partitioned-unknown", "failure_policy: partitioned before an instance has read the "
                            "live count (Redis unreachable from the start): local or closed",
     cxxopts::value<std::string>()->default_value("local"))
    ("write-mode", "How admissions reach Redis: sync (each waits for its write) or batched "
                   "(decided in memory, flushed every --flush-interval-ms; a limit may be "
                   "exceeded by a bounded amount, see README's Batched mode; sliding_window "
                   "and fixed_window limits only)",
     cxxopts::value<std::string>()->default_value("sync"))
    ("flush-interval-ms", "Batched mode's flush interval: 0 chooses per window (a 40th of it, "
                          "10 to 50 ms where the resolution allows), else 1 to 1000. The "
                          "same on every instance",
     cxxopts::value<std::uint32_t>()->default_value("0"))
    ("rules", "YAML rules file (see cmd/server/rules.example.yaml); reloaded when it "
              "changes and on SIGHUP. Without it no request is limited",
     cxxopts::value<std::string>()->default_value(""))
    ("grpc-listen", "Also serve Envoy's rate limit service (gRPC: envoy.service.ratelimit.v3."
                    "RateLimitService/ShouldRateLimit, and grpc.health.v1.Health) on this "
                    "host:port (port 0 picks a free one, printed on stdout), for Envoy, Istio "
                    "and other gateways that call envoyproxy/ratelimit. Its limits come from "
                    "--rls-config. With --listen none, only gRPC is served",
     cxxopts::value<std::string>()->default_value(""))
    ("rls-config", "A folder of envoyproxy/ratelimit configuration files (every *.yaml, one "
                   "domain each), read unchanged; reloaded when it changes and on SIGHUP",
     cxxopts::value<std::string>()->default_value(""))
    ("rls-descriptors", "Several descriptors in one call: all (nothing is counted when any "
                        "is over its limit) or each (every descriptor counted on its own, as "
                        "envoyproxy/ratelimit does)",
     cxxopts::value<std::string>()->default_value("all"))
    ("rls-shadow-mode", "As envoyproxy/ratelimit's SHADOW_MODE: statuses say OVER_LIMIT, but "
                        "the overall code is always OK")
    ("rls-headers", "Response headers in the answer: none, draft (RateLimit-Limit, "
                    "-Remaining, -Reset: envoyproxy/ratelimit's "
                    "LIMIT_RESPONSE_HEADERS_ENABLED) or ietf (RateLimit-Policy and "
                    "RateLimit); both add Retry-After when over the limit",
     cxxopts::value<std::string>()->default_value("none"))
    ("rls-algorithm", "The algorithm of rate limits that name none (a rate_limit's "
                      "algorithm: field): sliding_window, strict_window, fixed_window "
                      "(envoyproxy/ratelimit's epoch-aligned windows), token_bucket or "
                      "sliding_log",
     cxxopts::value<std::string>()->default_value("sliding_window"))
    ("rls-failure-policy", "The failure policy of rate limits that name none: local, open, "
                           "closed or partitioned",
     cxxopts::value<std::string>()->default_value("local"))
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
    ("log-format", "text (a line per message) or json (an object per line)",
     cxxopts::value<std::string>()->default_value("text"))
    ("refusal-log-keys", "Client keys (per rule) the refusal log and GET /admin/top follow at "
                         "once; the refusals of others are counted as \"other\". 0: none",
     cxxopts::value<std::size_t>()->default_value("1000"))
    ("refusal-log-interval", "Seconds between the refusal log's summaries (how often each "
                             "key still refused is logged with its count)",
     cxxopts::value<std::uint64_t>()->default_value("60"))
    ("log-client-keys", "How the refusal log names API keys: hashed (a fingerprint, "
                        "key#<12 hex digits>; GET /admin/top shows both) or full",
     cxxopts::value<std::string>()->default_value("hashed"))
    ("max-connections", "Client connections open at once. At the bound, the connection idle "
                        "the longest (between requests) is closed to make room; with none "
                        "idle, a new one is closed at once",
     cxxopts::value<std::size_t>()->default_value("10000"))
    ("max-connections-per-address", "Client connections open at once from one address (an "
                                    "IPv6 one by its /64); 0: no bound of its own",
     cxxopts::value<std::size_t>()->default_value("1000"))
    ("request-timeout-ms", "Time a client has to send a whole request (408 after it), counted "
                           "from its first byte, or for a new connection from its accept",
     cxxopts::value<std::uint64_t>()->default_value("10000"))
    ("idle-timeout-ms", "Keep-alive connections idle this long between requests are closed",
     cxxopts::value<std::uint64_t>()->default_value("30000"))
    ("drain-timeout-ms", "On SIGTERM, connections still busy after this are closed",
     cxxopts::value<std::uint64_t>()->default_value("10000"))
    ("max-limiters", "Limiters the engine holds at most",
     cxxopts::value<std::size_t>()->default_value("1000000"))
    ("max-memory", "Memory the engine's limiters take at most, in bytes, or with a suffix "
                   "K, M or G (powers of 1024; at least 16K). A limiter takes 48 bytes plus 4 "
                   "per subinterval. While the bounds are full of limiters that still count, "
                   "a new client key evicts the lightest of the oldest, whose counts are kept "
                   "as a ghost its key starts from again. A rules file with a limit of which "
                   "not even one limiter fits is refused",
     cxxopts::value<std::string>()->default_value("256M"))
    ("ipv6-prefix", "IPv6 clients without a key are counted by this many leading bits of "
                    "their address (32 to 128; 128: each address apart), as one host usually "
                    "has a whole /64",
     cxxopts::value<unsigned>()->default_value("64"))
    ("allow-empty-rules", "Accept a rules file that defines no limit, allow or deny entry "
                          "(refused by default: an empty file, or one cut short, would allow "
                          "every request)")
    ("admin-deadline-ms", "An admin override change is made in Redis within this long of "
                          "its request or not at all (Redis checks it on its own clock), "
                          "and answered by then plus 500 ms: 200 when made, 503 when not. "
                          "Below --request-timeout-ms less 500 (by default, at most half "
                          "of it)",
     cxxopts::value<std::uint64_t>()->default_value("2000"))
    ("reload-settle-ms", "A rules file (or --rls-config file) written in place is reloaded "
                         "once it has stood unchanged this long; one renamed into place "
                         "after 100 ms",
     cxxopts::value<std::uint64_t>()->default_value("1000"))
    ("reload-wait-ms", "POST /admin/reload waits this long for the reload's outcome (200 "
                       "with the version, 422 with the error), whatever "
                       "--request-timeout-ms; a reload still under way then is answered "
                       "202 and goes on: GET /admin/rules says its outcome once "
                       "\"reloading\" is false",
     cxxopts::value<std::uint64_t>()->default_value("60000"))
    ("max-buffer-memory", "Memory the client connections' buffers take (answers not taken "
                          "yet, input held back, requests arriving), as --max-memory. A "
                          "connection reads no more while 16K of its answers wait; over this "
                          "bound, one that does not take its answers is closed",
     cxxopts::value<std::string>()->default_value("64M"))
    ("check", "Check the --rules file as a reload would (with --max-memory and "
              "--allow-empty-rules), print the rules in effect as JSON and exit: 0 when "
              "valid, 1 with the reload's message when not. Also: ratewin-server check RULES "
              "[options]")
    ("version", "Print the version and exit")
    ("h,help", "Print this help");
  // clang-format on
  // "ratewin-server check RULES [options]" is "--check --rules RULES [options]".
  std::vector<char*> argument(argv, argv + argc);
  std::string check_flag = "--check", rules_flag = "--rules";
  if (argc >= 3 && std::string_view(argv[1]) == "check") {
    argument[1] = check_flag.data();
    argument.insert(argument.begin() + 2, rules_flag.data());
  }
  cxxopts::ParseResult args;
  try {
    args = cli.parse(static_cast<int>(argument.size()), argument.data());
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "ratewin-server: %s (see --help)\n", e.what());
    return 2;
  }
  if (args.count("help") != 0) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  if (args.count("version") != 0) {
    std::printf("ratewin-server %s (gRPC rate limit service: %s)\n", RATEWIN_SERVER_VERSION,
                GrpcFront::available() ? "built in" : "not built");
    return 0;
  }
  const std::string level = args["log-level"].as<std::string>();
  const std::string levels[] = {"debug", "info", "warning", "error"};
  const auto found = std::find(std::begin(levels), std::end(levels), level);
  if (found == std::end(levels)) {
    std::fprintf(stderr, "ratewin-server: --log-level must be debug, info, warning or error\n");
    return 2;
  }
  set_log_threshold(static_cast<LogLevel>(found - std::begin(levels)));
  const std::string format = args["log-format"].as<std::string>();
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "ratewin-server: --log-format must be text or json\n");
    return 2;
  }
  set_log_format(format == "json" ? LogFormat::json : LogFormat::text);

  Config config;
  const bool http = args["listen"].as<std::string>() != "none";
  const std::string grpc_listen = args["grpc-listen"].as<std::string>();
  if (http && !parse_listen(args["listen"].as<std::string>(), config)) {
    std::fprintf(stderr,
                 "ratewin-server: --listen must be host:port (or none, with --grpc-listen)\n");
    return 2;
  }
  if (!http && grpc_listen.empty()) {
    std::fprintf(stderr, "ratewin-server: --listen none needs --grpc-listen\n");
    return 2;
  }
  if (!grpc_listen.empty() && !GrpcFront::available()) {
    std::fprintf(stderr,
                 "ratewin-server: --grpc-listen: built without gRPC (RATEWIN_BUILD_GRPC=OFF)\n");
    return 2;
  }
  rls::ServiceOptions rls_options;
  rls_options.folder = args["rls-config"].as<std::string>();
  if (const std::string d = args["rls-descriptors"].as<std::string>(); d == "each") {
    rls_options.each_descriptor = true;
  } else if (d != "all") {
    std::fprintf(stderr, "ratewin-server: --rls-descriptors must be all or each\n");
    return 2;
  }
  rls_options.shadow = args.count("rls-shadow-mode") != 0;
  if (const std::string h = args["rls-headers"].as<std::string>(); h == "draft") {
    rls_options.headers = rls::HeaderStyle::draft;
  } else if (h == "ietf") {
    rls_options.headers = rls::HeaderStyle::ietf;
  } else if (h != "none") {
    std::fprintf(stderr, "ratewin-server: --rls-headers must be none, draft or ietf\n");
    return 2;
  }
  if (!parse_algorithm(args["rls-algorithm"].as<std::string>(), rls_options.config.algorithm)) {
    std::fprintf(stderr,
                 "ratewin-server: --rls-algorithm must be sliding_window, strict_window, "
                 "fixed_window, token_bucket or sliding_log\n");
    return 2;
  }
  if (!parse_failure_policy(args["rls-failure-policy"].as<std::string>(),
                            rls_options.config.failure_policy)) {
    std::fprintf(stderr,
                 "ratewin-server: --rls-failure-policy must be local, open, closed or "
                 "partitioned\n");
    return 2;
  }
  if (grpc_listen.empty() && !rls_options.folder.empty()) {
    std::fprintf(stderr, "ratewin-server: --rls-config needs --grpc-listen\n");
    return 2;
  }
  config.threads = args["threads"].as<unsigned>();
  config.max_connections = args["max-connections"].as<std::size_t>();
  config.max_connections_per_address = args["max-connections-per-address"].as<std::size_t>();
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
  service_options.allow_empty_rules = args.count("allow-empty-rules") != 0;
  service_options.ipv6_prefix = args["ipv6-prefix"].as<unsigned>();
  if (service_options.ipv6_prefix < 32 || service_options.ipv6_prefix > 128) {
    std::fprintf(stderr, "ratewin-server: --ipv6-prefix must be 32 to 128\n");
    return 2;
  }
  service_options.refusals.max_keys = args["refusal-log-keys"].as<std::size_t>();
  const std::uint64_t refusal_interval = args["refusal-log-interval"].as<std::uint64_t>();
  const std::string client_keys = args["log-client-keys"].as<std::string>();
  if (refusal_interval < 1 || refusal_interval > 86400 ||
      (client_keys != "hashed" && client_keys != "full")) {
    std::fprintf(stderr, "ratewin-server: --refusal-log-interval must be 1 to 86400 (seconds), "
                         "--log-client-keys hashed or full\n");
    return 2;
  }
  service_options.refusals.interval = std::chrono::seconds(refusal_interval);
  service_options.refusals.log_full_keys = client_keys == "full";
  service_options.reload_settle_ms = args["reload-settle-ms"].as<std::uint64_t>();
  service_options.reload_wait_ms = args["reload-wait-ms"].as<std::uint64_t>();
  if (service_options.reload_wait_ms == 0) {
    std::fprintf(stderr, "ratewin-server: --reload-wait-ms must be above 0\n");
    return 2;
  }
  service_options.admin_deadline_ms = args["admin-deadline-ms"].as<std::uint64_t>();
  if (args.count("admin-deadline-ms") == 0) {  // (the default fits a short request timeout)
    service_options.admin_deadline_ms = std::max<std::uint64_t>(
        1, std::min(service_options.admin_deadline_ms, config.request_timeout_ms / 2));
  } else if (service_options.admin_deadline_ms == 0 ||
             service_options.admin_deadline_ms + 500 >= config.request_timeout_ms) {
    std::fprintf(stderr,
                 "ratewin-server: --admin-deadline-ms must be above 0 and below "
                 "--request-timeout-ms less 500 (an admin change is answered by its deadline "
                 "plus 500 ms, within the request's time)\n");
    return 2;
  }
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
  if (!redis_settings(args, engine_options)) return 2;
  engine_options.key_prefix = args["key-prefix"].as<std::string>();
  engine_options.require_store = args.count("require-redis") != 0;
  if (engine_options.require_store && engine_options.redis.empty()) {
    std::fprintf(stderr, "ratewin-server: --require-redis needs --redis\n");
    return 2;
  }
  engine_options.max_limiters = args["max-limiters"].as<std::size_t>();
  if (!parse_bytes(args["max-memory"].as<std::string>(), engine_options.max_memory) ||
      engine_options.max_memory < 16 * 1024) {
    std::fprintf(stderr,
                 "ratewin-server: --max-memory must be bytes (at least 16K), with an "
                 "optional suffix K, M or G\n");
    return 2;
  }
  if (args.count("check") != 0) return check_rules_file(service_options, engine_options);
  if (!parse_bytes(args["max-buffer-memory"].as<std::string>(), config.max_buffer_bytes) ||
      config.max_buffer_bytes < 64 * 1024) {
    std::fprintf(stderr,
                 "ratewin-server: --max-buffer-memory must be bytes (at least 64K), with an "
                 "optional suffix K, M or G\n");
    return 2;
  }
  engine_options.logger = log;
  engine_options.partition_share = args["partition-share"].as<double>();
  if (const std::string unknown = args["partitioned-unknown"].as<std::string>();
      unknown == "closed") {
    engine_options.partitioned_unknown = FailurePolicy::closed;
  } else if (unknown != "local") {
    std::fprintf(stderr, "ratewin-server: --partitioned-unknown must be local or closed\n");
    return 2;
  }
  if (const std::string write = args["write-mode"].as<std::string>(); write == "batched") {
    engine_options.write_mode = WriteMode::batched;
  } else if (write != "sync") {
    std::fprintf(stderr, "ratewin-server: --write-mode must be sync or batched\n");
    return 2;
  }
  engine_options.flush_interval =
      std::chrono::milliseconds(args["flush-interval-ms"].as<std::uint32_t>());

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
    Overrides overrides(engine_options.redis.empty()
                            ? RedisTarget()
                            : RedisTarget(engine_options.redis, engine_options.tls),
                        engine_options.key_prefix, log);
    Service service(engine, overrides, service_options, log, log_event);
    std::unique_ptr<rls::RateLimitService> rls_service;
    std::unique_ptr<GrpcFront> grpc;
    if (!grpc_listen.empty()) {
      rls_options.config.capacity = [&engine](const Limit& limit) {
        return engine.capacity(limit);
      };
      rls_service = std::make_unique<rls::RateLimitService>(engine, rls_options, log);
      service.add_metrics([&rls_service](PrometheusText& out) { rls_service->write_metrics(out); });
      grpc = GrpcFront::start(*rls_service, grpc_listen, config.threads);
    }

    if (http && args.count("reuse-port") == 0 && port_in_use(config)) {
      log(LogLevel::error,
          "cannot listen on " + config.host + ":" + std::to_string(config.port) +
              ": another process listens there (another ratewin-server?). To serve one "
              "port from several processes, give each --reuse-port and the same --redis");
      return 1;
    }
    if (http && args.count("reuse-port") != 0) {
      log(LogLevel::warning,
          "--reuse-port: other processes may serve port " + std::to_string(config.port) +
              " too; they must all use the same --redis" +
              (engine_options.redis.empty()
                   ? std::string(" (this one has none: its counts are its own, and a "
                                 "client gets its limit once per process)")
                   : std::string()));
    }
    if (http) raise_file_limit(config.max_connections);
    std::vector<std::unique_ptr<Worker>> workers;
    int port = config.port;
    for (unsigned i = 0; http && i < config.threads; ++i) {
      std::string error;
      const int fd = listen_socket(config, port, error);
      if (fd < 0) {
        log(LogLevel::error, error);
        for (auto& w : workers) w->drain();
        return 1;
      }
      if (i == 0) port = bound_port(fd);  // port 0: the others share the one picked
      workers.push_back(Worker::create(config, service, fd));
      if (!workers.back()->start(error)) {
        log(LogLevel::error, error);
        for (auto& w : workers) w->drain();
        return 1;
      }
    }
    Control control(service, workers, rls_service.get(), grpc.get());
    if (http) {
      std::printf("ratewin-server listening on %s:%d (%u threads, %s, rules %s)\n",
                  config.host.c_str(), port, config.threads,
                  engine_options.redis.empty() ? "local-only" : "Redis",
                  service.rules()->version().c_str());
    }
    if (grpc) {
      const std::size_t colon = grpc_listen.rfind(':');
      std::printf("ratewin-server gRPC listening on %s:%d (%s, rls config %s)\n",
                  grpc_listen.substr(0, colon).c_str(), grpc->port(),
                  engine_options.redis.empty() ? "local-only" : "Redis",
                  rls_service->config()->version().c_str());
    }
    std::fflush(stdout);
    // From here on the signals reach this thread (and only it: every other thread was
    // started with them blocked).
    pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);
    control.run();
    if (grpc) grpc->stop(std::chrono::milliseconds(config.drain_timeout_ms));
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
