#include "admin/admin.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/prometheus.h"
#include "service/client.h"
#include "service/service.h"

namespace ratewin::server {

bool same_secret(std::string_view presented, std::string_view expected) noexcept {
  // Every byte of the expected secret is looked at whatever the presented one holds,
  // so the time taken says nothing about how much of it matched.
  unsigned diff = presented.size() == expected.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char p = i < presented.size() ? presented[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(p ^ expected[i]));
  }
  return diff == 0 && !expected.empty();
}

AdminApi::AdminApi(Service& service, Overrides& overrides, std::string token,
                   std::size_t lockout_capacity)
    : service_(service),
      overrides_(overrides),
      token_(std::move(token)),
      lockout_(lockout_capacity) {}

std::optional<AdminWork> AdminApi::handle(const Request& request, const IpAddress& client,
                                          std::string_view path, Response& response) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const AdminLockout::Verdict verdict = lockout_.attempt(client, now_ms);
  const auto refuse = [&](std::string_view why) {
    const auto seconds = (verdict.retry_after.count() + 999) / 1000;
    response.headers.emplace_back("Retry-After",
                                  std::to_string(std::max<std::int64_t>(1, seconds)));
    json_error(response, 429, why);
  };
  if (!verdict.allowed) {
    refuse("too many wrong admin tokens from this address");
    return std::nullopt;
  }
  // The status page takes the token as a Basic password too, so that a browser can ask
  // for it; the rest of the API takes a bearer token only (a browser sends Basic
  // credentials it has cached along with another site's forged requests: only the
  // status page's GETs, which change nothing, accept them).
  const bool status = is_status_path(path);
  std::optional<std::string> basic;
  if (status && bearer(request).empty()) basic = basic_password(request);
  const bool right = same_secret(basic ? std::string_view(*basic) : bearer(request), token_);
  if (!right && verdict.table_full) {
    // Its attempt could not be counted: refused as if locked out.
    refuse("too many addresses are presenting wrong admin tokens: try later");
    return std::nullopt;
  }
  if (!right) {
    response.headers.emplace_back("WWW-Authenticate",
                                  status ? "Basic realm=\"ratewin-status\", charset=\"UTF-8\""
                                         : "Bearer realm=\"ratewin-admin\"");
    json_error(response, 401, "admin token missing or wrong");
    return std::nullopt;
  }
  lockout_.succeeded(client);
  const std::string_view method = request.method;
  if (path == "/admin/rules" && method == "GET") {
    const std::shared_ptr<const Rules> rules = service_.rules();
    json_body(response, [&](JsonWriter& w) {
      w.key("version").string(rules->version());
      w.key("path").string(service_.rules_path());
      w.key("last_error").string(service_.last_reload_error());
      w.key("reloading").boolean(service_.reloading());
      w.key("rules").raw(rules->describe_json());
    });
    return std::nullopt;
  }
  if (status) {
    if (method != "GET") {
      response.headers.emplace_back("Allow", "GET");
      json_error(response, 405, "the status page is read with GET");
    } else if (path == kStatusPath) {
      status_page(status_json(service_, std::chrono::steady_clock::now()), response);
    } else {
      response.body = status_json(service_, std::chrono::steady_clock::now());
    }
    return std::nullopt;
  }
  if (path == "/admin/top" && method == "GET") {
    // ?n=<keys per rule> (1..1000, 10 by default).
    std::size_t n = 10;
    std::string_view query = request.query;
    if (!query.empty()) {
      std::uint64_t value = 0;
      const std::string_view digits = query.starts_with("n=") ? query.substr(2) : std::string_view();
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
          value == 0 || value > 1000) {
        json_error(response, 400, "the query may be n=<keys per rule>, 1 to 1000");
        return std::nullopt;
      }
      n = static_cast<std::size_t>(value);
    }
    response.body = service_.refusals().top_json(n, std::chrono::steady_clock::now());
    response.body += '\n';
    return std::nullopt;
  }
  if (path == "/admin/reload" && method == "POST") {
    // Read and parsed off the loop: a large rules file takes seconds.
    AdminWork work;
    work.reload = true;
    return work;
  }
  if (path == "/admin/overrides" && method == "GET") {
    json_body(response, [&](JsonWriter& w) {
      w.key("shared").boolean(overrides_.shared());
      w.key("overrides").raw(overrides_.active_json(unix_ms()));
    });
    return std::nullopt;
  }
  if (path == "/admin/overrides" && (method == "POST" || method == "DELETE")) {
    return override_change(request, response);
  }
  if (path == "/admin/reset" && method == "POST") return reset(request, response);
  json_error(response, 404, "no such admin call");
  return std::nullopt;
}

namespace {

// A JSON object body with no fields but `allowed`; else `invalid`, saying what is wrong.
Result<JsonValue> object_body(std::string_view body,
                              std::initializer_list<std::string_view> allowed) {
  Result<JsonValue> json = JsonValue::parse(body);
  if (!json) return invalid("the body is not JSON: " + json.message());
  if (!json->is(JsonValue::Type::object)) return invalid("the body must be a JSON object");
  for (const std::string& name : json->keys()) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      return invalid("unknown field \"" + name + "\"");
  }
  return json;
}

