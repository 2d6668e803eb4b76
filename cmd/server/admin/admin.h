// The admin API (/admin/...): the rules in force and their reload, temporary per-key
// overrides, the most refused keys; and the status page (/status). Every call needs "Authorization: Bearer <token>"; an address that keeps
// presenting wrong tokens is locked out for a while (admin_lockout.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "admin/admin_lockout.h"
#include "admin/status_page.h"  // the status paths
#include "common/address.h"
#include "http/http.h"
#include "rules/overrides.h"

namespace ratewin::server {

class PrometheusText;
class Service;

// Work the admin API was asked for that may wait (on Redis, or on a rules file's parse),
// for its caller to make off the loop (Overrides::submit, submit_job; Service's reload
// queue) and to answer with AdminApi::done().
struct AdminWork {
  std::optional<OverrideChange> change;  // an override set or removed; else:
  bool reload = false;                   // POST /admin/reload; else:
  std::string reset_key;                 // POST /admin/reset: the key whose counts go
  std::string version;                   // (a reload's outcome: the version in force)
};

// Constant-time comparison of a presented secret with the expected one.
bool same_secret(std::string_view presented, std::string_view expected) noexcept;

class AdminApi {
 public:
  // `token` must not be empty. The service and the overrides must outlive this.
  AdminApi(Service& service, Overrides& overrides, std::string token,
           std::size_t lockout_capacity = AdminLockout::kDefaultCapacity);

  // Answers a request whose path is /admin or under it. `client` is the client's address
  // (the trusted one). Thread-safe. Waits on nothing: a change of an override (POST or
  // DELETE /admin/overrides) or a reset of a key's counts (POST /admin/reset) that passed
  // its checks is not made here, as with Redis it waits for round trips, nor a reload
  // (POST /admin/reload), which reads and parses the rules file; it is returned instead,
  // `response` untouched, for the caller to make (Overrides::submit and submit_job, with
  // Service::reset_key; Service::submit_reload) and to answer with done(). Otherwise
  // `response` holds the answer and nothing is returned.
  [[nodiscard]] std::optional<AdminWork> handle(const Request& request, const IpAddress& client,
                                                std::string_view path, Response& response);
  // The answer to work handle() returned, made with `outcome`: 200 when ok; else, by its
  // code, 422 for `invalid` (a reload's rules refused), 503 for any other (a change or a
  // reset that was not made, nor a reload: it may be asked for again).
  static void done(const AdminWork& work, const Status& outcome, Response& response);
  // The answer to a reload whose outcome is not known yet (it outlasted its wait): 202,
  // the reload goes on, and GET /admin/rules says its outcome once "reloading" is false.
  static void reload_under_way(Response& response);

  const AdminLockout& lockout() const noexcept { return lockout_; }
  // The admin API's figures for /metrics (the addresses its lockout holds), written after
  // the rules' (Service::MetricsPlace::after_rules).
  void write_metrics(PrometheusText& out) const;

 private:
  // The change a POST or DELETE asks for, or nothing and the 400 in `response`.
  static std::optional<AdminWork> override_change(const Request& request, Response& response);
  // The key a POST /admin/reset names, or nothing and the 400 in `response`.
  static std::optional<AdminWork> reset(const Request& request, Response& response);

  Service& service_;
  Overrides& overrides_;
  std::string token_;
  AdminLockout lockout_;
};

}  // namespace ratewin::server
