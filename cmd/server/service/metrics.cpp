// Service::metrics_text: what /metrics shows, by part (requests and connections, rules
// and overrides, the engine and its store).
#include "service/metrics.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "common/text.h"
#include "service/service.h"

namespace ratewin::server {

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

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  current_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::sample(std::string_view labels, double value, std::string_view suffix) {
  out_ += current_;
  out_ += suffix;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
  append_double(out_, value);
  out_ += '\n';
}

void PrometheusText::single(std::string_view name, std::string_view type, std::string_view help,
                            double value) {
  family(name, type, help);
  sample({}, value);
}

namespace {

double u(std::uint64_t v) { return static_cast<double>(v); }

}  // namespace

void write_engine_metrics(PrometheusText& out, const Stats& st) {
  std::string_view family;
  for (const StatField& f : kStatFields) {
    if (f.store_only && !st.store) continue;
    if (f.metric != family) {
      family = f.metric;
      out.family(f.metric, f.kind == StatKind::counter ? "counter" : "gauge",
                 f.metric_help.empty() ? f.help : f.metric_help);
    }
    out.sample(f.labels, f.sample_value(st));
  }
  if (!st.store) return;
  // Store failures by reason: always the reasons an operator acts on, 0 until seen, and
  // any other reason once it has been.
  static constexpr std::string_view kReasons[] = {
      "NOPERM", "NOAUTH", "WRONGPASS", "READONLY", "OOM", "MISCONF", "CLUSTERDOWN", "SCRIPT",
      "timeout", "connect"};
  out.family("ratewin_store_errors_total", "counter",
             "Store failures by reason: the Redis error code (NOPERM: an ACL forbids the key "
             "prefix; NOAUTH, WRONGPASS: credentials; READONLY: a replica; OOM; MISCONF; "
             "CLUSTERDOWN; SCRIPT: an error inside a script; ERR: another), else timeout, "
             "connect, closed or other (the transport).");
  std::string labels;
  const auto reason_sample = [&](std::string_view reason, std::uint64_t n) {
    labels = "reason=\"";
    labels += reason;
    labels += '"';
    out.sample(labels, u(n));
  };
  const auto count_of = [&](std::string_view reason) -> std::uint64_t {
    for (const auto& [r, n] : st.store_errors)
      if (r == reason) return n;
    return 0;
  };
  for (const std::string_view reason : kReasons) reason_sample(reason, count_of(reason));
  for (const auto& [reason, n] : st.store_errors)
    if (std::find(std::begin(kReasons), std::end(kReasons), reason) == std::end(kReasons))
      reason_sample(reason, n);
}

Service::RequestCounts Service::request_counts() const {
  RequestCounts c;
  std::lock_guard lock(workers_mutex_);
  std::vector<const WorkerStats*> all(workers_.begin(), workers_.end());
  all.push_back(&retired_);
  for (const WorkerStats* w : all) {
    {
      std::lock_guard wl(w->mutex);
      for (const auto& [status, by_rule] : w->requests)
        for (const auto& [rule, n] : by_rule) c.requests[{status, rule}] += n;
      for (const auto& [rule, n] : w->shadow_refusals) c.shadow_refusals[rule] += n;
    }
    for (std::size_t i = 0; i < c.latency.size(); ++i)
      c.latency[i] += w->latency[i].load(std::memory_order_relaxed);
    c.latency_sum_ns += w->latency_sum_ns.load(std::memory_order_relaxed);
  }
  return c;
}

void Service::write_request_metrics(PrometheusText& out) const {
  const RequestCounts counts = request_counts();
  const auto& requests = counts.requests;
  const auto& shadow_refusals = counts.shadow_refusals;
  const auto& latency = counts.latency;
  const std::uint64_t latency_sum_ns = counts.latency_sum_ns;
  out.family("ratewin_server_requests_total", "counter",
             "Requests answered, by status and by the rule that decided (the refusing limit for "
             "429; the limit closest to refusing for 200; allow, deny, none or admin otherwise).");
  for (const auto& [k, v] : requests) {
    std::string labels = "status=\"" + std::to_string(k.first) + "\",";
    append_label(labels, "rule", k.second);
    out.sample(labels, u(v));
  }
  out.family("ratewin_server_shadow_refusals_total", "counter",
             "Requests a limit in shadow (mode: shadow) would have refused, by its rule: they "
             "were allowed.");
  for (const auto& [rule, n] : shadow_refusals) {
    std::string labels;
    append_label(labels, "rule", rule);
    out.sample(labels, u(n));
  }
  out.family("ratewin_server_decision_seconds", "histogram",
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
    out.sample(le, u(cumulative), "_bucket");
  }
  out.sample({}, static_cast<double>(latency_sum_ns) / 1e9, "_sum");
  out.sample({}, u(cumulative), "_count");

  out.single("ratewin_server_open_connections", "gauge", "Client connections open now.",
             static_cast<double>(connections_.open.load(std::memory_order_relaxed)));
  out.single("ratewin_server_connection_buffer_bytes", "gauge",
             "Bytes the client connections hold in buffers now (bounded by "
             "--max-buffer-memory).",
             static_cast<double>(connections_.buffered.load(std::memory_order_relaxed)));
  out.family("ratewin_server_connections_total", "counter",
             "Client connections by outcome: accepted, refused (over --max-connections, none "
             "idle to close), idle_closed (the longest idle, closed to make room), "
             "address_refused (over --max-connections-per-address), accept_failed (the "
             "process's file limit, most likely), timed_out (slow or idle), shed (not taking "
             "answers while the buffers were over --max-buffer-memory).");
  out.sample("outcome=\"accepted\"", u(connections_.accepted));
  out.sample("outcome=\"refused\"", u(connections_.refused));
  out.sample("outcome=\"idle_closed\"", u(connections_.idle_closed));
  out.sample("outcome=\"address_refused\"", u(connections_.address_refused));
  out.sample("outcome=\"accept_failed\"", u(connections_.accept_failures));
  out.sample("outcome=\"timed_out\"", u(connections_.timed_out));
  out.sample("outcome=\"shed\"", u(connections_.shed));
}

void Service::write_rules_metrics(PrometheusText& out) const {
  const std::shared_ptr<const Rules> rules = rules_.get();
  out.family("ratewin_server_rules_info", "gauge", "The active rules version (label), always 1.");
  std::string labels;
  append_label(labels, "version", rules->version());
  out.sample(labels, 1);
  out.single("ratewin_server_rules_limits", "gauge", "Limits defined by the active rules.",
             u(rules->limit_count()));
  write_reload_metrics(
      out,
      ReloadMetricNames{
          .loads = "ratewin_server_rules_reloads_total",
          .outcome_label = "result",
          .loads_help =
              "Rules loads by result (a rejected file leaves the last good rules active).",
          .failing = "ratewin_server_rules_last_error",
          .failing_help = "1 when the last load of the rules file was rejected.",
          .loaded_at = "ratewin_server_rules_loaded_timestamp_seconds",
          .loaded_at_help = "When the rules file was last loaded successfully.",
      },
      rules_.figures());
  const std::shared_ptr<const OverrideMap> all = overrides_.current().get();
  const std::int64_t now = unix_ms();
  out.single(
      "ratewin_server_overrides", "gauge", "Temporary overrides in force.",
      u(static_cast<std::uint64_t>(std::count_if(
          all->begin(), all->end(), [now](const auto& e) { return e.second.active(now); }))));
  out.single("ratewin_server_overrides_in_sync", "gauge",
             "1 while the overrides follow Redis (always 1 without Redis).",
             overrides_.in_sync() ? 1 : 0);
  if (admin_) {
    out.single("ratewin_server_admin_lockout_addresses", "gauge",
               "Addresses the admin lockout holds (with a wrong token in the last minute).",
               u(admin_->lockout().size()));
  }
}

std::string Service::metrics_text() const {
  PrometheusText out;
  write_request_metrics(out);
  write_rules_metrics(out);
  write_engine_metrics(out, engine_.stats());
  for (const auto& part : metric_parts_) part(out);
  return out.take();
}

}  // namespace ratewin::server
