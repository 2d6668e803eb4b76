// What the server holds for its requests: the rules in force and their reloads, the
// refusals (refusals.h), the requests' tally (request_tally.h), the connections'
// counters, /metrics' text, and what each loop's limited requests use
// (limited_request.h: identify the client, match the rules, ask the engine for every
// matching limit at once, answer with the headers; the same for a forward-auth check).
// Each loop's router (app/router.h) routes its requests to it, to /healthz, and to the
// admin API (admin/, which reads and changes what this holds). Transport-independent
// (see http.h), so the fuzz target drives it without sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/address.h"
#include "common/job_queue.h"
#include "common/json_writer.h"
#include "common/published.h"
#include "common/outcome.h"
#include "http/http_loops.h"  // ConnectionCounters
#include "ratewin/ratewin.h"  // Engine
#include "rules/overrides.h"
#include "rules/reloader.h"
#include "rules/rules.h"
#include "service/limited_request.h"
#include "service/refusals.h"
#include "service/request_tally.h"

namespace ratewin::server {

class PrometheusText;

struct ServiceOptions {
  std::string rules_path;  // empty: no rules (every request allowed)
  // The admin API's token, for wire() to make the admin API with (admin/admin.h); empty:
  // no admin API.
  std::string admin_token;
  // Peers whose X-Forwarded-For and X-Real-IP are believed (--trust-proxy); empty: none.
  AddressRanges trusted_proxies;
  // Forward-auth checks (forward_auth.h) go to this path, or under it (--check-path; see
  // check_path_problem() for what it may be).
  std::string check_path = "/ratewin/check";
  // --mode forward-auth: only checks are answered (and /healthz, /metrics, /admin); any
  // other request is 404, not a request to the demo backend.
  bool forward_auth_only = false;
  // A rules file that defines no limit and no allow or deny entry (empty, or cut short)
  // is refused unless this is set (--allow-empty-rules).
  bool allow_empty_rules = false;
  // A rules file (or --rls-config folder) changed in place is reloaded once it has stood
  // unchanged this long (--reload-settle-ms); one renamed into place 100 ms after.
  std::uint64_t reload_settle_ms = 1000;
  // An IPv6 client without a key is counted by its address's first this many bits
  // (--ipv6-prefix, 32..128).
  unsigned ipv6_prefix = 64;
  // An override change through the admin API is made within this long of its request, or
  // not at all; its answer comes by then plus Overrides::kAnswerMargin
  // (--admin-deadline-ms).
  std::uint64_t admin_deadline_ms = 2000;
  // POST /admin/reload waits this long for the reload's outcome, whatever the request
  // timeout; a reload still under way then is answered 202, and goes on
  // (--reload-wait-ms).
  std::uint64_t reload_wait_ms = 60000;
  // Who is being refused: the refusal log and GET /admin/top (refusals.h).
  RefusalOptions refusals;
};

// Why the store is down (its commands fail, or it is not connected yet), while it is:
// decisions are degraded (code `unavailable`). Ok with a store that is up, or without
// one. For /healthz and the status page.
Status store_down_reason(const Stats& s);

// The rules in `text` (read from `path`), checked as every load of the server is: a file
// that says nothing is refused unless `allow_empty`, and so is a limit of which not one
// limiter fits in the engine's memory bound (both a RulesError); limits of which few fit
// are warned of through `log`. For the service's loads and `ratewin-server check`.
Rules checked_rules(std::string_view text, const std::string& path, const Engine& engine,
                    bool allow_empty, const std::function<void(LogLevel, std::string_view)>& log);

class Service {
 public:
  using Log = std::function<void(LogLevel, std::string_view)>;
  // Loads the rules file (throws RulesError if the first load fails). `events`: where the
  // refusal log goes (none if empty).
  Service(Engine& engine, Overrides& overrides, ServiceOptions options, Log log,
          EventLog events = {});
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Reads the rules file again (Reloader::reload). If it fails validation the error is
  // logged (naming the line) and kept for /admin/rules and /metrics, and the last good
  // rules stay active. Unchanged bytes are not a new version. Thread-safe.
  bool reload(std::string_view why, ReloadCause cause = ReloadCause::request) {
    return rules_.reload(why, cause);
  }
  // A reload for the admin API (POST /admin/reload): ok when the file's rules are in
  // force, else `invalid` with the load's error. Waits on the read and the parse.
  Status admin_reload();
  // Queues admin_reload() on the service's reload thread, whose outcome goes to `done`
  // there; reloading() from now until then. False when too many wait already.
  bool submit_reload(JobQueue::Done done);
  // Forgets every count `key` has under the rules in force (LimitStep::key_counters), in
  // Redis and in this server's engine. Waits on Redis: off the loops. Not ok (`unavailable`)
  // when Redis did not confirm it.
  Status reset_key(std::string_view key);
  std::shared_ptr<const Rules> rules() const { return rules_.get(); }
  const std::string& rules_path() const noexcept { return options_.rules_path; }
  std::uint64_t reload_settle_ms() const noexcept { return options_.reload_settle_ms; }

