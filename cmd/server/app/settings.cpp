#include "app/settings.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cxxopts.hpp>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "app/redis_password.h"
#include "ratewin_internal/engine_options.h"
#include "common/address.h"
#include "rls/rls_calls.h"
#include "rules/rules.h"
#include "service/forward_auth.h"

namespace ratewin::server {
namespace {

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

// When a flag is applied and checked. The steps run in this order, each flag of a step
// (in the table's order) and then each cross-flag check of it; the first problem ends
// the parse and is the one said. The order is the one the checks always had (a script
// that gets two flags wrong sees the same message); `store` flags have no check of their
// own (or one made later, against other flags).
enum class Step : unsigned char {
  store,
  log_level,
  log_format,
  listen,
  listen_none,  // cross: --listen none needs --grpc-listen
  grpc_built,   // cross: --grpc-listen needs a build with gRPC
  rls_descriptors,
  rls_headers,
  rls_algorithm,
  rls_failure_policy,
  rls_config,   // cross: --rls-config needs --grpc-listen
  grpc_tls,     // and its cross-check: --grpc-tls-* need --grpc-listen and a certificate
  http_bounds,  // --threads, --max-connections and the timeouts: one message
  check_path,
  mode,
  ipv6_prefix,
  refusal_log,  // --refusal-log-interval and --log-client-keys: one message
  reload_wait,
  admin_deadline,  // cross: against --request-timeout-ms
  trust_proxy,
  redis_password,  // cross: the password file or environment into the --redis URL
  redis_tls_verify,
  redis_tls_min_version,
  require_redis,  // cross: needs --redis
  max_memory,
  check,  // cross: --check needs --rules; with --check, parsing ends after this step
  max_buffer_memory,
  partitioned_unknown,
  write_mode,
  serving,  // only stored, and only when serving (the engine --check makes must not see them)
  end,
};

using Value = cxxopts::OptionValue;

// A flag: cxxopts' name, help and value (its type and default), and how it applies to
// the settings: the problem (without "ratewin-server: ") when its value cannot be used,
// else empty. A flag without `apply` is read by parse() or by a cross-flag check.
struct Flag {
  const char* name;
  const char* help;
  std::shared_ptr<const cxxopts::Value> value;
  Step step = Step::store;
  std::string (*apply)(const Value& value, ServerSettings& s) = nullptr;
};

// A check of flags against each other (or against the build), with every flag of the
// steps before it applied.
struct CrossCheck {
  Step step;
  std::string (*check)(const cxxopts::ParseResult& args, ServerSettings& s);
};

std::shared_ptr<const cxxopts::Value> text(const std::string& default_value) {
  return cxxopts::value<std::string>()->default_value(default_value);
}
template <typename T>
std::shared_ptr<const cxxopts::Value> number(const std::string& default_value) {
  return cxxopts::value<T>()->default_value(default_value);
}
std::shared_ptr<const cxxopts::Value> flag() { return cxxopts::value<bool>(); }
const std::string& text_of(const Value& v) { return v.as<std::string>(); }
bool given(const Value& v) { return v.count() != 0; }

// The engine's defaults, which the engine's flags default to (engine_options.h).
const Options kEngine;

// A flag naming one of `names`: its value into `out`, or the problem, which lists them.
template <class E>
std::string named(std::span<const internal::Named<E>> names, const Value& v, const char* flag,
                  E& out) {
  const auto value = internal::parse_name(names, text_of(v));
  if (!value) return std::string(flag) + " must be " + internal::choices(names);
  out = *value;
  return {};
}

// A default as --help shows it: a ratio with its decimal point ("1.0"), bytes with the
// largest suffix that divides them ("256M").
std::string ratio_text(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  std::string out(buf, end);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}
std::string bytes_text(std::size_t v) {
  for (const auto& [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}})
    if (v != 0 && v % (std::size_t{1} << shift) == 0) return std::to_string(v >> shift) + suffix;
  return std::to_string(v);
}

constexpr const char* kHttpBounds = "--threads must be 1..256; counts and timeouts above 0";
constexpr const char* kRefusalLog =
    "--refusal-log-interval must be 1 to 86400 (seconds), --log-client-keys hashed or full";

using S = ServerSettings;

// The flags, in --help's order.
// clang-format off
const Flag kFlags[] = {
  {"listen", "Address and port to serve HTTP on (host:port; port 0 picks a free one, "
             "printed on stdout). A port another process listens on is refused, unless "
             "--reuse-port", text("127.0.0.1:8080"), Step::listen,
   [](const Value& v, S& s) -> std::string {
     s.serve_http = text_of(v) != "none";
     if (s.serve_http && !parse_listen(text_of(v), s.http))
       return "--listen must be host:port (or none, with --grpc-listen)";
     return {};
   }},
  {"reuse-port", "Share the --listen port with other processes (SO_REUSEPORT: the kernel "
                 "spreads connections over them). They must share one --redis: each "
                 "process counts apart otherwise, and a client gets its limit once per "
                 "process", flag(), Step::store,
   [](const Value& v, S& s) { s.reuse_port = given(v); return std::string(); }},
  {"redis", "Share counts with every instance through this Redis; without it, "
            "local-only. One server: redis://[user[:password]@]host[:port][/db], "
            "rediss://... (the same over TLS) or unix://[user[:password]@]/path[?db=N]; a "
            "Redis Cluster's seed nodes: redis-cluster://[user[:password]@]host:port[,host:"
            "port...] or rediss-cluster://... (TLS); a primary behind Redis Sentinel: "
            "redis-sentinel://[user[:password]@]host:port[,host:port...]/master-name"
            "[?sentinel_password=...&sentinel_user=...&db=N] or rediss-sentinel://... "
            "(TLS). A rediss URL may also give the TLS settings as parameters "
            "(?tls_ca_file=...&tls_verify=ca), which win over the --redis-tls-* flags",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.redis = text_of(v); return std::string(); }},
  // (read by the Redis password's check, with RATEWIN_REDIS_PASSWORD)
  {"redis-password-file", "Read the Redis password from this file (its content, a "
                          "trailing newline dropped) and put it into the --redis URL, which "
                          "must hold no password (a lone user@ there is the ACL user name). "
                          "Without it, RATEWIN_REDIS_PASSWORD does the same from the "
                          "environment. Either keeps the password out of the process list",
   text("")},
  {"redis-tls-ca-file", "TLS (rediss): the CAs trusted to sign Redis' certificate (PEM); "
                        "without it or --redis-tls-ca-dir, the system's",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.tls.ca_file = text_of(v); return std::string(); }},
  {"redis-tls-ca-dir", "TLS: a folder of trusted CAs named by hash (openssl rehash)",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.tls.ca_dir = text_of(v); return std::string(); }},
  {"redis-tls-cert-file", "TLS: this client's certificate (PEM), for Redis' "
                          "--tls-auth-clients",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.tls.cert_file = text_of(v); return std::string(); }},
  {"redis-tls-key-file", "TLS: its private key (PEM); without it, the key is in "
                         "--redis-tls-cert-file",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.tls.key_file = text_of(v); return std::string(); }},
  {"redis-tls-server-name", "TLS: the name sent (SNI) and verified in Redis' certificate, "
                            "instead of each server's host",
   text(""), Step::store,
   [](const Value& v, S& s) { s.engine.tls.server_name = text_of(v); return std::string(); }},
  {"redis-tls-verify", "TLS: full (the certificate's chain and name), ca (its chain only) "
                       "or none (nothing: encrypted but unauthenticated; logged as a "
                       "warning)",
   text(std::string(internal::name_of(kEngine.tls.verify))), Step::redis_tls_verify,
   [](const Value& v, S& s) {
     return named<TlsVerify>(internal::kTlsVerifyNames, v, "--redis-tls-verify",
                             s.engine.tls.verify);
   }},
  {"redis-tls-min-version", "TLS: the oldest version accepted, 1.2 or 1.3",
   text(kEngine.tls.min_version), Step::redis_tls_min_version,
   [](const Value& v, S& s) -> std::string {
     s.engine.tls.min_version = text_of(v);
     const auto& versions = internal::kTlsVersions;
     if (std::find(std::begin(versions), std::end(versions), text_of(v)) == std::end(versions))
       return "--redis-tls-min-version must be " + internal::choices(versions);
     return {};
   }},
  {"require-redis", "Refuse to start (exit 1, with the reason) when --redis cannot be used: "
                    "unreachable, credentials or TLS refused, or an ACL that forbids the "
                    "--key-prefix. Without it the server starts degraded and connects when "
                    "it can", flag(), Step::store,
   [](const Value& v, S& s) { s.engine.require_store = given(v); return std::string(); }},
  {"key-prefix", "Prefix of every Redis key and channel",
   text(kEngine.key_prefix), Step::store,
   [](const Value& v, S& s) { s.engine.key_prefix = text_of(v); return std::string(); }},
  {"partition-share", "failure_policy: partitioned: while Redis is unreachable, each "
                      "instance admits max x this / live instances (0.01 to 1000)",
   number<double>(ratio_text(kEngine.partition_share)), Step::serving,
   [](const Value& v, S& s) { s.engine.partition_share = v.as<double>(); return std::string(); }},
  {"partitioned-unknown", "failure_policy: partitioned before an instance has read the "
                          "live count (Redis unreachable from the start): local or closed",
   text(std::string(internal::name_of(kEngine.partitioned_unknown))), Step::partitioned_unknown,
   [](const Value& v, S& s) {
     return named<FailurePolicy>(internal::kPartitionedUnknownNames, v, "--partitioned-unknown",
                                 s.engine.partitioned_unknown);
   }},
  {"write-mode", "How admissions reach Redis: sync (each waits for its write) or batched "
                 "(decided in memory, flushed every --flush-interval-ms; a limit may be "
                 "exceeded by a bounded amount, see README's Batched mode; sliding_window "
                 "and fixed_window limits only)",
   text(std::string(internal::name_of(kEngine.write_mode))), Step::write_mode,
   [](const Value& v, S& s) {
     return named<WriteMode>(internal::kWriteModeNames, v, "--write-mode", s.engine.write_mode);
   }},
  {"flush-interval-ms", "Batched mode's flush interval: 0 chooses per window (a 40th of it, "
                        "10 to 50 ms where the resolution allows), else 1 to 1000. The "
                        "same on every instance",
   number<std::uint32_t>(std::to_string(kEngine.flush_interval.count())), Step::serving,
   [](const Value& v, S& s) {
     s.engine.flush_interval = std::chrono::milliseconds(v.as<std::uint32_t>());
     return std::string();
   }},
  {"rules", "YAML rules file (see cmd/server/rules.example.yaml); reloaded when it "
            "changes and on SIGHUP. Without it, nothing is limited and the HTTP port serves only "
            "/healthz, /metrics and the admin paths (404 elsewhere)",
   text(""), Step::store,
   [](const Value& v, S& s) { s.service.rules_path = text_of(v); return std::string(); }},
  {"grpc-listen", "Also serve Envoy's rate limit service (gRPC: envoy.service.ratelimit.v3."
                  "RateLimitService/ShouldRateLimit, and grpc.health.v1.Health) on this "
                  "host:port (port 0 picks a free one, printed on stdout) or Unix socket "
                  "(unix:/path), for Envoy, Istio "
                  "and other gateways that call envoyproxy/ratelimit. Its limits come from "
                  "--rls-config. With --listen none, only gRPC is served",
   text(""), Step::store,
   [](const Value& v, S& s) -> std::string {
     s.grpc_listen = text_of(v);
     if (s.grpc_listen.starts_with("unix:")) {
       s.grpc_unix_path = s.grpc_listen.substr(5);
       return s.grpc_unix_path.empty() ? "--grpc-listen unix: needs a path" : "";
     }
     Config where;
     if (!s.grpc_listen.empty() && !parse_listen(s.grpc_listen, where))
       return "--grpc-listen must be host:port or unix:PATH";
     s.grpc_host = where.host;
     s.grpc_port = where.port;
     return {};
   }},
  {"grpc-tls-cert-file", "Serve --grpc-listen over TLS (ALPN h2) with this certificate "
                         "chain (PEM). Its files are read again when they change",
   text(""), Step::store,
   [](const Value& v, S& s) { s.grpc_tls.cert_file = text_of(v); return std::string(); }},
  {"grpc-tls-key-file", "Its private key (PEM); without it, the key is in "
                        "--grpc-tls-cert-file",
   text(""), Step::store,
   [](const Value& v, S& s) { s.grpc_tls.key_file = text_of(v); return std::string(); }},
  {"grpc-tls-client-ca-file", "Mutual TLS: clients of --grpc-listen must present a "
                              "certificate signed by one of these CAs (PEM)",
   text(""), Step::store,
   [](const Value& v, S& s) { s.grpc_tls.client_ca_file = text_of(v); return std::string(); }},
  {"grpc-tls-min-version", "The oldest TLS version --grpc-listen accepts, 1.2 or 1.3",
   text("1.2"), Step::grpc_tls,
   [](const Value& v, S& s) -> std::string {
     s.grpc_tls.min_version = text_of(v);
     return s.grpc_tls.min_version == "1.2" || s.grpc_tls.min_version == "1.3"
                ? ""
                : "--grpc-tls-min-version must be 1.2 or 1.3";
   }},
  {"rls-config", "A folder of envoyproxy/ratelimit configuration files (every *.yaml, one "
                 "domain each), read unchanged; reloaded when it changes and on SIGHUP",
   text(""), Step::store,
   [](const Value& v, S& s) { s.rls.folder = text_of(v); return std::string(); }},
  {"allow-empty-rls-config", "Accept an --rls-config folder that defines no rate limit "
                             "(refused by default, at start and on reload: an emptied folder, "
                             "or files cut short, would answer OK to every call)",
   flag(), Step::store,
   [](const Value& v, S& s) { s.rls.allow_empty_config = given(v); return std::string(); }},
  {"rls-max-descriptors", "Most descriptors in one ShouldRateLimit call (more is "
                          "INVALID_ARGUMENT); 1 to 4096",
   number<std::size_t>("64"), Step::store,
   [](const Value& v, S& s) -> std::string {
     s.rls.max_descriptors = v.as<std::size_t>();
     return s.rls.max_descriptors == 0 || s.rls.max_descriptors > 4096
                ? "--rls-max-descriptors must be 1 to 4096"
                : "";
   }},
  {"rls-descriptors", "Several descriptors in one call: all (nothing is counted when any "
                      "is over its limit) or each (every descriptor counted on its own, as "
                      "envoyproxy/ratelimit does)",
   text("all"), Step::rls_descriptors,
   [](const Value& v, S& s) -> std::string {
     if (text_of(v) == "each") {
       s.rls.each_descriptor = true;
     } else if (text_of(v) != "all") {
       return "--rls-descriptors must be all or each";
     }
     return {};
   }},
  {"rls-shadow-mode", "As envoyproxy/ratelimit's SHADOW_MODE: statuses say OVER_LIMIT, but "
                      "the overall code is always OK", flag(), Step::store,
   [](const Value& v, S& s) { s.rls.shadow = given(v); return std::string(); }},
  {"rls-headers", "Response headers in the answer: none, draft (RateLimit-Limit, "
                  "-Remaining, -Reset: envoyproxy/ratelimit's "
                  "LIMIT_RESPONSE_HEADERS_ENABLED) or ietf (RateLimit-Policy and "
                  "RateLimit); both add Retry-After when over the limit",
   text("none"), Step::rls_headers,
   [](const Value& v, S& s) -> std::string {
     if (text_of(v) == "draft") {
       s.rls.headers = rls::HeaderStyle::draft;
     } else if (text_of(v) == "ietf") {
       s.rls.headers = rls::HeaderStyle::ietf;
     } else if (text_of(v) != "none") {
       return "--rls-headers must be none, draft or ietf";
     }
     return {};
   }},
  {"rls-algorithm", "The algorithm of rate limits that name none (a rate_limit's "
                    "algorithm: field): sliding_window, strict_window, fixed_window "
                    "(envoyproxy/ratelimit's epoch-aligned windows), token_bucket or "
                    "sliding_log",
   text("sliding_window"), Step::rls_algorithm,
   [](const Value& v, S& s) -> std::string {
     if (!parse_algorithm(text_of(v), s.rls.config.algorithm))
       return "--rls-algorithm must be sliding_window, strict_window, fixed_window, "
              "token_bucket or sliding_log";
     return {};
   }},
  {"rls-failure-policy", "The failure policy of rate limits that name none: local, open, "
                         "closed or partitioned",
   text("local"), Step::rls_failure_policy,
   [](const Value& v, S& s) {
     return named<FailurePolicy>(internal::kFailurePolicyNames, v, "--rls-failure-policy",
                                 s.rls.config.failure_policy);
   }},
  {"threads", "Event loops (each on its own SO_REUSEPORT socket)",
   number<unsigned>(std::to_string(std::max(1U, std::thread::hardware_concurrency()))),
   Step::http_bounds,
   [](const Value& v, S& s) -> std::string {
     s.http.threads = v.as<unsigned>();
     return s.http.threads == 0 || s.http.threads > 256 ? kHttpBounds : "";
   }},
  {"admin-token", "Enables the admin API (/admin/...), which then requires "
                  "'Authorization: Bearer <token>'. Also read from RATEWIN_ADMIN_TOKEN, "
                  "which keeps it out of the process list",
   text(""), Step::store,
   [](const Value& v, S& s) {
     s.service.admin_token = text_of(v);
     if (s.service.admin_token.empty()) {
       if (const char* env = std::getenv("RATEWIN_ADMIN_TOKEN")) s.service.admin_token = env;
     }
     return std::string();
   }},
  {"trust-proxy", "CIDR[,CIDR...]: the proxies in front of this server. From a peer in "
                  "one of these ranges, X-Forwarded-For (its right-most entry that is not "
                  "itself a trusted proxy) and X-Real-IP name the client, and forward-auth "
                  "checks are answered; from any other peer they are ignored",
   text(""), Step::trust_proxy,
   [](const Value& v, S& s) -> std::string {
     if (!given(v)) return {};
     Result<AddressRanges> ranges = AddressRanges::parse(text_of(v));
     if (!ranges) return "--trust-proxy: " + ranges.message();
     s.service.trusted_proxies = std::move(*ranges);
     return {};
   }},
  {"check-path", "Forward-auth checks (nginx auth_request, Traefik ForwardAuth, Envoy "
                 "ext_authz) go to this path, the original request in X-Original-URI / "
                 "X-Original-Method or X-Forwarded-Uri / X-Forwarded-Method, or under it, "
                 "the original path after it (Envoy's path_prefix). Answered for "
                 "--trust-proxy peers only",
   text("/ratewin/check"), Step::check_path,
   [](const Value& v, S& s) -> std::string {
     s.service.check_path = text_of(v);
     if (const Status problem = check_path_problem(s.service.check_path); !problem.ok())
       return "--check-path " + s.service.check_path + ": " + problem.message();
     return {};
   }},
  {"mode", "gateway: requests are limited, then answered by a demo backend; "
           "forward-auth: only checks are answered (other paths get 404)",
   text("gateway"), Step::mode,
   [](const Value& v, S& s) -> std::string {
     if (text_of(v) != "gateway" && text_of(v) != "forward-auth")
       return "--mode must be gateway or forward-auth";
     s.service.forward_auth_only = text_of(v) == "forward-auth";
     return {};
   }},
  {"log-level", "debug, info, warning or error",
   text("info"), Step::log_level,
   [](const Value& v, S& s) {
     return named<LogLevel>(internal::kLogLevelNames, v, "--log-level", s.log_level);
   }},
  {"log-format", "text (a line per message) or json (an object per line)",
   text("text"), Step::log_format,
   [](const Value& v, S& s) -> std::string {
     if (text_of(v) != "text" && text_of(v) != "json") return "--log-format must be text or json";
     s.log_format = text_of(v) == "json" ? LogFormat::json : LogFormat::text;
     return {};
   }},
  {"refusal-log-keys", "Client keys (per rule) the refusal log and GET /admin/top follow at "
                       "once; the refusals of others are counted as \"other\". 0: none",
   number<std::size_t>("1000"), Step::store,
   [](const Value& v, S& s) {
     s.service.refusals.max_keys = v.as<std::size_t>();
     return std::string();
   }},
  {"refusal-log-interval", "Seconds between the refusal log's summaries (how often each "
                           "key still refused is logged with its count)",
   number<std::uint64_t>("60"), Step::refusal_log,
   [](const Value& v, S& s) -> std::string {
     const std::uint64_t seconds = v.as<std::uint64_t>();
     if (seconds < 1 || seconds > 86400) return kRefusalLog;
     s.service.refusals.interval = std::chrono::seconds(seconds);
     return {};
   }},
  {"log-client-keys", "How the refusal log names API keys: hashed (a fingerprint, "
                      "key#<12 hex digits>; GET /admin/top shows both) or full",
   text("hashed"), Step::refusal_log,
   [](const Value& v, S& s) -> std::string {
     if (text_of(v) != "hashed" && text_of(v) != "full") return kRefusalLog;
     s.service.refusals.log_full_keys = text_of(v) == "full";
     return {};
   }},
  {"max-connections", "Client connections open at once. At the bound, the connection idle "
                      "the longest (between requests) is closed to make room; with none "
                      "idle, the one that has waited longest for a request to come whole "
                      "(a silent or slow client); with neither, a new one is closed at once",
   number<std::size_t>("10000"), Step::http_bounds,
   [](const Value& v, S& s) -> std::string {
     s.http.max_connections = v.as<std::size_t>();
     return s.http.max_connections == 0 ? kHttpBounds : "";
   }},
  {"max-connections-per-address", "Client connections open at once from one address (an "
                                  "IPv6 one by its /64); 0: no bound of its own",
   number<std::size_t>("1000"), Step::store,
   [](const Value& v, S& s) {
     s.http.max_connections_per_address = v.as<std::size_t>();
     return std::string();
   }},
  {"request-timeout-ms", "Time a client has to send a whole request (408 after it), counted "
                         "from its first byte, or for a new connection from its accept",
   number<std::uint64_t>("10000"), Step::http_bounds,
   [](const Value& v, S& s) -> std::string {
     s.http.request_timeout_ms = v.as<std::uint64_t>();
     return s.http.request_timeout_ms == 0 ? kHttpBounds : "";
   }},
  {"idle-timeout-ms", "Keep-alive connections idle this long between requests are closed",
   number<std::uint64_t>("30000"), Step::http_bounds,
   [](const Value& v, S& s) -> std::string {
     s.http.idle_timeout_ms = v.as<std::uint64_t>();
     return s.http.idle_timeout_ms == 0 ? kHttpBounds : "";
   }},
  {"drain-timeout-ms", "On SIGTERM, connections still busy after this are closed",
   number<std::uint64_t>("10000"), Step::store,
   [](const Value& v, S& s) {
     s.http.drain_timeout_ms = v.as<std::uint64_t>();
     return std::string();
   }},
  {"max-limiters", "Limiters the engine holds at most",
   number<std::size_t>(std::to_string(kEngine.max_limiters)), Step::store,
   [](const Value& v, S& s) { s.engine.max_limiters = v.as<std::size_t>(); return std::string(); }},
  {"max-memory", "Memory the engine's limiters take at most, in bytes, or with a suffix "
                 "K, M or G (powers of 1024; at least 16K). A limiter takes 48 bytes plus 4 "
                 "per subinterval. While the bounds are full of limiters that still count, "
                 "a new client key evicts the lightest of the oldest, whose counts are kept "
                 "as a ghost its key starts from again. A rules file with a limit of which "
                 "not even one limiter fits is refused",
   text(bytes_text(kEngine.max_memory)), Step::max_memory,
   [](const Value& v, S& s) -> std::string {
     if (!parse_bytes(text_of(v), s.engine.max_memory) ||
         !internal::option_range("max_memory").accepts(static_cast<double>(s.engine.max_memory)))
       return "--max-memory must be bytes (at least 16K), with an optional suffix K, M or G";
     return {};
   }},
  {"ipv6-prefix", "IPv6 clients without a key are counted by this many leading bits of "
                  "their address (32 to 128; 128: each address apart), as one host usually "
                  "has a whole /64",
   number<unsigned>("64"), Step::ipv6_prefix,
   [](const Value& v, S& s) -> std::string {
     s.service.ipv6_prefix = v.as<unsigned>();
     if (s.service.ipv6_prefix < 32 || s.service.ipv6_prefix > 128)
       return "--ipv6-prefix must be 32 to 128";
     return {};
   }},
  {"allow-empty-rules", "Accept a rules file that defines no limit, allow or deny entry "
                        "(refused by default: an empty file, or one cut short, would allow "
                        "every request)", flag(), Step::store,
   [](const Value& v, S& s) { s.service.allow_empty_rules = given(v); return std::string(); }},
  // (checked against --request-timeout-ms below, which also sets its default)
  {"admin-deadline-ms", "An admin override change is made in Redis within this long of "
                        "its request or not at all (Redis checks it on its own clock), "
                        "and answered by then plus 500 ms: 200 when made, 503 when not. "
                        "Below --request-timeout-ms less 500 (by default, at most half "
                        "of it)",
   number<std::uint64_t>("2000"), Step::store,
   [](const Value& v, S& s) {
     s.service.admin_deadline_ms = v.as<std::uint64_t>();
     return std::string();
   }},
  {"reload-settle-ms", "A rules file (or --rls-config file) written in place is reloaded "
                       "once it has stood unchanged this long; one renamed into place "
                       "after 100 ms",
   number<std::uint64_t>("1000"), Step::store,
   [](const Value& v, S& s) {
     s.service.reload_settle_ms = v.as<std::uint64_t>();
     return std::string();
   }},
  {"reload-wait-ms", "POST /admin/reload waits this long for the reload's outcome (200 "
                     "with the version, 422 with the error), whatever "
                     "--request-timeout-ms; a reload still under way then is answered "
                     "202 and goes on: GET /admin/rules says its outcome once "
                     "\"reloading\" is false",
   number<std::uint64_t>("60000"), Step::reload_wait,
   [](const Value& v, S& s) -> std::string {
     s.service.reload_wait_ms = v.as<std::uint64_t>();
     return s.service.reload_wait_ms == 0 ? "--reload-wait-ms must be above 0" : "";
   }},
  {"max-buffer-memory", "Memory the client connections' buffers take (answers not taken "
                        "yet, input held back, requests arriving), as --max-memory. A "
                        "connection reads no more while 16K of its answers wait; over this "
                        "bound, one that does not take its answers is closed",
   text("64M"), Step::max_buffer_memory,
   [](const Value& v, S& s) -> std::string {
     if (!parse_bytes(text_of(v), s.http.max_buffer_bytes) || s.http.max_buffer_bytes < 64 * 1024)
       return "--max-buffer-memory must be bytes (at least 64K), with an optional suffix K, "
              "M or G";
     return {};
   }},
  {"check", "Check the --rules file as a reload would (with --max-memory and "
            "--allow-empty-rules), print the rules in effect as JSON, and check the "
            "--rls-config folder as the gRPC listener loads it (with "
            "--allow-empty-rls-config), then exit: 0 when valid, 1 with the load's message "
            "when not. Also: ratewin-server check RULES [options], or ratewin-server check "
            "--rls-config DIR [options]", flag(), Step::store,
   [](const Value& v, S& s) { s.check = given(v); return std::string(); }},
  {"version", "Print the version and exit", flag()},  // (parse's own)
  {"h,help", "Print this help", flag()},
};
// clang-format on