// The body's "key", as clients are known ("ip:" keys canonical); else `invalid`.
Result<std::string> key_of(const JsonValue& json) {
  const JsonValue* key = json.find("key");
  if (key == nullptr || !key->is(JsonValue::Type::string))
    return invalid("\"key\" (a string) is required");
  std::string out = key->text();
  if (out.empty()) return invalid("\"key\" is empty");
  if (out.starts_with("ip:")) {
    // As the rules write addresses, and as clients are known by them.
    const std::optional<std::string> address = canonical_address(out.substr(3));
    if (!address) return invalid("a key starting \"ip:\" must name an IP address");
    out = "ip:" + *address;
  }
  return out;
}

// The override a POST body asks for ({"key": k, "limit": n | "multiplier": x, "ttl_s": t};
// a DELETE body has the key only), and its key; else `invalid`, saying what is wrong.
Result<std::pair<std::string, Override>> override_from(std::string_view method,
                                                       std::string_view body) {
  using Type = JsonValue::Type;
  const bool post = method == "POST";
  const Result<JsonValue> parsed = post ? object_body(body, {"key", "limit", "multiplier", "ttl_s"})
                                        : object_body(body, {"key"});
  if (!parsed) return parsed.status();
  const JsonValue* json = &*parsed;
  Result<std::string> key = key_of(*json);
  if (!key) return key.status();
  std::pair<std::string, Override> out{*std::move(key), Override{}};
  if (!post) return out;
  const JsonValue* limit = json->find("limit");
  const JsonValue* multiplier = json->find("multiplier");
  Override& o = out.second;
  if ((limit == nullptr) == (multiplier == nullptr))
    return invalid("give exactly one of \"limit\" and \"multiplier\"");
  if (limit != nullptr) {
    const std::optional<std::uint64_t> n = limit->whole_number();
    if (!n || *n < 1 || *n > Limit::kMaxCount)
      return invalid("\"limit\" must be a whole number from 1 to 4294967295");
    o = {Override::Kind::limit, static_cast<double>(*n), 0};
  } else {
    if (!multiplier->is(Type::number) || !(multiplier->number() > 0) ||
        !(multiplier->number() <= 1e6))
      return invalid("\"multiplier\" must be a number above 0 and at most 1e6");
    o = {Override::Kind::multiplier, multiplier->number(), 0};
  }
  double ttl = 3600.0;
  if (const JsonValue* t = json->find("ttl_s")) {
    if (!t->is(Type::number) || !(t->number() > 0) || t->number() > 30 * 86400.0)
      return invalid("\"ttl_s\" must be a number above 0 and at most 30 days");
    ttl = t->number();
  }
  o.expires_ms = unix_ms() + static_cast<std::int64_t>(std::ceil(ttl * 1000));
  return out;
}

}  // namespace

std::optional<AdminWork> AdminApi::override_change(const Request& request, Response& response) {
  Result<std::pair<std::string, Override>> asked = override_from(request.method, request.body);
  if (!asked) {
    json_error(response, 400, asked.message());
    return std::nullopt;
  }
  auto& [key, value] = *asked;
  OverrideChange change{std::move(key), std::nullopt};
  if (request.method == "POST") change.value = value;
  AdminWork work;
  work.change = std::move(change);
  return work;
}

std::optional<AdminWork> AdminApi::reset(const Request& request, Response& response) {
  const Result<JsonValue> body = object_body(request.body, {"key"});
  Result<std::string> key = body ? key_of(*body) : Result<std::string>(body.status());
  if (!key) {
    json_error(response, 400, key.message());
    return std::nullopt;
  }
  AdminWork work;
  work.reset_key = *std::move(key);
  return work;
}

void AdminApi::write_metrics(PrometheusText& out) const {
  out.single("ratewin_server_admin_lockout_addresses", "gauge",
             "Addresses the admin lockout holds (with a wrong token in the last minute).",
             as_sample(lockout_.size()));
}

void AdminApi::reload_under_way(Response& response) {
  response.status = 202;
  response.headers.emplace_back("Location", "/admin/rules");
  json_body(response, [](JsonWriter& w) {
    w.key("reloading").boolean(true);
    w.key("detail").string(
        "the reload goes on: GET /admin/rules says its outcome (version, last_error) once "
        "reloading is false");
  });
}

void AdminApi::done(const AdminWork& work, const Status& outcome, Response& response) {
  // A reload's rules refused are the file's problem (`invalid`); anything else was not
  // made this time, and may be tried again.
  if (!outcome.ok())
    return json_error(response, outcome.code() == Status::Code::invalid ? 422 : 503,
                      outcome.message());
  if (work.reload)
    return json_body(response, [&](JsonWriter& w) { w.key("version").string(work.version); });
  json_body(response, [&](JsonWriter& w) {
    if (!work.change) {
      w.key("reset").string(work.reset_key);
    } else if (const std::optional<Override>& value = work.change->value) {
      value->to_json(w.key("override"), work.change->key);
    } else {
      w.key("removed").boolean(true);
    }
  });
}

}  // namespace ratewin::server
