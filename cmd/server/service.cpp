#include "service.h"

#include <uv.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "text.h"

namespace ratewin::server {

namespace {

using std::chrono::steady_clock;

constexpr std::string_view kPrometheus = "text/plain; version=0.0.4; charset=utf-8";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_ip_address(std::string_view text) {
  char copy[64];
  if (text.empty() || text.size() >= sizeof copy) return false;
  text.copy(copy, text.size());
  copy[text.size()] = '\0';
  unsigned char binary[16];
  return uv_inet_pton(AF_INET, copy, binary) == 0 || uv_inet_pton(AF_INET6, copy, binary) == 0;
}

// The token of "Authorization: Bearer <token>", empty if there is none.
std::string_view bearer(const Request& request) {
  const std::string_view auth = trim(request.header("authorization"));
  if (auth.size() < 7 || !iequals(auth.substr(0, 6), "bearer") || auth[6] != ' ') return {};
  return trim(auth.substr(7));
}

// A structured-field string (RFC 8941): printable ASCII, with " and \ escaped.
void append_sf_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  out += '"';
}

std::uint64_t window_seconds(const Limit& limit) {
  const auto ms = static_cast<std::uint64_t>(limit.interval().count());
  return std::max<std::uint64_t>(1, (ms + 999) / 1000);
}

// A Prometheus label, name="value", the value's \, " and newline escaped.
void append_label(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
}

}  // namespace

bool same_secret(std::string_view presented, std::string_view expected) noexcept {
  // Every byte of the expected secret is looked at whatever the presented one holds,
  // so the time taken says nothing about how much of it matched.
  unsigned diff = presented.size() == expected.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char p = i < presented.size() ? presented[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(p ^ expected[i]));
  }
  return diff == 0 && !expected.empty();
}

// ---------------------------------------------------------------------------------------

class Service::Worker final : public RequestHandler {
 public:
  explicit Worker(Service& service)
      : service_(service), rules_(service.rules_), overrides_(service.overrides_.current()) {
    service_.add_worker(&stats_);
  }
  ~Worker() override { service_.remove_worker(&stats_); }

  void handle(const Request& request, std::string_view peer, Reply& reply) override {
    Response& response = reply.response();
    const std::string& path = request.path;
    if (path == "/healthz") return health(response);
    if (path == "/metrics") {
      response.content_type = kPrometheus;
      response.body = service_.metrics_text();
      return;
    }
    if (path == "/admin" || path.starts_with("/admin/")) {
      admin(request, peer, path, response);
      return count(response.status, "admin");
    }
    limit(request, peer, path, response);
  }

 private:
  void count(int status, std::string_view rule) {
    std::lock_guard lock(stats_.mutex);
    auto& by_rule = stats_.requests[status];
    auto it = by_rule.find(rule);
    if (it == by_rule.end()) it = by_rule.emplace(std::string(rule), 0).first;
    ++it->second;
  }

  void health(Response& response) {
    const Stats s = service_.engine_.stats();
    response.body = "{\"status\":\"ok\",\"store\":\"";
    response.body += !s.store ? "none" : s.store_available ? "up" : "down";
    response.body += "\",\"rules\":";
    append_json_string(response.body, rules_.get().version());
    response.body += "}\n";
  }

  // The client's key: X-API-Key, else the bearer token, else its address (the one the
  // trusted proxy saw connect, with --trust-proxy). `kind` keeps the namespaces apart.
  std::string_view client_key(const Request& request, std::string_view peer, char& kind) {
    std::string_view key = trim(request.header("x-api-key"));
    if (key.empty()) key = bearer(request);
    if (!key.empty()) {
      kind = 'k';
      return key;
    }
    kind = 'a';
    std::string_view address = peer;
    if (service_.options_.trust_proxy) {
      // The last entry is the one our proxy appended: the address it saw connect. Those
      // before it were written by the client and prove nothing.
      // A proxy may add its own line rather than extend the client's: the last line.
      const std::string_view forwarded = request.last_header("x-forwarded-for");
      const std::size_t comma = forwarded.rfind(',');
      const std::string_view last =
          trim(comma == std::string_view::npos ? forwarded : forwarded.substr(comma + 1));
      if (is_ip_address(last)) address = last;  // anything else: the connection's
    }
    address_key_ = "ip:";
    address_key_ += address;
    return address_key_;
  }