// The Redis password (--redis-password-file, else RATEWIN_REDIS_PASSWORD) put into the
// --redis URL. The files are the engine's to read and check.
std::string redis_password(const cxxopts::ParseResult& args, ServerSettings& s) {
  std::string password;
  const std::string& file = args["redis-password-file"].as<std::string>();
  if (!file.empty()) {
    Result<std::string> read = read_password_file(file);
    if (!read) return "--redis-password-file: " + read.message();
    if (s.engine.redis.empty()) return "--redis-password-file needs --redis";
    password = std::move(*read);
  } else if (const char* env = std::getenv("RATEWIN_REDIS_PASSWORD");
             env != nullptr && !s.engine.redis.empty()) {
    password = env;
  }
  if (password.empty()) return {};
  Result<std::string> url = with_redis_password(s.engine.redis, password);
  if (!url) return "--redis: " + url.message();
  s.engine.redis = std::move(*url);
  return {};
}

// An admin change is answered by its deadline plus 500 ms, within the request's time.
std::string admin_deadline(const cxxopts::ParseResult& args, ServerSettings& s) {
  std::uint64_t& deadline = s.service.admin_deadline_ms;
  if (args.count("admin-deadline-ms") == 0) {  // (the default fits a short request timeout)
    deadline = std::max<std::uint64_t>(1, std::min(deadline, s.http.request_timeout_ms / 2));
  } else if (deadline == 0 || deadline + 500 >= s.http.request_timeout_ms) {
    return "--admin-deadline-ms must be above 0 and below --request-timeout-ms less 500 (an "
           "admin change is answered by its deadline plus 500 ms, within the request's time)";
  }
  return {};
}

