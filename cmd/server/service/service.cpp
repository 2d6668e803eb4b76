#include "service/service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>

#include "common/json_writer.h"
#include "common/prometheus.h"
#include "common/text.h"
#include "http/loop_tasks.h"
#include "service/client.h"
#include "service/forward_auth.h"
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
             "idle to close), idle_closed (the longest idle, closed to make room), "
             "address_refused (over --max-connections-per-address), accept_failed (the "
             "process's file limit, most likely), timed_out (slow or idle), shed (not taking "
             "answers while the buffers were over --max-buffer-memory).");
  out.sample("outcome=\"accepted\"", as_sample(c.accepted));
  out.sample("outcome=\"refused\"", as_sample(c.refused));
  out.sample("outcome=\"idle_closed\"", as_sample(c.idle_closed));
  out.sample("outcome=\"address_refused\"", as_sample(c.address_refused));
  out.sample("outcome=\"accept_failed\"", as_sample(c.accept_failures));
  out.sample("outcome=\"timed_out\"", as_sample(c.timed_out));
  out.sample("outcome=\"shed\"", as_sample(c.shed));
}

}  // namespace

// ---------------------------------------------------------------------------------------

class Service::Worker final : public RequestHandler {
 public:
  Worker(Service& service, uv_loop_s* loop)
      : service_(service),
        counter_(service.tally_),
        requests_(service.limiting_parts(), counter_, loop) {
    if (loop != nullptr && service.admin_) back_on_loop_ = LoopTasks::open(loop);
  }
  ~Worker() override { close(); }

  void close() override {
    requests_.close();  // what is in flight is answered now
    if (back_on_loop_ != nullptr) {
      back_on_loop_->close();  // answers the changes whose outcome is back already
      // The others' outcomes will not be heard of: their tasks are refused now.
      std::unordered_map<std::uint64_t, ChangeInFlight> unheard;
      unheard.swap(changes_);
      for (auto& [number, change] : unheard) {
        Response response;
        json_error(response, 503,
                   "the server is shutting down: the change may or may not have been made");
        count(503, "admin");
        change.responder.respond(std::move(response));
      }
    }
  }

  void handle(const Request& request, std::string_view peer, Reply& reply) override {
    Response& response = reply.response();
    const std::string& path = request.path;
    if (path == "/healthz") return health(response);
    if (path == "/metrics") {
      response.content_type = kPrometheusContentType;
      response.body = service_.metrics_text();
      return;
    }
    ClientIdentifier& clients = requests_.clients();
    const ClientIdentifier::Peer& from = clients.peer(peer);
    if (path == "/admin" || path.starts_with("/admin/") || is_status_path(path)) {
      if (!service_.admin_) {
        json_error(response, 404, "no admin API (start the server with --admin-token)");
      } else if (std::optional<AdminWork> work = service_.admin_->handle(
                     request, clients.address(request, from, false).address, path, response)) {
        return admin_work(std::move(*work), reply);
      }
      return count(response.status, "admin");
    }
    const std::string& check_path = service_.options_.check_path;
    const bool check = is_check(request, check_path);
    if (!check && service_.options_.forward_auth_only) {
      count(404, "not-a-check");
      return json_error(
          response, 404,
          "not a forward-auth check (--mode forward-auth: checks go to " + check_path + ")");
    }
    LimitedRequest& limited = requests_.take();
    if (check) return limited.limit_check(request, from, reply);
    limited.limit_request(request, from, reply);
  }