  void limit(const Request& request, std::string_view peer, const std::string& path,
             Response& response) {
    const Rules& rules = rules_.get();
    char kind = 'a';
    const std::string_view key = client_key(request, peer, kind);
    if (kind == 'k' && key.starts_with("ip:")) {
      // Rules name addresses "ip:...": a key posing as one would get its allow entries.
      count(400, "bad-key");
      return json_error(response, 400, "an API key must not start with \"ip:\"");
    }
    rules.match(key, request.method, path, match_);
    if (match_.action == Action::deny) {
      count(403, "deny");
      return json_error(response, 403, "forbidden");
    }
    if (match_.action == Action::allow || match_.limits.empty()) {
      count(200, match_.action == Action::allow ? "allow" : "none");
      response.headers.emplace_back("X-RateLimit-Policy",
                                    match_.action == Action::allow ? "allow-list" : "none");
      return ok(response, path);
    }

    const OverrideMap& overrides = overrides_.get();
    const Override* override_ = nullptr;
    if (!overrides.empty()) {
      const auto it = overrides.find(std::string(key));
      if (it != overrides.end() && it->second.active(unix_ms())) override_ = &it->second;
    }
    // Requests that match no endpoint share one endpoint counter per key (the raw path
    // would let a client mint limiters at will).
    const std::string_view endpoint = match_.endpoint;
    // API keys and addresses are counted apart (an API key "ip:..." is not that address).
    tagged_key_.assign(1, kind);
    tagged_key_ += key;
    items_.clear();
    for (const LimitRule* rule : match_.limits) {
      resource_name(*rule, tagged_key_, endpoint, scratch_);
      Limit limit = effective_limit(*rule, match_.multiplier);
      // A temporary override (admin API) acts where the rules' own multiplier would.
      if (override_ != nullptr && rule->scales)
        limit = limit.with_max(override_->apply(limit.max()));
      items_.push_back({ratewin::hash(scratch_), limit, rule->cost});
    }
    decisions_.resize(items_.size());
    const auto started = steady_clock::now();
    const std::size_t refused = service_.engine_.try_acquire_all(items_, decisions_);
    record_latency(steady_clock::now() - started);

    const bool allowed = refused == items_.size();
    // The limit the headers describe: the one that refused, or the one closest to
    // refusing.
    std::size_t shown = refused;
    if (allowed) {
      shown = 0;
      for (std::size_t i = 1; i < items_.size(); ++i)
        if (decisions_[i].remaining < decisions_[shown].remaining) shown = i;
    }
    const Decision& d = decisions_[shown];
    const LimitRule& rule = *match_.limits[shown];
    for (HeaderField& f : headers(d)) response.headers.emplace_back(f.name, std::move(f.value));
    std::string policy;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (i != 0) policy += ", ";
      append_sf_string(policy, match_.limits[i]->name);
      policy += ";q=";
      append_number(policy, items_[i].limit.max());
      policy += ";w=";
      append_number(policy, window_seconds(items_[i].limit));
    }
    response.headers.emplace_back("RateLimit-Policy", std::move(policy));
    std::string state;
    append_sf_string(state, rule.name);
    state += ";r=";
    append_number(state, d.remaining);
    state += ";t=";
    append_number(state, ceil_seconds(d.reset_after));
    response.headers.emplace_back("RateLimit", std::move(state));
    const bool degraded = std::any_of(decisions_.begin(), decisions_.end(),
                                      [](const Decision& x) { return x.degraded; });
    if (degraded) response.headers.emplace_back("X-RateLimit-Policy", "degraded");

