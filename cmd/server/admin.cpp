#include "admin.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "client.h"
#include "ratewin/hash.h"
#include "service.h"
#include "text.h"

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

AdminApi::AdminApi(Service& service, Engine& engine, Overrides& overrides, std::string token)
    : service_(service), engine_(engine), overrides_(overrides), token_(std::move(token)) {}

void AdminApi::handle(const Request& request, const IpAddress& client, std::string_view path,
                      Response& response) {
  // Guessing the token: a few wrong ones per address and minute, then 429 (even for
  // the right one, until the window lets the address try again).
  static const Limit kWrongTokens(10, std::chrono::minutes(1));
  std::string name = "admin-auth";
  name += '\0';
  client.append_to(name);
  const std::uint64_t guesser = ratewin::hash(name);
  const Decision so_far = engine_.try_acquire(guesser, kWrongTokens, 0);
  if (so_far.remaining == 0) {
    for (HeaderField& f : headers(engine_.try_acquire(guesser, kWrongTokens, 1)))
      if (f.name == "Retry-After") response.headers.emplace_back(f.name, std::move(f.value));
    return json_error(response, 429, "too many wrong admin tokens from this address");
  }
  if (!same_secret(bearer(request), token_)) {
    engine_.try_acquire(guesser, kWrongTokens, 1);
    response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"ratewin-admin\"");
    return json_error(response, 401, "admin token missing or wrong");
  }
  const std::string_view method = request.method;
  if (path == "/admin/rules" && method == "GET") {
    std::string& b = response.body;
    const std::shared_ptr<const Rules> rules = service_.rules();
    b = "{\"version\":";
    append_json_string(b, rules->version());
    b += ",\"path\":";
    append_json_string(b, service_.rules_path());
    b += ",\"last_error\":";
    append_json_string(b, service_.last_reload_error());
    b += ",\"rules\":";
    b += rules->describe_json();
    b += "}\n";
    return;
  }
  if (path == "/admin/reload" && method == "POST") {
    if (!service_.reload("admin API")) {
      return json_error(response, 422, service_.last_reload_error());
    }
    response.body = "{\"version\":";
    append_json_string(response.body, service_.rules()->version());
    response.body += "}\n";
    return;
  }
  if (path == "/admin/overrides" && method == "GET") {
    const std::shared_ptr<const OverrideMap> all = overrides_.current().get();
    std::vector<std::pair<std::string_view, const Override*>> sorted;
    const std::int64_t now = unix_ms();
    for (const auto& [k, o] : *all)
      if (o.active(now)) sorted.emplace_back(k, &o);
    std::sort(sorted.begin(), sorted.end());
    std::string& b = response.body;
    b = "{\"shared\":";
    b += overrides_.shared() ? "true" : "false";
    b += ",\"overrides\":[";
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      if (i != 0) b += ',';
      b += sorted[i].second->to_json(sorted[i].first);
    }
    b += "]}\n";
    return;
  }
  if (path == "/admin/overrides" && (method == "POST" || method == "DELETE")) {
    return change_override(request, response);
  }
  return json_error(response, 404, "no such admin call");
}

// POST {"key": k, "limit": n | "multiplier": x, "ttl_s": t}; DELETE {"key": k}.
void AdminApi::change_override(const Request& request, Response& response) {
  std::string key;
  Override o;
  std::string problem;
  try {
    const YAML::Node body = YAML::Load(request.body);  // JSON is YAML
    if (!body.IsMap()) throw std::invalid_argument("the body must be a JSON object");
    for (const auto& field : body) {
      const auto name = field.first.as<std::string>();
      if (name != "key" && name != "limit" && name != "multiplier" && name != "ttl_s")
        throw std::invalid_argument("unknown field \"" + name + "\"");
    }
    if (!body["key"] || !body["key"].IsScalar())
      throw std::invalid_argument("\"key\" (a string) is required");
    key = body["key"].as<std::string>();
    if (key.empty()) throw std::invalid_argument("\"key\" is empty");
    if (request.method == "POST") {
      const bool has_limit = static_cast<bool>(body["limit"]);
      if (has_limit == static_cast<bool>(body["multiplier"]))
        throw std::invalid_argument("give exactly one of \"limit\" and \"multiplier\"");
      if (has_limit) {
        const auto n = body["limit"].as<std::uint64_t>();
        if (n < 1 || n > Limit::kMaxCount)
          throw std::invalid_argument("\"limit\" must be between 1 and 4294967295");
        o = {Override::Kind::limit, static_cast<double>(n), 0};
      } else {
        const auto m = body["multiplier"].as<double>();
        if (!(m > 0) || !(m <= 1e6))
          throw std::invalid_argument("\"multiplier\" must be above 0 and at most 1e6");
        o = {Override::Kind::multiplier, m, 0};
      }
      const double ttl = body["ttl_s"] ? body["ttl_s"].as<double>() : 3600.0;
      if (!(ttl > 0) || ttl > 30 * 86400.0)
        throw std::invalid_argument("\"ttl_s\" must be above 0 and at most 30 days");
      o.expires_ms = unix_ms() + static_cast<std::int64_t>(std::ceil(ttl * 1000));
    }
  } catch (const YAML::Exception&) {
    problem = "the body must be a JSON object with the right field types";
  } catch (const std::invalid_argument& e) {
    problem = e.what();
  }
  if (!problem.empty()) {
    return json_error(response, 400, problem);
  }
  const std::string error =
      request.method == "POST" ? overrides_.set(key, o) : overrides_.remove(key);
  if (!error.empty()) {
    return json_error(response, 503, error);
  }
  response.body = request.method == "POST" ? "{\"override\":" + o.to_json(key) + "}\n"
                                           : std::string("{\"removed\":true}\n");
}

}  // namespace ratewin::server
