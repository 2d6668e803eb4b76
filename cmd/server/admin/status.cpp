// The status page's figures: GET /status.json (status_page.h).
#include "admin/status_page.h"
#include "common/text.h"
#include "service/service.h"

namespace ratewin::server {

namespace {

using std::chrono::steady_clock;

double ms(std::chrono::nanoseconds d) { return thousandths(static_cast<double>(d.count()) / 1e6); }

}  // namespace

std::string status_json(const Service& service, steady_clock::time_point now) {
  const RequestTally::Counts counts = service.tally().counts();
  const std::shared_ptr<const Rules> rules = service.rules();
  const Stats st = service.engine().stats();

  std::string b = "{\"server\":{\"version\":";
  append_json_string(b, RATEWIN_SERVER_VERSION);
  b += ",\"uptime_s\":";
  append_double(b, thousandths(std::chrono::duration<double>(now - service.started()).count()));
  b += "},\"rules\":{\"version\":";
  append_json_string(b, rules->version());
  b += ",\"path\":";
  append_json_string(b, service.rules_path());
  b += ",\"last_error\":";
  append_json_string(b, service.last_reload_error());

  // Rates: the counts now against the oldest sample (up to 10 s old).
  const RequestTally::RateSample oldest = service.tally().oldest_sample();
  const double span = oldest.at == steady_clock::time_point()
                          ? 0
                          : std::chrono::duration<double>(now - oldest.at).count();
  b += ",\"rate_window_s\":";
  append_double(b, thousandths(span));
  b += ",\"limits\":[";
  bool first = true;
  for (const LimitRule* rule : rules->limits()) {
    if (!first) b += ',';
    first = false;
    const auto count = [&](int status) -> std::uint64_t {
      const auto it = counts.requests.find({status, rule->name});
      return it == counts.requests.end() ? 0 : it->second;
    };
    const std::uint64_t allowed = count(200);
    const std::uint64_t refused = count(429);
    std::uint64_t allowed_then = 0;
    std::uint64_t refused_then = 0;
    if (const auto it = oldest.by_rule.find(rule->name); it != oldest.by_rule.end()) {
      allowed_then = it->second.first;
      refused_then = it->second.second;
    }
    const auto rate = [span](std::uint64_t now_count, std::uint64_t then) {
      return span < 0.5 || now_count < then
                 ? 0.0
                 : thousandths(static_cast<double>(now_count - then) / span);
    };
    b += "{\"rule\":";
    append_json_string(b, rule->name);
    b += ",\"limit\":";
    append_json_string(b, rule->limit.to_string());
    b += ",\"max\":";
    append_number(b, rule->limit.max());
    b += ",\"window_s\":";
    append_double(b, thousandths(std::chrono::duration<double>(rule->limit.interval()).count()));
    b += ",\"algorithm\":";
    append_json_string(b, algorithm_name(rule->limit.algorithm()));
    b += ",\"mode\":";
    append_json_string(b, mode_name(rule->limit.mode()));
    b += ",\"allowed\":";
    append_number(b, allowed);
    b += ",\"refused\":";
    append_number(b, refused);
    b += ",\"allowed_per_s\":";
    append_double(b, rate(allowed, allowed_then));
    b += ",\"refused_per_s\":";
    append_double(b, rate(refused, refused_then));
    if (const auto it = counts.shadow_refusals.find(rule->name);
        it != counts.shadow_refusals.end()) {
      b += ",\"shadow_refusals\":";
      append_number(b, it->second);
    }
    b += '}';
  }
  b += "]},\"store\":{\"kind\":";
  append_json_string(b, st.store ? "redis" : "none");
  const std::optional<std::string> down = store_down_reason(st);
  b += ",\"up\":";
  b += down ? "false" : "true";
  b += ",\"reason\":";
  append_json_string(b, down.value_or(""));
  b += ",\"write_p50_ms\":";
  append_double(b, ms(st.write_p50));
  b += ",\"write_p99_ms\":";
  append_double(b, ms(st.write_p99));
  b += ",\"writes_ok\":";
  append_number(b, st.writes_ok);
  b += ",\"writes_failed\":";
  append_number(b, st.writes_failed);
  b += ",\"live_nodes\":";
  append_number(b, st.live_nodes);
  b += ",\"circuit_opens\":";
  append_number(b, st.circuit_opens);
  b += ",\"limiters\":";
  append_number(b, st.limiters);
  b += "},\"overrides\":{\"shared\":";
  b += service.overrides().shared() ? "true" : "false";
  b += ",\"in_force\":";
  b += service.overrides().active_json(unix_ms());
  b += "},\"top\":";
  b += service.refusals().top_json(5, now);
  b += "}\n";
  return b;
}

}  // namespace ratewin::server
