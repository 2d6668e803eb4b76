// The admin API's bodies, byte for byte: key order, number forms and spacing are what
// scripts reading them as text see, so they are pinned here (the e2e tests read them as
// JSON, which would not notice a change of either).
#include "admin/admin.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/text.h"
#include "ratewin/engine.h"
#include "rules/overrides.h"
#include "service/service.h"

#ifndef RATEWIN_RULES_EXAMPLE
#error "define RATEWIN_RULES_EXAMPLE as the path of cmd/server/rules.example.yaml"
#endif

namespace ratewin::server {
namespace {

std::string quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

void ignore_log(LogLevel, std::string_view) {}

// An admin API on a local engine, the shipped example rules and local overrides.
struct Admin {
  Engine engine{[] {
    Options o;
    o.max_limiters = 1024;
    o.logger = ignore_log;
    return o;
  }()};
  Overrides overrides{RedisTarget(), "test", ignore_log};
  Service service{engine, overrides,
                  [] {
                    ServiceOptions o;
                    o.rules_path = RATEWIN_RULES_EXAMPLE;
                    return o;
                  }(),
                  ignore_log};
  AdminApi api{service, overrides, "token"};

  Response get(std::string_view path) {
    Request request;
    request.method = "GET";
    request.path = path;
    request.headers.emplace_back("authorization", "Bearer token");
    Response response;
    CHECK_FALSE(api.handle(request, *IpAddress::parse("192.0.2.1"), path, response));
    return response;
  }
};

// Whether `body` is what `expected(s)` writes for some s in [low, high]: a count of
// seconds left read from the wall clock at a moment between two readings of it.
bool one_of(const std::string& body, std::int64_t low, std::int64_t high,
            const std::function<std::string(std::int64_t)>& expected) {
  for (std::int64_t s = low; s <= high; ++s)
    if (body == expected(s)) return true;
  return false;
}

TEST_CASE("GET /admin/rules: version, path, last error, reloading, then the rules") {
  Admin admin;
  const Response r = admin.get("/admin/rules");
  CHECK(r.status == 200);
  const std::shared_ptr<const Rules> rules = admin.service.rules();
  CHECK(r.body ==
        "{\"version\":" + quoted(rules->version()) + ",\"path\":" + quoted(RATEWIN_RULES_EXAMPLE) +
            ",\"last_error\":\"\",\"reloading\":false,\"rules\":" + rules->describe_json() + "}\n");
}

TEST_CASE("GET /admin/overrides: shared, then the active ones by key") {
  Admin admin;
  CHECK(admin.get("/admin/overrides").body == "{\"shared\":false,\"overrides\":[]}\n");

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  const std::int64_t expires = unix_ms() + 3'600'000;
  using Kind = Override::Kind;
  CHECK(admin.overrides.apply({"b", Override{Kind::limit, 100, expires}}, deadline).ok());
  CHECK(admin.overrides.apply({"a\"q", Override{Kind::multiplier, 2.5, expires}}, deadline).ok());
  CHECK(admin.overrides.apply({"gone", Override{Kind::limit, 7, 1}}, deadline).ok());
  const std::int64_t before = unix_ms();
  const std::string body = admin.get("/admin/overrides").body;
  const std::int64_t after = unix_ms();
  CAPTURE(body);
  CHECK(one_of(body, (expires - after) / 1000, (expires - before) / 1000, [](std::int64_t s) {
    const std::string left = std::to_string(s);
    return "{\"shared\":false,\"overrides\":[{\"key\":\"a\\\"q\",\"multiplier\":2.5,"
           "\"expires_in_s\":" +
           left + "},{\"key\":\"b\",\"limit\":100,\"expires_in_s\":" + left + "}]}\n";
  }));
}

TEST_CASE("the answers to admin work once it is made, or not") {
  Response r;
  AdminWork reload;
  reload.reload = true;
  reload.version = "v\"1@abc";
  AdminApi::done(reload, Status(), r);
  CHECK(r.status == 200);
  CHECK(r.body == "{\"version\":\"v\\\"1@abc\"}\n");
  r = Response{};
  AdminApi::done(reload, Status(Status::Code::invalid, "rules.yaml:3:1: bad"), r);
  CHECK(r.status == 422);
  CHECK(r.body == "{\"error\":\"rules.yaml:3:1: bad\"}\n");

  AdminWork reset;
  reset.reset_key = "ip:10.0.0.1";
  r = Response{};
  AdminApi::done(reset, Status(), r);
  CHECK(r.body == "{\"reset\":\"ip:10.0.0.1\"}\n");
  r = Response{};
  AdminApi::done(reset, Status(Status::Code::unavailable, "Redis down"), r);
  CHECK(r.status == 503);
  CHECK(r.body == "{\"error\":\"Redis down\"}\n");
  r = Response{};
  AdminApi::done(reset, Status(Status::Code::timeout, "not made: too late"), r);
  CHECK(r.status == 503);  // by the code: every code but invalid is 503

  AdminWork removed;
  removed.change = OverrideChange{"k", std::nullopt};
  r = Response{};
  AdminApi::done(removed, Status(), r);
  CHECK(r.body == "{\"removed\":true}\n");

  // Expired (at 1 ms after 1970): 0 s left, whatever the clock says.
  AdminWork set;
  set.change = OverrideChange{"k\x01", Override{Override::Kind::limit, 5, 1}};
  r = Response{};
  AdminApi::done(set, Status(), r);
  CHECK(r.body == "{\"override\":{\"key\":\"k\\u0001\",\"limit\":5,\"expires_in_s\":0}}\n");
  set.change->value = Override{Override::Kind::multiplier, 0.125, 1};
  r = Response{};
  AdminApi::done(set, Status(), r);
  CHECK(r.body ==
        "{\"override\":{\"key\":\"k\\u0001\",\"multiplier\":0.125,\"expires_in_s\":0}}\n");
}

TEST_CASE("a reload that outlasted its wait: 202, and where to read its outcome") {
  Response r;
  AdminApi::reload_under_way(r);
  CHECK(r.status == 202);
  REQUIRE(r.headers.size() == 1);
  CHECK(r.headers[0].first == "Location");
  CHECK(r.headers[0].second == "/admin/rules");
  CHECK(r.body ==
        "{\"reloading\":true,\"detail\":\"the reload goes on: GET /admin/rules says its outcome "
        "(version, last_error) once reloading is false\"}\n");
}

}  // namespace
}  // namespace ratewin::server