    count(allowed ? 200 : 429, rule.name);
    if (allowed) return ok(response, path);
    response.status = 429;
    std::string& b = response.body;
    b = "{\"error\":\"rate limited\",\"limit\":";
    append_json_string(b, rule.name);
    b += ",\"max\":";
    append_number(b, items_[shown].limit.max());
    b += ",\"window_s\":";
    append_double(b, static_cast<double>(rule.limit.interval().count()) / 1000.0);
    b += ",\"retry_after_s\":";
    if (d.can_ever_pass()) {
      append_double(b, std::ceil(static_cast<double>(d.retry_after.count()) / 1e6) / 1e3);
    } else {
      b += "null";  // the request costs more than the limit allows
    }
    b += ",\"reset_after_s\":";
    append_double(b, std::ceil(static_cast<double>(d.reset_after.count()) / 1e6) / 1e3);
    if (degraded) b += ",\"degraded\":true";
    b += "}\n";
  }

  void ok(Response& response, std::string_view path) {
    std::string& b = response.body;
    b = "{\"ok\":true,\"endpoint\":";
    append_json_string(b, match_.endpoint.empty() ? path : match_.endpoint);
    b += ",\"tier\":";
    append_json_string(b, match_.tier);
    b += "}\n";
  }

  void record_latency(steady_clock::duration elapsed) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
    const double seconds = static_cast<double>(ns) / 1e9;
    std::size_t bucket = 0;
    while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
    stats_.latency[bucket].fetch_add(1, std::memory_order_relaxed);
    stats_.latency_sum_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  }

  void admin(const Request& request, std::string_view peer, const std::string& path,
             Response& response) {
    if (service_.options_.admin_token.empty()) {
      return json_error(response, 404, "no admin API (start the server with --admin-token)");
    }
    // Guessing the token: a few wrong ones per address and minute, then 429 (even for
    // the right one, until the window lets the address try again).
    static const Limit kWrongTokens(10, std::chrono::minutes(1));
    scratch_ = "admin-auth";
    scratch_ += '\0';
    scratch_ += peer;
    const std::uint64_t guesser = ratewin::hash(scratch_);
    const Decision so_far = service_.engine_.try_acquire(guesser, kWrongTokens, 0);
    if (so_far.remaining == 0) {
      for (HeaderField& f : headers(service_.engine_.try_acquire(guesser, kWrongTokens, 1)))
        if (f.name == "Retry-After") response.headers.emplace_back(f.name, std::move(f.value));
      return json_error(response, 429, "too many wrong admin tokens from this address");
    }
    if (!same_secret(bearer(request), service_.options_.admin_token)) {
      service_.engine_.try_acquire(guesser, kWrongTokens, 1);
      response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"ratewin-admin\"");
      return json_error(response, 401, "admin token missing or wrong");
    }
    const std::string_view method = request.method;
    if (path == "/admin/rules" && method == "GET") {
      std::string& b = response.body;
      const std::shared_ptr<const Rules> rules = service_.rules();
      b = "{\"version\":";
      append_json_string(b, rules->version());
      b += ",\"path\":";
      append_json_string(b, service_.options_.rules_path);
      std::lock_guard lock(service_.reload_mutex_);
      b += ",\"last_error\":";
      append_json_string(b, service_.last_reload_error_);
      b += ",\"rules\":";
      b += rules->describe_json();
      b += "}\n";
      return;
    }
    if (path == "/admin/reload" && method == "POST") {
      const bool loaded = service_.reload("admin API");
      if (!loaded) {
        std::lock_guard lock(service_.reload_mutex_);
        return json_error(response, 422, service_.last_reload_error_);
      }
      response.body = "{\"version\":";
      append_json_string(response.body, service_.rules()->version());
      response.body += "}\n";
      return;
    }
    if (path == "/admin/overrides" && method == "GET") {
      const std::shared_ptr<const OverrideMap> all = service_.overrides_.current().get();
      std::vector<std::pair<std::string_view, const Override*>> sorted;
      const std::int64_t now = unix_ms();
      for (const auto& [k, o] : *all)
        if (o.active(now)) sorted.emplace_back(k, &o);
      std::sort(sorted.begin(), sorted.end());
      std::string& b = response.body;
      b = "{\"shared\":";
      b += service_.overrides_.shared() ? "true" : "false";
      b += ",\"overrides\":[";
      for (std::size_t i = 0; i < sorted.size(); ++i) {
        if (i != 0) b += ',';
        b += sorted[i].second->to_json(sorted[i].first);
      }
      b += "]}\n";
      return;
    }
    if (path == "/admin/overrides" && (method == "POST" || method == "DELETE")) {
      return change_override(request, response);
    }
    return json_error(response, 404, "no such admin call");
  }

  // POST {"key": k, "limit": n | "multiplier": x, "ttl_s": t}; DELETE {"key": k}.
  void change_override(const Request& request, Response& response) {
    std::string key;
    Override o;
    std::string problem;
    try {
      const YAML::Node body = YAML::Load(request.body);  // JSON is YAML
      if (!body.IsMap()) throw std::invalid_argument("the body must be a JSON object");
      for (const auto& field : body) {
        const auto name = field.first.as<std::string>();
        if (name != "key" && name != "limit" && name != "multiplier" && name != "ttl_s")
          throw std::invalid_argument("unknown field \"" + name + "\"");
      }
      if (!body["key"] || !body["key"].IsScalar())
        throw std::invalid_argument("\"key\" (a string) is required");
      key = body["key"].as<std::string>();
      if (key.empty()) throw std::invalid_argument("\"key\" is empty");
      if (request.method == "POST") {
        const bool has_limit = static_cast<bool>(body["limit"]);
        if (has_limit == static_cast<bool>(body["multiplier"]))
          throw std::invalid_argument("give exactly one of \"limit\" and \"multiplier\"");
        if (has_limit) {
          const auto n = body["limit"].as<std::uint64_t>();
          if (n < 1 || n > Limit::kMaxCount)
            throw std::invalid_argument("\"limit\" must be between 1 and 4294967295");
          o = {Override::Kind::limit, static_cast<double>(n), 0};
        } else {
          const auto m = body["multiplier"].as<double>();
          if (!(m > 0) || !(m <= 1e6))
            throw std::invalid_argument("\"multiplier\" must be above 0 and at most 1e6");
          o = {Override::Kind::multiplier, m, 0};
        }
        const double ttl = body["ttl_s"] ? body["ttl_s"].as<double>() : 3600.0;
        if (!(ttl > 0) || ttl > 30 * 86400.0)
          throw std::invalid_argument("\"ttl_s\" must be above 0 and at most 30 days");
        o.expires_ms = unix_ms() + static_cast<std::int64_t>(std::ceil(ttl * 1000));
      }
    } catch (const YAML::Exception&) {
      problem = "the body must be a JSON object with the right field types";
    } catch (const std::invalid_argument& e) {
      problem = e.what();
    }
    if (!problem.empty()) {
      return json_error(response, 400, problem);
    }
    const std::string error = request.method == "POST" ? service_.overrides_.set(key, o)
                                                       : service_.overrides_.remove(key);
    if (!error.empty()) {
      return json_error(response, 503, error);
    }
    response.body = request.method == "POST" ? "{\"override\":" + o.to_json(key) + "}\n"
                                             : std::string("{\"removed\":true}\n");
  }

  Service& service_;
  Published<Rules>::View rules_;
  Published<OverrideMap>::View overrides_;
  WorkerStats stats_;
  Match match_;
  std::vector<Acquisition> items_;
  std::vector<Decision> decisions_;
  std::string scratch_;
  std::string tagged_key_;
  std::string address_key_;
};

