#include "service/refusals.h"

#include <algorithm>
#include <cstdio>

#include "common/json_writer.h"
#include "common/text.h"
#include "ratewin/hash.h"

namespace ratewin::server {

namespace {

// In seconds, to the millisecond.
double seconds(Refusals::Clock::duration d) {
  return thousandths(std::chrono::duration<double>(d).count());
}

}  // namespace

Refusals::Refusals(RefusalOptions options, EventLog log)
    : options_(options), log_(std::move(log)), interval_start_(Clock::now()),
      previous_start_(interval_start_) {}

std::string Refusals::fingerprint(std::string_view key) {
  if (key.starts_with("ip:")) return std::string(key);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ratewin::hash(key)));
  return "key#" + std::string(hex, 12);
}

std::string Refusals::logged_key(std::string_view key) const {
  return options_.log_full_keys ? std::string(key) : fingerprint(key);
}

void Refusals::event(std::string_view name, std::string_view rule, std::string_view key,
                     const Entry& e, std::initializer_list<LogField> more) const {
  if (!log_) return;
  const std::string shown = key.empty() ? std::string("other") : logged_key(key);
  std::vector<LogField> fields = {{"rule", rule}, {"key", std::string_view(shown)}};
  if (!e.endpoint.empty()) fields.push_back({"endpoint", std::string_view(e.endpoint)});
  if (!e.limit.empty()) fields.push_back({"limit", std::string_view(e.limit)});
  fields.insert(fields.end(), more.begin(), more.end());
  log_(LogLevel::info, name, fields);
}

bool Refusals::make_room(Rule& own) {
  Rule* best_rule = nullptr;
  decltype(own.keys)::iterator best;
  std::uint64_t best_score = 2;  // only a pair refused at most once lately may go
  std::size_t looked = 0;
  const auto look = [&](Rule& r) {
    for (auto it = r.keys.begin(); it != r.keys.end() && looked < kSampled; ++it, ++looked) {
      const std::uint64_t score = it->second.current + it->second.previous;
      if (score < best_score ||
          (best_rule != nullptr && score == best_score && it->second.order < best->second.order)) {
        best_score = score;
        best_rule = &r;
        best = it;
      }
    }
  };
  look(own);
  for (auto& [name, r] : rules_) {
    if (looked >= kSampled) break;
    if (&r != &own) look(r);
  }
  if (best_rule == nullptr) return false;
  // Its refusals stay counted, in its rule's other.
  best_rule->other_total += best->second.total;
  best_rule->other_current += best->second.current;
  best_rule->other_previous += best->second.previous;
  best_rule->keys.erase(best);
  --tracked_;
  return true;
}

void Refusals::refused(std::string_view rule, const Limit& limit, std::string_view key,
                       std::string_view endpoint, std::int64_t retry_after_s,
                       Clock::time_point now) {
  if (options_.max_keys == 0) return;
  std::lock_guard lock(mutex_);
  auto r = rules_.find(rule);
  if (r == rules_.end()) r = rules_.emplace(std::string(rule), Rule{}).first;
  Rule& table = r->second;
  const auto it = table.keys.find(key);
  if (it != table.keys.end()) {
    Entry& e = it->second;
    ++e.total;
    ++e.current;
    if (e.endpoint != endpoint) e.endpoint.assign(endpoint);
    return;
  }
  if (tracked_ >= options_.max_keys && !make_room(table)) {
    ++table.other_total;
    ++table.other_current;
    return;
  }
  Entry& e = table.keys.emplace(std::string(key), Entry{}).first->second;
  ++tracked_;
  e.endpoint.assign(endpoint);
  e.limit = limit.to_string();
  e.total = e.current = 1;
  e.first = now;
  e.order = next_order_++;
  if (start_lines_ >= options_.max_start_lines) {
    ++starts_unlogged_;
    return;
  }
  ++start_lines_;
  event("refusing", rule, key, e, {{"retry_after_s", retry_after_s}});
}

