#include "app/router.h"

#include <chrono>
#include <optional>
#include <utility>

#include "common/json_writer.h"
#include "common/prometheus.h"
#include "http/loop_tasks.h"
#include "service/client.h"
#include "service/forward_auth.h"

namespace ratewin::server {

Router::Router(Service& service, AdminApi* admin, uv_loop_s* loop)
    : service_(service),
      admin_(admin),
      counter_(service.tally()),
      requests_(service.limiting_parts(), counter_, loop) {
  if (loop != nullptr && admin_ != nullptr) back_on_loop_ = LoopTasks::open(loop);
}

Router::~Router() { close(); }

void Router::close() {
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

void Router::handle(const Request& request, std::string_view peer, Reply& reply) {
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
    if (admin_ == nullptr) {
      json_error(response, 404, "no admin API (start the server with --admin-token)");
    } else if (std::optional<AdminWork> work = admin_->handle(
                   request, clients.address(request, from, false).address, path, response)) {
      return admin_work(std::move(*work), reply);
    }
    return count(response.status, "admin");
  }
  if (service_.options().rules_path.empty()) {
    // Without rules nothing is limited: a gateway pointed here by mistake (or a rules
    // flag lost from a unit) must not read "allowed" for every request.
    count(404, "no-rules");
    return json_error(response, 404,
                      "no rules (start the server with --rules FILE): only /healthz, /metrics "
                      "and the admin paths are served");
  }
  const std::string& check_path = service_.options().check_path;
  const bool check = is_check(request, check_path);
  if (!check && service_.options().forward_auth_only) {
    count(404, "not-a-check");
    return json_error(
        response, 404,
        "not a forward-auth check (--mode forward-auth: checks go to " + check_path + ")");
  }
  LimitedRequest& limited = requests_.take();
  if (check) return limited.limit_check(request, from, reply);
  limited.limit_request(request, from, reply);
}

void Router::admin_work(AdminWork work, Reply& reply) {
  Overrides& overrides = service_.overrides();
  Response& response = reply.response();
  const Overrides::Deadline deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(service_.options().admin_deadline_ms);
  const auto make = [this, &overrides, deadline](const AdminWork& w) {
    return w.reload   ? service_.admin_reload()
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
  // Runs on the writer thread; the outcome's task runs on this loop, while this router is
  // open (close() refuses later tasks before the router goes).
  auto done = [this, number, back = back_on_loop_](const Status& outcome) {
    back->post([this, number, outcome] { changed(number, outcome); });
  };
  const bool queued =
      work.reload   ? service_.submit_reload(std::move(done))
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
    in_flight.responder = reply.defer(service_.options().reload_wait_ms, std::move(late));
  } else {
    in_flight.responder = reply.defer();
  }
}

void Router::changed(std::uint64_t number, const Status& outcome) {
  const auto it = changes_.find(number);
  if (it == changes_.end()) return;
  if (it->second.work.reload) it->second.work.version = service_.rules()->version();
  Response response;
  AdminApi::done(it->second.work, outcome, response);
  count(response.status, "admin");
  // Out of the table first: answering may have this router handle the connection's next
  // request at once.
  Responder responder = std::move(it->second.responder);
  changes_.erase(it);
  responder.respond(std::move(response));
}

void Router::health(Response& response) {
  const Stats s = service_.engine().stats();
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
  j.key("rules").string(requests_.rules().version());
  service_.write_status_fields(j);
  j.end_object();
  response.body += '\n';
}

}  // namespace ratewin::server