// ---------------------------------------------------------------------------------------

Service::Service(Engine& engine, Overrides& overrides, ServiceOptions options, Log log)
    : engine_(engine),
      overrides_(overrides),
      options_(std::move(options)),
      log_(std::move(log)),
      rules_(std::make_shared<const Rules>(
          options_.rules_path.empty() ? Rules() : Rules::load(options_.rules_path))) {
  last_reload_ms_ = unix_ms();
  reloads_ok_ = 1;
}

Service::~Service() = default;

std::unique_ptr<RequestHandler> Service::worker() { return std::make_unique<Worker>(*this); }

bool Service::reload(std::string_view why) {
  if (options_.rules_path.empty()) return true;
  std::lock_guard lock(reload_mutex_);
  try {
    auto next = std::make_shared<const Rules>(Rules::load(options_.rules_path));
    last_reload_ms_ = unix_ms();
    last_reload_error_.clear();
    reloads_ok_.fetch_add(1, std::memory_order_relaxed);
    if (next->version() == rules_.get()->version()) return true;  // the same bytes
    log_(LogLevel::info, "rules " + next->version() + " active (" + std::string(why) + ")");
    rules_.publish(std::move(next));
    return true;
  } catch (const RulesError& e) {
    last_reload_error_ = e.what();
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    log_(LogLevel::error, "rules rejected (" + std::string(why) + "), keeping " +
                              rules_.get()->version() + ": " + e.what());
    return false;
  }
}

void Service::add_worker(WorkerStats* stats) {
  std::lock_guard lock(workers_mutex_);
  workers_.push_back(stats);
}

