// The admin API (/admin/...): the rules in force and their reload, and temporary per-key
// overrides. Every call needs "Authorization: Bearer <token>"; an address that keeps
// presenting wrong tokens is locked out for a while (admin_lockout.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "address.h"
#include "admin_lockout.h"
#include "http.h"
#include "overrides.h"

namespace ratewin::server {

class Service;

// Constant-time comparison of a presented secret with the expected one.
bool same_secret(std::string_view presented, std::string_view expected) noexcept;

class AdminApi {
 public:
  // `token` must not be empty. The service and the overrides must outlive this.
  AdminApi(Service& service, Overrides& overrides, std::string token,
           std::size_t lockout_capacity = AdminLockout::kDefaultCapacity);

  // Answers a request whose path is /admin or under it. `client` is the client's address
  // (the trusted one). Thread-safe. Waits on no network: a change of an override (POST or
  // DELETE /admin/overrides) that passed its checks is not made here, as with Redis it
  // waits for a round trip; it is returned instead, `response` untouched, for the caller
  // to make (Overrides::apply, or Overrides::submit from an event loop) and to answer
  // with changed(). Otherwise `response` holds the answer and nothing is returned.
  [[nodiscard]] std::optional<OverrideChange> handle(const Request& request,
                                                     const IpAddress& client, std::string_view path,
                                                     Response& response);
  // The answer to a change handle() returned, made with `error` as the outcome (empty:
  // made).
  static void changed(const OverrideChange& change, std::string_view error, Response& response);

  const AdminLockout& lockout() const noexcept { return lockout_; }

 private:
  // The change a POST or DELETE asks for, or nothing and the 400 in `response`.
  static std::optional<OverrideChange> override_change(const Request& request, Response& response);

  Service& service_;
  Overrides& overrides_;
  std::string token_;
  AdminLockout lockout_;
};

}  // namespace ratewin::server
