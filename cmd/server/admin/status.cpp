// The status page's figures: GET /status.json (status_page.h).
#include "admin/status_page.h"
#include "common/json_writer.h"
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

  std::string b;
  JsonWriter j(b);
  j.begin_object();
  j.key("server").begin_object();
  j.key("version").string(RATEWIN_SERVER_VERSION);
  j.key("uptime_s").number(
      thousandths(std::chrono::duration<double>(now - service.started()).count()));
  j.end_object();
  j.key("rules").begin_object();
  j.key("version").string(rules->version());
  j.key("path").string(service.rules_path());
  j.key("last_error").string(service.last_reload_error());

  // Rates: the counts now against the oldest sample (up to 10 s old).
  const RequestTally::RateSample oldest = service.tally().oldest_sample();
  const double span = oldest.at == steady_clock::time_point()
                          ? 0
                          : std::chrono::duration<double>(now - oldest.at).count();
  j.key("rate_window_s").number(thousandths(span));
  j.key("limits").begin_array();
  for (const LimitRule* rule : rules->limits()) {
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
    j.begin_object();
    j.key("rule").string(rule->name);
    j.key("limit").string(rule->limit.to_string());
    j.key("max").number(rule->limit.max());
    j.key("window_s")
        .number(thousandths(std::chrono::duration<double>(rule->limit.interval()).count()));
    j.key("algorithm").string(algorithm_name(rule->limit.algorithm()));
    j.key("mode").string(mode_name(rule->limit.mode()));
    j.key("allowed").number(allowed);
    j.key("refused").number(refused);
    j.key("allowed_per_s").number(rate(allowed, allowed_then));
    j.key("refused_per_s").number(rate(refused, refused_then));
    if (const auto it = counts.shadow_refusals.find(rule->name);
        it != counts.shadow_refusals.end()) {
      j.key("shadow_refusals").number(it->second);
    }
    j.end_object();
  }
  j.end_array();
  j.end_object();
  service.write_status_fields(j);
  const Status down = store_down_reason(st);
  j.key("store").begin_object();
  j.key("kind").string(st.store ? "redis" : "none");
  j.key("up").boolean(down.ok());
  j.key("reason").string(down.message());
  j.key("write_p50_ms").number(ms(st.write_p50));
  j.key("write_p99_ms").number(ms(st.write_p99));
  j.key("writes_ok").number(st.writes_ok);
  j.key("writes_failed").number(st.writes_failed);
  j.key("live_nodes").number(st.live_nodes);
  j.key("circuit_opens").number(st.circuit_opens);
  j.key("limiters").number(st.limiters);
  j.end_object();
  j.key("overrides").begin_object();
  j.key("shared").boolean(service.overrides().shared());
  j.key("in_force").raw(service.overrides().active_json(unix_ms()));
  j.end_object();
  j.key("top").raw(service.refusals().top_json(5, now));
  j.end_object();
  b += '\n';
  return b;
}

}  // namespace ratewin::server