 private:
  void count(int status, std::string_view rule) { counter_.count(status, rule); }
  // Makes what the admin API was asked for (an override changed, a key's counts reset).
  // With Redis and a loop, it is made on the overrides' writer thread, and the request
  // answered when the outcome is back on this loop: the loop serves other requests
  // meanwhile; a reload likewise on the service's reload thread. Otherwise it is made and
  // answered at once (without Redis an override change waits on nothing; without a loop
  // there is nothing else to serve).
  void admin_work(AdminWork work, Reply& reply) {
    Overrides& overrides = service_.overrides_;
    Response& response = reply.response();
    const Overrides::Deadline deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(service_.options_.admin_deadline_ms);
    const auto make = [this, &overrides, deadline](const AdminWork& w) {
      return w.reload   ? admin_reload()
             : w.change ? overrides.apply(*w.change, deadline)
                        : service_.reset_key(w.reset_key);
    };
    if (back_on_loop_ == nullptr || (!work.reload && !overrides.shared())) {
      const Status outcome = make(work);
      if (work.reload) work.version = service_.rules()->version();
      AdminApi::done(work, outcome, response);
      return count(response.status, "admin");
    }
    if (back_on_loop_->closed()) {  // the loop is ending: it must not wait on Redis now
      json_error(response, 503, "the server is shutting down");
      return count(503, "admin");
    }
    const std::uint64_t number = next_change_++;
    ChangeInFlight& in_flight = changes_[number];
    in_flight.work = work;
    // Runs on the writer thread; the outcome's task runs on this loop, while this worker
    // is open (close() refuses later tasks before the worker goes).
    auto done = [this, number, back = back_on_loop_](const Status& outcome) {
      back->post([this, number, outcome] { changed(number, outcome); });
    };
    const bool queued =
        work.reload   ? submit_reload(std::move(done))
        : work.change ? overrides.submit(std::move(*work.change), deadline, std::move(done))
                      : overrides.submit_job(
                            [this, key = std::move(work.reset_key)] {
                              return service_.reset_key(key);
                            },
                            std::move(done));
    if (!queued) {
      changes_.erase(number);
      response.headers.emplace_back("Retry-After", "1");
      json_error(response, 503,
                 work.reload ? "too many reloads are waiting: try later"
                             : "too many admin changes are waiting for Redis: try later");
      return count(503, "admin");
    }
    if (work.reload) {
      // The server's own work, which may take longer than the request timeout (a large
      // file, a busy machine, other reloads ahead of it): its outcome is waited for up to
      // --reload-wait-ms, then a 202 says where to learn it.
      Response late;
      AdminApi::reload_under_way(late);
      in_flight.responder = reply.defer(service_.options_.reload_wait_ms, std::move(late));
    } else {
      in_flight.responder = reply.defer();
    }
  }

  // A reload for the admin API: ok when the file's rules are in force, else `invalid` with
  // the load's error.
  Status admin_reload() {
    if (service_.reload("admin API")) return {};
    return Status(Status::Code::invalid, service_.last_reload_error());
  }

  // Queues an admin reload on the service's reload thread, whose outcome goes to `done`
  // there; reloading() from now until then. False when too many wait already.
  bool submit_reload(JobQueue::Done done) {
    ReloadRecord& record = service_.rules_;
    record.queued();
    const bool queued =
        service_.reloads_.submit([this] { return admin_reload(); },
                                 [&record, done = std::move(done)](const Status& outcome) {
                                   record.unqueued();
                                   done(outcome);
                                 });
    if (!queued) record.unqueued();
    return queued;
  }

  // A change's outcome, back on the loop.
  void changed(std::uint64_t number, const Status& outcome) {
    const auto it = changes_.find(number);
    if (it == changes_.end()) return;
    if (it->second.work.reload) it->second.work.version = service_.rules()->version();
    Response response;
    AdminApi::done(it->second.work, outcome, response);
    count(response.status, "admin");
    // Out of the table first: answering may have this worker handle the connection's
    // next request at once.
    Responder responder = std::move(it->second.responder);
    changes_.erase(it);
    responder.respond(std::move(response));
  }

  // 200 either way (the server answers, by the failure policies while degraded): status
  // "ok", or "degraded" with the reason while the store is down or its commands fail.
  void health(Response& response) {
    const Stats s = service_.engine_.stats();
    const Status down = store_down_reason(s);
    response.body.clear();
    JsonWriter j(response.body);
    j.begin_object();
    if (!down.ok()) {
      j.key("status").string("degraded").key("store").string("down").key("reason").string(
          down.message());
    } else {
      j.key("status").string("ok").key("store").string(s.store ? "up" : "none");
    }
    j.key("rules").string(requests_.rules().version()).end_object();
    response.body += '\n';
  }

  Service& service_;
  RequestTally::Counter counter_;
  LimitedRequests requests_;
  // Override changes being made on the overrides' writer thread (change_override()).
  struct ChangeInFlight {
    AdminWork work;
    Responder responder;
  };
  std::shared_ptr<LoopTasks> back_on_loop_;  // with a loop, an admin API and Redis
  std::unordered_map<std::uint64_t, ChangeInFlight> changes_;  // by number
  std::uint64_t next_change_ = 0;
};

// ---------------------------------------------------------------------------------------

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
      refusals_(options_.refusals, std::move(events)) {
  if (!options_.admin_token.empty())
    admin_ = std::make_unique<AdminApi>(*this, overrides_, options_.admin_token,
                                        options_.admin_lockout_capacity);
}

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

std::unique_ptr<RequestHandler> Service::worker(uv_loop_s* loop) {
  return std::make_unique<Worker>(*this, loop);
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
  if (admin_) {
    out.single("ratewin_server_admin_lockout_addresses", "gauge",
               "Addresses the admin lockout holds (with a wrong token in the last minute).",
               as_sample(admin_->lockout().size()));
  }
}

std::string Service::metrics_text() const {
  PrometheusText out;
  write_request_metrics(out, tally_);
  write_connection_metrics(out, connections_);
  write_rules_metrics(out);
  write_engine_metrics(out, engine_.stats());
  for (const auto& part : metric_parts_) part(out);
  return out.take();
}

}  // namespace ratewin::server