  // The last rules load's error, empty if it succeeded. Thread-safe.
  std::string last_reload_error() const { return rules_.last_error(); }
  // A reload is under way, or an admin reload waits its turn. Thread-safe.
  bool reloading() const noexcept { return rules_.reloading(); }

  ConnectionCounters& connections() noexcept { return connections_; }
  // The refusals of each key by each rule (the refusal log, GET /admin/top); its roll()
  // is the caller's to call every interval.
  Refusals& refusals() noexcept { return refusals_; }
  const Refusals& refusals() const noexcept { return refusals_; }
  // The Prometheus text of /metrics.
  std::string metrics_text() const;
  // Where another part's figures go in /metrics: after the rules' and the overrides' (the
  // admin API's), or after the engine's, last (the RLS listener's).
  enum class MetricsPlace { after_rules, last };
  // Another part of the server whose figures /metrics shows too. Before serving.
  void add_metrics(std::function<void(PrometheusText&)> part,
                   MetricsPlace place = MetricsPlace::last) {
    (place == MetricsPlace::after_rules ? metric_parts_after_rules_ : metric_parts_)
        .push_back(std::move(part));
  }

  // Another part of the server that /healthz and the status JSON describe too (the RLS
  // listener's configuration): `part` writes its members into their object. Before
  // serving; called from any thread.
  void add_status_fields(std::function<void(JsonWriter&)> part) {
    status_parts_.push_back(std::move(part));
  }
  void write_status_fields(JsonWriter& j) const {
    for (const auto& part : status_parts_) part(j);
  }

  // What each loop's limited requests use (its router's LimitedRequests).
  LimitedRequests::Parts limiting_parts();

  // What the requests came to (by status and rule, shadow refusals, latency); the status
  // page's rates from sample_rates(), which the control loop calls every second. Thread-safe.
  RequestTally& tally() noexcept { return tally_; }
  const RequestTally& tally() const noexcept { return tally_; }
  void sample_rates(std::chrono::steady_clock::time_point now) { tally_.sample_rates(now); }

  const ServiceOptions& options() const noexcept { return options_; }
  const Engine& engine() const noexcept { return engine_; }
  Overrides& overrides() noexcept { return overrides_; }
  const Overrides& overrides() const noexcept { return overrides_; }
  std::chrono::steady_clock::time_point started() const noexcept { return started_; }

 private:
  // metrics_text()'s part about the rules and the overrides.
  void write_rules_metrics(PrometheusText& out) const;
  // How the rules file is read and checked (checked_rules()), and its reloads logged.
  Reloader<Rules>::Hooks rules_hooks();

  Engine& engine_;
  Overrides& overrides_;
  ServiceOptions options_;
  Log log_;
  // The rules in force, loaded by the constructor (after log_, which their checks use),
  // and their reloads; admin reloads queued count as under way (reloading()).
  Reloader<Rules> rules_;
  ConnectionCounters connections_;
  Refusals refusals_;
  RequestTally tally_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::vector<std::function<void(PrometheusText&)>> metric_parts_after_rules_;
  std::vector<std::function<void(PrometheusText&)>> metric_parts_;
  std::vector<std::function<void(JsonWriter&)>> status_parts_;
  // POST /admin/reload's reads and parses, off the loops (last: it goes first, waiting for
  // the one it runs).
  JobQueue reloads_{4};
};

}  // namespace ratewin::server
