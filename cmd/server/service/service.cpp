#include "service/service.h"

#include <algorithm>
#include <chrono>

#include "common/prometheus.h"
#include "common/text.h"
#include "service/limit_step.h"

namespace ratewin::server {

namespace {

// /metrics' part about the client connections.
void write_connection_metrics(PrometheusText& out, const ConnectionCounters& c) {
  out.single("ratewin_server_open_connections", "gauge", "Client connections open now.",
             static_cast<double>(c.open.load(std::memory_order_relaxed)));
  out.single("ratewin_server_connection_buffer_bytes", "gauge",
             "Bytes the client connections hold in buffers now (bounded by "
             "--max-buffer-memory).",
             static_cast<double>(c.buffered.load(std::memory_order_relaxed)));
  out.family("ratewin_server_connections_total", "counter",
             "Client connections by outcome: accepted, refused (over --max-connections, none "
             "idle or waiting to close), idle_closed (the longest idle, closed to make room), "
             "slow_closed (none idle: the one that waited longest for a request to come "
             "whole, closed to make room), "
             "address_refused (over --max-connections-per-address), accept_failed (the "
             "process's file limit, most likely), timed_out (slow or idle), shed (not taking "
             "answers while the buffers were over --max-buffer-memory).");
  out.sample("outcome=\"accepted\"", as_sample(c.accepted));
  out.sample("outcome=\"refused\"", as_sample(c.refused));
  out.sample("outcome=\"idle_closed\"", as_sample(c.idle_closed));
  out.sample("outcome=\"slow_closed\"", as_sample(c.slow_closed));
  out.sample("outcome=\"address_refused\"", as_sample(c.address_refused));
  out.sample("outcome=\"accept_failed\"", as_sample(c.accept_failures));
  out.sample("outcome=\"timed_out\"", as_sample(c.timed_out));
  out.sample("outcome=\"shed\"", as_sample(c.shed));
}

}  // namespace

Status store_down_reason(const Stats& s) {
  if (!s.store || s.store_available) return {};
  return Status(Status::Code::unavailable,
                s.last_error.empty() ? std::string("not connected yet") : s.last_error);
}

Rules checked_rules(std::string_view text, const std::string& path, const Engine& engine,
                    bool allow_empty, const std::function<void(LogLevel, std::string_view)>& log) {
  Rules rules = Rules::parse(text, path);
  if (rules.says_nothing() && !allow_empty) {
    throw RulesError(path, 0, 0,
                     "no limit, allow or deny entry (an empty file, or one cut short?): every "
                     "request would be allowed; --allow-empty-rules accepts such a file");
  }
  // A limit of which not even one limiter fits in the engine's memory bound could never
  // count anything: refused, rather than answered by the overflow limiter for ever.
  const std::size_t budget = engine.options().max_memory;
  for (const LimitRule* rule : rules.limits()) {
    const std::size_t fit = engine.capacity(rule->limit);
    const std::uint64_t bytes = engine.limiter_bytes(rule->limit);
    if (fit == 0) {
      throw RulesError(path, 0, 0,
                       "limit \"" + rule->name + "\" (" + rule->limit.to_string() +
                           ") takes about " + std::to_string(bytes) +
                           " bytes per client key, and not one fits in the memory bound (" +
                           std::to_string(budget) +
                           " bytes, --max-memory): raise it, or give the limit " +
                           (rule->limit.algorithm() == ratewin::Algorithm::sliding_log
                                ? "a lower max (a sliding_log keeps an entry per unit)"
                                : "fewer subintervals"));
    }
    if (fit < 10'000) {
      log(LogLevel::warning, "limit \"" + rule->name + "\" (" + rule->limit.to_string() +
                                  "): the memory bound holds " + std::to_string(fit) +
                                  " client keys of it (about " + std::to_string(bytes) +
                                  " bytes each); more share its overflow limiter");
    }
  }
  return rules;
}

Reloader<Rules>::Hooks Service::rules_hooks() {
  Reloader<Rules>::Hooks hooks;
  if (options_.rules_path.empty()) return hooks;  // no rules: nothing to read
  hooks.read = [this] {
    std::string bytes = Rules::read(options_.rules_path);
    const std::uint64_t fingerprint = hash(bytes);
    return Reloader<Rules>::Input{fingerprint, [this, bytes = std::move(bytes)] {
                                    return checked_rules(bytes, options_.rules_path, engine_,
                                                         options_.allow_empty_rules, log_);
                                  }};
  };
  hooks.refused = [this](std::string_view why, const std::string& error, const Rules& kept, bool) {
    log_(LogLevel::error,
         "rules rejected (" + std::string(why) + "), keeping " + kept.version() + ": " + error);
  };
  hooks.changed = [this](std::string_view why, const Rules& next) {
    log_(LogLevel::info, "rules " + next.version() + " active (" + std::string(why) + ")");
  };
  return hooks;
}

Service::Service(Engine& engine, Overrides& overrides, ServiceOptions options, Log log,
                 EventLog events)
    : engine_(engine),
      overrides_(overrides),
      options_(std::move(options)),
      log_(std::move(log)),
      rules_(rules_hooks()),
      refusals_(options_.refusals, std::move(events)) {}

Service::~Service() = default;

LimitedRequests::Parts Service::limiting_parts() {
  return {.engine = engine_,
          .rules = rules_.published(),
          .overrides = overrides_.current(),
          .refusals = refusals_,
          .log = log_,
          .check_path = options_.check_path,
          .trusted_proxies = options_.trusted_proxies,
          .ipv6_prefix = options_.ipv6_prefix};
}

Status Service::admin_reload() {
  if (reload("admin API")) return {};
  return Status(Status::Code::invalid, last_reload_error());
}

bool Service::submit_reload(JobQueue::Done done) {
  ReloadRecord& record = rules_;
  record.queued();
  const bool queued = reloads_.submit([this] { return admin_reload(); },
                                      [&record, done = std::move(done)](const Status& outcome) {
                                        record.unqueued();
                                        done(outcome);
                                      });
  if (!queued) record.unqueued();
  return queued;
}

Status Service::reset_key(std::string_view key) {
  const std::shared_ptr<const Rules> rules = rules_.get();
  bool shared = true;
  for (const Acquisition& counter : LimitStep::key_counters(*rules, key, options_.ipv6_prefix))
    shared &= engine_.reset(counter.resource, counter.limit);
  if (!shared) {
    return Status(Status::Code::unavailable,
                  "Redis did not confirm it: this server's counts were reset, the shared ones "
                  "may not have been (then they leave with their window)");
  }
  return {};
}

void Service::write_rules_metrics(PrometheusText& out) const {
  const std::shared_ptr<const Rules> rules = rules_.get();
  out.family("ratewin_server_rules_info", "gauge", "The active rules version (label), always 1.");
  std::string labels;
  append_label(labels, "version", rules->version());
  out.sample(labels, 1);
  out.single("ratewin_server_rules_limits", "gauge", "Limits defined by the active rules.",
             as_sample(rules->limit_count()));
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
      as_sample(static_cast<std::uint64_t>(std::count_if(
          all->begin(), all->end(), [now](const auto& e) { return e.second.active(now); }))));
  out.single("ratewin_server_overrides_in_sync", "gauge",
             "1 while the overrides follow Redis (always 1 without Redis).",
             overrides_.in_sync() ? 1 : 0);
}

std::string Service::metrics_text() const {
  PrometheusText out;
  write_request_metrics(out, tally_);
  write_connection_metrics(out, connections_);
  write_rules_metrics(out);
  for (const auto& part : metric_parts_after_rules_) part(out);
  write_engine_metrics(out, engine_.stats());
  for (const auto& part : metric_parts_) part(out);
  return out.take();
}

}  // namespace ratewin::server