void Refusals::roll(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const auto interval_s = static_cast<std::int64_t>(options_.interval.count());
  for (auto r = rules_.begin(); r != rules_.end();) {
    Rule& table = r->second;
    for (auto it = table.keys.begin(); it != table.keys.end();) {
      Entry& e = it->second;
      if (e.current == 0) {
        event("refusals_ended", r->first, it->first, e,
              {{"refusals", static_cast<std::int64_t>(e.total)},
               {"refused_for_s", seconds(now - e.first)}});
        it = table.keys.erase(it);
        --tracked_;
        continue;
      }
      event("refused", r->first, it->first, e,
            {{"refusals", static_cast<std::int64_t>(e.current)}, {"interval_s", interval_s},
             {"total", static_cast<std::int64_t>(e.total)}});
      e.previous = e.current;
      e.current = 0;
      ++it;
    }
    if (table.other_current != 0) {
      Entry other;
      event("refused", r->first, {}, other,
            {{"refusals", static_cast<std::int64_t>(table.other_current)},
             {"interval_s", interval_s},
             {"total", static_cast<std::int64_t>(table.other_total)}});
    }
    table.other_previous = table.other_current;
    table.other_current = 0;
    if (table.keys.empty() && table.other_previous == 0) {
      r = rules_.erase(r);
    } else {
      ++r;
    }
  }
  if (starts_unlogged_ != 0 && log_) {
    const LogField fields[] = {{"keys", static_cast<std::int64_t>(starts_unlogged_)},
                               {"interval_s", interval_s}};
    log_(LogLevel::info, "refusing_unlogged", fields);
  }
  start_lines_ = 0;
  starts_unlogged_ = 0;
  previous_start_ = interval_start_;
  interval_start_ = now;
}

std::vector<Refusals::RuleFigures> Refusals::top(std::size_t n, Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  std::vector<RuleFigures> out;
  for (const auto& [name, table] : rules_) {
    RuleFigures& rule = out.emplace_back();
    rule.rule = name;
    rule.other_refusals = table.other_total;
    rule.other_recent = table.other_current + table.other_previous;
    std::vector<std::pair<std::uint64_t, const std::pair<const std::string, Entry>*>> order;
    order.reserve(table.keys.size());
    for (const auto& kv : table.keys)
      order.emplace_back(kv.second.current + kv.second.previous, &kv);
    const std::size_t shown = std::min(n, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(shown),
                      order.end(), [](const auto& a, const auto& b) {
                        return a.first != b.first ? a.first > b.first : a.second->first < b.second->first;
                      });
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& [key, e] = *order[i].second;
      KeyFigures& k = rule.keys.emplace_back();
      k.key = key;
      k.fingerprint = fingerprint(key);
      k.endpoint = e.endpoint;
      k.refusals = e.total;
      k.recent = order[i].first;
      // The recent count covers the last interval and this one, or less for a key first
      // refused since.
      const double covered = seconds(now - std::max(previous_start_, e.first));
      k.per_second = thousandths(static_cast<double>(k.recent) / std::max(1.0, covered));
      k.refused_for_s = seconds(now - e.first);
    }
  }
  std::sort(out.begin(), out.end(), [](const RuleFigures& a, const RuleFigures& b) {
    const std::uint64_t ra = a.other_recent + (a.keys.empty() ? 0 : a.keys[0].recent);
    const std::uint64_t rb = b.other_recent + (b.keys.empty() ? 0 : b.keys[0].recent);
    return ra != rb ? ra > rb : a.rule < b.rule;
  });
  return out;
}

std::string Refusals::top_json(std::size_t n, Clock::time_point now) const {
  std::string b;
  JsonWriter w(b);
  w.begin_object();
  w.key("interval_s").number(static_cast<std::uint64_t>(options_.interval.count()));
  w.key("tracked_keys_max").number(options_.max_keys);
  w.key("rules").begin_array();
  for (const RuleFigures& rule : top(n, now)) {
    w.begin_object().key("rule").string(rule.rule);
    w.key("keys").begin_array();
    for (const KeyFigures& k : rule.keys) {
      w.begin_object();
      w.key("key").string(k.key);
      w.key("fingerprint").string(k.fingerprint);
      w.key("endpoint").string(k.endpoint);
      w.key("refusals").number(k.refusals);
      w.key("recent").number(k.recent);
      w.key("per_second").number(k.per_second);
      w.key("refused_for_s").number(k.refused_for_s);
      w.end_object();
    }
    w.end_array();
    w.key("other").begin_object();
    w.key("refusals").number(rule.other_refusals);
    w.key("recent").number(rule.other_recent);
    w.end_object().end_object();
  }
  w.end_array().end_object();
  return b;
}

}  // namespace ratewin::server