void Service::remove_worker(WorkerStats* stats) {
  std::lock_guard lock(workers_mutex_);
  std::erase(workers_, stats);
  // Its counts live on: counters never go down.
  std::scoped_lock both(stats->mutex, retired_.mutex);
  for (const auto& [status, by_rule] : stats->requests)
    for (const auto& [rule, n] : by_rule) retired_.requests[status][rule] += n;
  for (std::size_t i = 0; i < stats->latency.size(); ++i)
    retired_.latency[i].fetch_add(stats->latency[i].load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
  retired_.latency_sum_ns.fetch_add(stats->latency_sum_ns.load(std::memory_order_relaxed),
                                    std::memory_order_relaxed);
}

std::string Service::metrics_text() const {
  std::map<std::pair<int, std::string>, std::uint64_t> requests;  // status, rule
  std::array<std::uint64_t, kLatencyBuckets.size() + 1> latency{};
  std::uint64_t latency_sum_ns = 0;
  {
    std::lock_guard lock(workers_mutex_);
    std::vector<const WorkerStats*> all(workers_.begin(), workers_.end());
    all.push_back(&retired_);
    for (const WorkerStats* w : all) {
      {
        std::lock_guard wl(w->mutex);
        for (const auto& [status, by_rule] : w->requests)
          for (const auto& [rule, n] : by_rule) requests[{status, rule}] += n;
      }
      for (std::size_t i = 0; i < latency.size(); ++i)
        latency[i] += w->latency[i].load(std::memory_order_relaxed);
      latency_sum_ns += w->latency_sum_ns.load(std::memory_order_relaxed);
    }
  }
  std::string out;
  // A family's HELP and TYPE lines; the samples after it carry its name (plus `suffix`,
  // for a histogram's _bucket, _sum and _count).
  std::string_view current;
  const auto family = [&out, &current](std::string_view name, std::string_view type,
                                       std::string_view help) {
    current = name;
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
  };
  const auto sample = [&out, &current](std::string_view labels, double value,
                                       std::string_view suffix = {}) {
    out += current;
    out += suffix;
    if (!labels.empty()) {
      out += '{';
      out += labels;
      out += '}';
    }
    out += ' ';
    append_double(out, value);
    out += '\n';
  };
  // A family of one sample without labels.
  const auto single = [&](std::string_view name, std::string_view type, std::string_view help,
                          double value) {
    family(name, type, help);
    sample({}, value);
  };
  const auto u = [](std::uint64_t v) { return static_cast<double>(v); };
  const auto s = [](std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e9; };

  family("ratewin_server_requests_total", "counter",
         "Requests answered, by status and by the rule that decided (the refusing limit for "
         "429; the limit closest to refusing for 200; allow, deny, none or admin otherwise).");
  for (const auto& [k, v] : requests) {
    std::string labels = "status=\"" + std::to_string(k.first) + "\",";
    append_label(labels, "rule", k.second);
    sample(labels, u(v));
  }
  family("ratewin_server_decision_seconds", "histogram",
         "Time taken by the engine to decide a rate-limited request (all its limits).");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < latency.size(); ++i) {
    cumulative += latency[i];
    std::string le = "le=\"";
    if (i < kLatencyBuckets.size()) {
      append_double(le, kLatencyBuckets[i]);
    } else {
      le += "+Inf";
    }
    le += '"';
    sample(le, u(cumulative), "_bucket");
  }
  sample({}, static_cast<double>(latency_sum_ns) / 1e9, "_sum");
  sample({}, u(cumulative), "_count");

  single("ratewin_server_open_connections", "gauge", "Client connections open now.",
         static_cast<double>(connections_.open.load(std::memory_order_relaxed)));
  family("ratewin_server_connections_total", "counter",
         "Client connections by outcome: accepted, refused (over --max-connections), "
         "timed_out (slow or idle).");
  sample("outcome=\"accepted\"", u(connections_.accepted));
  sample("outcome=\"refused\"", u(connections_.refused));
  sample("outcome=\"timed_out\"", u(connections_.timed_out));

  {
    const std::shared_ptr<const Rules> rules = rules_.get();
    std::lock_guard lock(reload_mutex_);
    family("ratewin_server_rules_info", "gauge", "The active rules version (label), always 1.");
    std::string labels;
    append_label(labels, "version", rules->version());
    sample(labels, 1);
    single("ratewin_server_rules_limits", "gauge", "Limits defined by the active rules.",
           u(rules->limit_count()));
    family("ratewin_server_rules_reloads_total", "counter",
           "Rules loads by result (a rejected file leaves the last good rules active).");
    sample("result=\"ok\"", u(reloads_ok_));
    sample("result=\"rejected\"", u(reloads_failed_));
    single("ratewin_server_rules_last_error", "gauge",
           "1 when the last load of the rules file was rejected.",
           last_reload_error_.empty() ? 0 : 1);
    single("ratewin_server_rules_loaded_timestamp_seconds", "gauge",
           "When the rules file was last loaded successfully.",
           static_cast<double>(last_reload_ms_) / 1e3);
  }
  {
    const std::shared_ptr<const OverrideMap> all = overrides_.current().get();
    const std::int64_t now = unix_ms();
    single("ratewin_server_overrides", "gauge", "Temporary overrides in force.",
           u(static_cast<std::uint64_t>(std::count_if(
               all->begin(), all->end(), [now](const auto& e) { return e.second.active(now); }))));
  }
  single("ratewin_server_overrides_in_sync", "gauge",
         "1 while the overrides follow Redis (always 1 without Redis).",
         overrides_.in_sync() ? 1 : 0);

  const Stats st = engine_.stats();
  single("ratewin_store_configured", "gauge", "1 when the engine shares counts through Redis.",
         st.store ? 1 : 0);
  single("ratewin_store_up", "gauge",
         "1 while the store is reachable (its circuit is closed); 0 while decisions are "
         "degraded. Always 1 without a store.",
         !st.store || st.store_available ? 1 : 0);
  family("ratewin_engine_decisions_total", "counter", "Decisions of the engine, per limit.");
  sample("result=\"allowed\"", u(st.allowed));
  sample("result=\"rejected\"", u(st.rejected));
  single("ratewin_engine_degraded_decisions_total", "counter",
         "Decisions made while the store was unreachable.", u(st.degraded));
  single("ratewin_engine_limiters", "gauge", "Limiters held now.", u(st.limiters));
  single("ratewin_engine_max_limiters", "gauge", "The configured bound on limiters.",
         u(st.max_limiters));
  single("ratewin_engine_evictions_total", "counter", "Limiters dropped to stay within the bound.",
         u(st.evictions));
  if (st.store) {
    single("ratewin_store_circuit_opens_total", "counter", "Times the store was found unreachable.",
           u(st.circuit_opens));
    single("ratewin_store_connections_total", "counter",
           "Times the background connection (re)connected.", u(st.connections));
    family("ratewin_store_writes_total", "counter", "Writes of allowed requests, by result.");
    sample("result=\"ok\"", u(st.writes_ok));
    sample("result=\"failed\"", u(st.writes_failed));
    sample("result=\"skipped\"", u(st.writes_skipped));
    family("ratewin_store_write_latency_seconds", "gauge",
           "Write round-trip latency quantiles since start (within 12.5%).");
    sample("quantile=\"0.5\"", s(st.write_p50));
    sample("quantile=\"0.9\"", s(st.write_p90));
    sample("quantile=\"0.99\"", s(st.write_p99));
    single("ratewin_store_write_latency_max_seconds", "gauge", "The slowest write since start.",
           s(st.write_max));
    single("ratewin_store_warm_starts_total", "counter",
           "Limiters loaded from the store before deciding.", u(st.warm_starts));
    family("ratewin_store_sync_rounds_total", "counter", "Boundary reads by result.");
    sample("result=\"ok\"", u(st.sync_rounds));
    sample("result=\"failed\"", u(st.sync_failures));
    single("ratewin_store_sync_last_seconds", "gauge", "Duration of the last boundary read.",
           s(st.sync_last_duration));
    single("ratewin_store_sync_last_keys", "gauge",
           "Windows read by the last boundary read (limiters other nodes wrote).",
           u(st.sync_last_keys));
    single("ratewin_store_sync_last_change_sets", "gauge",
           "Change sets read by the last boundary read.", u(st.sync_last_change_sets));
    single("ratewin_store_active_limiters", "gauge", "Limiters kept in step by boundary reads.",
           u(st.active_limiters));
    single("ratewin_store_clock_offset_seconds", "gauge", "The store's clock minus this engine's.",
           s(st.clock_offset));
  }
  return out;
}

}  // namespace ratewin::server