using Args = const cxxopts::ParseResult&;
const CrossCheck kCrossChecks[] = {
    {Step::listen_none,
     [](Args, ServerSettings& s) -> std::string {
       return !s.serve_http && s.grpc_listen.empty() ? "--listen none needs --grpc-listen" : "";
     }},
    {Step::grpc_built,
     [](Args, ServerSettings& s) -> std::string {
       return !s.grpc_listen.empty() && !rls_calls_available()
                  ? "--grpc-listen: built without gRPC (RATEWIN_BUILD_GRPC=OFF)"
                  : "";
     }},
    {Step::rls_config,
     [](Args, ServerSettings& s) -> std::string {
       return s.grpc_listen.empty() && !s.rls.folder.empty() && !s.check
                  ? "--rls-config needs --grpc-listen"
                  : "";
     }},
    {Step::grpc_tls,
     [](Args, ServerSettings& s) -> std::string {
       const ServerTlsOptions& t = s.grpc_tls;
       if (t.cert_file.empty() && (!t.key_file.empty() || !t.client_ca_file.empty()))
         return "--grpc-tls-key-file and --grpc-tls-client-ca-file need --grpc-tls-cert-file";
       if (!t.cert_file.empty() && s.grpc_listen.empty() && !s.check)
         return "--grpc-tls-cert-file needs --grpc-listen";
       return {};
     }},
    {Step::admin_deadline, admin_deadline},
    {Step::redis_password, redis_password},
    {Step::require_redis,
     [](Args, ServerSettings& s) -> std::string {
       return s.engine.require_store && s.engine.redis.empty() ? "--require-redis needs --redis"
                                                               : "";
     }},
    {Step::check,
     [](Args, ServerSettings& s) -> std::string {
       return s.check && s.service.rules_path.empty() && s.rls.folder.empty()
                  ? "--check needs a rules file (--rules FILE) or a folder (--rls-config DIR)"
                  : "";
     }},
};

