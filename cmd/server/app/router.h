// router.h: one loop's request handler, made per loop by the handler factory that wire()
// gives HttpLoop. It routes a request by its path: /healthz, /metrics, the admin API and
// the status page (admin/), or a request the rules limit (service/, a LimitedRequest);
// and it makes the admin work that waits (an override's change, a key's reset, a reload)
// off the loop, answering it back on the loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "admin/admin.h"
#include "http/http.h"
#include "service/limited_request.h"
#include "service/request_tally.h"
#include "service/service.h"

struct uv_loop_s;

namespace ratewin::server {

class LoopTasks;

class Router final : public RequestHandler {
 public:
  // On a transport's loop thread (its counters are its own). `admin`: the admin API, null
  // without one; it and `service` must outlive this. With `loop` and a store, admissions'
  // writes go out on that loop (ratewin::AsyncAcquirer) and their requests are answered
  // when the replies arrive; without, each waits for its write. Likewise, with `loop` and
  // Redis, admin override changes are written by the overrides' writer thread
  // (Overrides::submit) and answered back on the loop; without, each is made before its
  // request is answered. The router then holds a handle on `loop` until its close().
  Router(Service& service, AdminApi* admin, uv_loop_s* loop = nullptr);
  ~Router() override;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  void close() override;
  void handle(const Request& request, std::string_view peer, Reply& reply) override;

 private:
  void count(int status, std::string_view rule) { counter_.count(status, rule); }
  // Makes what the admin API was asked for (an override changed, a key's counts reset).
  // With Redis and a loop, it is made on the overrides' writer thread, and the request
  // answered when the outcome is back on this loop: the loop serves other requests
  // meanwhile; a reload likewise on the service's reload thread. Otherwise it is made and
  // answered at once (without Redis an override change waits on nothing; without a loop
  // there is nothing else to serve).
  void admin_work(AdminWork work, Reply& reply);
  // A change's outcome, back on the loop.
  void changed(std::uint64_t number, const Status& outcome);
  // 200 either way (the server answers, by the failure policies while degraded): status
  // "ok", or "degraded" with the reason while the store is down or its commands fail.
  void health(Response& response);

  Service& service_;
  AdminApi* admin_;  // null without an admin API
  RequestTally::Counter counter_;
  LimitedRequests requests_;
  // Admin work being made off the loop (admin_work()), by number.
  struct ChangeInFlight {
    AdminWork work;
    Responder responder;
  };
  std::shared_ptr<LoopTasks> back_on_loop_;  // with a loop, an admin API and Redis
  std::unordered_map<std::uint64_t, ChangeInFlight> changes_;  // by number
  std::uint64_t next_change_ = 0;
};

}  // namespace ratewin::server
