// The admin API (/admin/...): the rules in force and their reload, and temporary per-key
// overrides. Every call needs "Authorization: Bearer <token>"; an address that keeps
// presenting wrong tokens is locked out for a while.
#pragma once

#include <string>
#include <string_view>

#include "address.h"
#include "http.h"
#include "overrides.h"
#include "ratewin/engine.h"

namespace ratewin::server {

class Service;

// Constant-time comparison of a presented secret with the expected one.
bool same_secret(std::string_view presented, std::string_view expected) noexcept;

class AdminApi {
 public:
  // `token` must not be empty. The service and the overrides must outlive this.
  AdminApi(Service& service, Engine& engine, Overrides& overrides, std::string token);

  // Answers a request whose path is /admin or under it. `client` is the client's address
  // (the trusted one). Thread-safe.
  void handle(const Request& request, const IpAddress& client, std::string_view path,
              Response& response);

 private:
  void change_override(const Request& request, Response& response);

  Service& service_;
  Engine& engine_;
  Overrides& overrides_;
  std::string token_;
};

}  // namespace ratewin::server