Exit bad_flags(const std::string& problem) { return {2, "ratewin-server: " + problem + "\n"}; }

// Every step in order; the first problem, if any.
std::optional<Exit> apply(const cxxopts::ParseResult& args, ServerSettings& s) {
  for (auto step = Step::store; step != Step::end;
       step = static_cast<Step>(static_cast<int>(step) + 1)) {
    for (const Flag& f : kFlags) {
      if (f.step != step || f.apply == nullptr) continue;
      if (std::string problem = f.apply(args[f.name], s); !problem.empty())
        return bad_flags(problem);
    }
    for (const CrossCheck& c : kCrossChecks) {
      if (c.step != step) continue;
      if (std::string problem = c.check(args, s); !problem.empty()) return bad_flags(problem);
    }
    if (step == Step::check && s.check) break;
  }
  return std::nullopt;
}

}  // namespace

std::variant<ServerSettings, Exit> parse(int argc, char** argv) {
  cxxopts::Options cli("ratewin-server",
                       "An HTTP server that rate-limits every request by client key and endpoint "
                       "(a demo backend: allowed requests get 200 and a small JSON body), and "
                       "answers forward-auth checks for a gateway in front of other servers.");
  for (const Flag& f : kFlags) cli.add_options()(f.name, f.help, f.value);
  // "ratewin-server check RULES [options]" is "--check --rules RULES [options]", and
  // "ratewin-server check --flag..." is "--check --flag...".
  std::vector<char*> argument(argv, argv + argc);
  std::string check_flag = "--check", rules_flag = "--rules";
  if (argc >= 2 && std::string_view(argv[1]) == "check") {
    argument[1] = check_flag.data();
    if (argc >= 3 && argv[2][0] != '-') argument.insert(argument.begin() + 2, rules_flag.data());
  }
  cxxopts::ParseResult args;
  try {
    args = cli.parse(static_cast<int>(argument.size()), argument.data());
  } catch (const cxxopts::exceptions::exception& e) {
    return bad_flags(std::string(e.what()) + " (see --help)");
  }
  if (args.count("help") != 0) return Exit{0, cli.help() + "\n"};
  if (args.count("version") != 0) {
    return Exit{
        0, std::string("ratewin-server " RATEWIN_SERVER_VERSION " (gRPC rate limit service: ") +
               (rls_calls_available() ? "built in" : "not built") + ")\n"};
  }
  ServerSettings settings;
  if (std::optional<Exit> problem = apply(args, settings)) return *std::move(problem);
  return settings;
}

}  // namespace ratewin::server
