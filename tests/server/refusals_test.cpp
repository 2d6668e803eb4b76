#include "service/refusals.h"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "common/json.h"

namespace ratewin::server {
namespace {

using namespace std::chrono_literals;
using Clock = Refusals::Clock;

// The refusal log's lines, as their fields.
struct Line {
  std::string event;
  std::map<std::string, std::string> fields;
};
struct Captured {
  std::vector<Line> lines;
  EventLog sink() {
    return [this](LogLevel, std::string_view event, std::span<const LogField> fields) {
      Line& line = lines.emplace_back();
      line.event = event;
      for (const LogField& f : fields) {
        std::string value;
        if (const auto* t = std::get_if<std::string_view>(&f.value)) {
          value = *t;
        } else if (const auto* n = std::get_if<std::int64_t>(&f.value)) {
          value = std::to_string(*n);
        } else {
          value = std::to_string(std::get<double>(f.value));
        }
        line.fields[std::string(f.name)] = value;
      }
    };
  }
  std::vector<Line> take(std::string_view event) {
    std::vector<Line> out;
    for (const Line& l : lines)
      if (l.event == event) out.push_back(l);
    return out;
  }
};

const Limit kLimit(5, 60s);

TEST_CASE("refusal log: a line when a key starts being refused, a count each interval, a line when it ends") {
  Captured log;
  RefusalOptions options;
  options.interval = 60s;
  Refusals refusals(options, log.sink());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 7; ++i) refusals.refused("per-key", kLimit, "ip:10.0.0.1", "search", 3, t0);
  // One line for all seven: the first.
  REQUIRE(log.lines.size() == 1);
  CHECK(log.lines[0].event == "refusing");
  CHECK(log.lines[0].fields["rule"] == "per-key");
  CHECK(log.lines[0].fields["key"] == "ip:10.0.0.1");
  CHECK(log.lines[0].fields["endpoint"] == "search");
  CHECK(log.lines[0].fields["limit"] == kLimit.to_string());
  CHECK(log.lines[0].fields["retry_after_s"] == "3");

  refusals.roll(t0 + 60s);
  auto refused = log.take("refused");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].fields["refusals"] == "7");
  CHECK(refused[0].fields["total"] == "7");

  // Refused again in the next interval: a count, no new "refusing".
  refusals.refused("per-key", kLimit, "ip:10.0.0.1", "search", 3, t0 + 61s);
  refusals.roll(t0 + 120s);
  CHECK(log.take("refusing").size() == 1);
  refused = log.take("refused");
  REQUIRE(refused.size() == 2);
  CHECK(refused[1].fields["refusals"] == "1");
  CHECK(refused[1].fields["total"] == "8");

  // An interval without a refusal: ended, and forgotten.
  refusals.roll(t0 + 180s);
  auto ended = log.take("refusals_ended");
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].fields["refusals"] == "8");
  CHECK(refusals.top(10, t0 + 180s).empty());
  refusals.refused("per-key", kLimit, "ip:10.0.0.1", "search", 3, t0 + 181s);
  CHECK(log.take("refusing").size() == 2);  // starts again
}

TEST_CASE("refusal log: bounded; what does not fit is counted as other, and a key that keeps being refused displaces keys refused once") {
  Captured log;
  RefusalOptions options;
  options.max_keys = 4;
  Refusals refusals(options, log.sink());
  const Clock::time_point t0 = Clock::now();
  // A flood of keys refused once each.
  for (int i = 0; i < 1000; ++i)
    refusals.refused("r", kLimit, "flood-" + std::to_string(i), "", 1, t0);
  // Each of the flood's keys was refused once: a new one takes the place of an old one,
  // whose refusal is counted in other. Never more than 4 tracked.
  std::vector<Refusals::RuleFigures> top = refusals.top(100, t0);
  REQUIRE(top.size() == 1);
  CHECK(top[0].keys.size() == 4);
  CHECK(top[0].other_refusals == 996);
  // The abuser, refused over and over during the flood, is tracked and on top.
  for (int i = 0; i < 50; ++i) {
    refusals.refused("r", kLimit, "abuser", "", 1, t0);
    refusals.refused("r", kLimit, "flood-x" + std::to_string(i), "", 1, t0);
  }
  top = refusals.top(1, t0 + 1s);
  REQUIRE(top[0].keys.size() == 1);
  CHECK(top[0].keys[0].key == "abuser");
  CHECK(top[0].keys[0].refusals == 50);
  const std::vector<Refusals::RuleFigures> all = refusals.top(100, t0 + 1s);
  std::uint64_t counted = all[0].other_refusals;
  for (const auto& k : all[0].keys) counted += k.refusals;
  CHECK(counted == 1100);  // every refusal counted once, tracked or other

  // Once the table holds keys refused more than once, a new key goes to other.
  Refusals heavy(options, log.sink());
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 3; ++i) heavy.refused("r", kLimit, "k" + std::to_string(k), "", 1, t0);
  heavy.refused("r", kLimit, "newcomer", "", 1, t0);
  top = heavy.top(100, t0);
  CHECK(top[0].keys.size() == 4);
  CHECK(top[0].other_refusals == 1);

  // The summary names other with its count.
  log.lines.clear();
  heavy.roll(t0 + 60s);
  auto refused = log.take("refused");
  REQUIRE(refused.size() == 5);
  CHECK(refused.back().fields["key"] == "other");
  CHECK(refused.back().fields["refusals"] == "1");
}

TEST_CASE("refusal log: a flood of keys starting to be refused cannot flood the log") {
  Captured log;
  RefusalOptions options;
  options.max_start_lines = 10;
  Refusals refusals(options, log.sink());
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 500; ++i) refusals.refused("r", kLimit, "k" + std::to_string(i), "", 1, t0);
  CHECK(log.take("refusing").size() == 10);
  CHECK(refusals.top(1000, t0)[0].keys.size() == 500);  // followed all the same
  refusals.roll(t0 + 60s);
  const auto unlogged = log.take("refusing_unlogged");
  REQUIRE(unlogged.size() == 1);
  CHECK(unlogged[0].fields.at("keys") == "490");
  // A new interval logs again.
  refusals.refused("r", kLimit, "late", "", 1, t0 + 61s);
  CHECK(log.take("refusing").size() == 11);
}

TEST_CASE("refusal log: API keys by fingerprint unless asked for whole; /admin/top shows both") {
  Captured log;
  Refusals hashed(RefusalOptions{}, log.sink());
  const Clock::time_point t0 = Clock::now();
  hashed.refused("r", kLimit, "sk_live_secret", "", 1, t0);
  const std::string fingerprint = Refusals::fingerprint("sk_live_secret");
  CHECK(fingerprint.starts_with("key#"));
  CHECK(fingerprint.size() == 16);
  CHECK(log.lines.at(0).fields["key"] == fingerprint);
  for (const Line& l : log.lines)
    for (const auto& [name, value] : l.fields) CHECK(value.find("secret") == std::string::npos);
  CHECK(Refusals::fingerprint("ip:10.0.0.1") == "ip:10.0.0.1");

  const Result<JsonValue> json = JsonValue::parse(hashed.top_json(10, t0 + 2s));
  REQUIRE(json);
  const JsonValue& key = json->find("rules")->items().at(0).find("keys")->items().at(0);
  CHECK(key.find("key")->text() == "sk_live_secret");
  CHECK(key.find("fingerprint")->text() == fingerprint);
  CHECK(key.find("refusals")->number() == 1);

  Captured full_log;
  RefusalOptions full;
  full.log_full_keys = true;
  Refusals whole(full, full_log.sink());
  whole.refused("r", kLimit, "sk_live_secret", "", 1, t0);
  CHECK(full_log.lines.at(0).fields["key"] == "sk_live_secret");

  // 0 keys: nothing tracked, nothing logged.
  Captured none_log;
  RefusalOptions none;
  none.max_keys = 0;
  Refusals off(none, none_log.sink());
  off.refused("r", kLimit, "k", "", 1, t0);
  CHECK(none_log.lines.empty());
  CHECK(off.top(10, t0).empty());
}

TEST_CASE("/admin/top: most refused first, per rule, with rates over the recent intervals") {
  Refusals refusals(RefusalOptions{}, {});
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 30; ++i) refusals.refused("a", kLimit, "ip:10.0.0.1", "e", 1, t0);
  for (int i = 0; i < 90; ++i) refusals.refused("a", kLimit, "ip:10.0.0.2", "e", 1, t0);
  for (int i = 0; i < 10; ++i) refusals.refused("b", kLimit, "ip:10.0.0.3", "", 1, t0);
  const auto top = refusals.top(10, t0 + 30s);
  REQUIRE(top.size() == 2);
  CHECK(top[0].rule == "a");
  REQUIRE(top[0].keys.size() == 2);
  CHECK(top[0].keys[0].key == "ip:10.0.0.2");
  CHECK(top[0].keys[0].recent == 90);
  CHECK(top[0].keys[0].per_second == doctest::Approx(3.0));  // 90 in 30 s
  CHECK(top[0].keys[1].key == "ip:10.0.0.1");
  CHECK(top[1].rule == "b");
  CHECK(refusals.top(1, t0 + 30s)[0].keys.size() == 1);
}

TEST_CASE("/admin/top's JSON, byte for byte") {
  RefusalOptions options;
  options.max_keys = 1;  // the second key of "a" and "b"'s only one are in their rule's other
  options.interval = 30s;
  Refusals refusals(options, {});
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 3; ++i) refusals.refused("a", kLimit, "ip:10.0.0.1", "e\"1", 1, t0);
  for (int i = 0; i < 2; ++i) refusals.refused("a", kLimit, "ip:10.0.0.2", "e", 1, t0);
  refusals.refused("b", kLimit, "ip:10.0.0.3", "", 1, t0);
  CHECK(refusals.top_json(10, t0 + 2s) ==
        R"({"interval_s":30,"tracked_keys_max":1,"rules":[{"rule":"a","keys":[)"
        R"({"key":"ip:10.0.0.1","fingerprint":"ip:10.0.0.1","endpoint":"e\"1","refusals":3,)"
        R"("recent":3,"per_second":1.5,"refused_for_s":2}],"other":{"refusals":2,"recent":2}},)"
        R"({"rule":"b","keys":[],"other":{"refusals":1,"recent":1}}]})");
  CHECK(Refusals(RefusalOptions{}, {}).top_json(10, t0) ==
        R"({"interval_s":60,"tracked_keys_max":1000,"rules":[]})");
}

TEST_CASE("structured lines: text with quoted values where needed, JSON members") {
  const LogField fields[] = {{"rule", std::string_view("per key")},
                             {"key", std::string_view("ip:10.0.0.1")},
                             {"n", std::int64_t{7}},
                             {"rate", 1.5},
                             {"odd", std::string_view("a\"b\nc")}};
  CHECK(format_event(LogFormat::text, "refusing", fields) ==
        "refusing: rule=\"per key\" key=ip:10.0.0.1 n=7 rate=1.5 odd=\"a\\\"b\\u000ac\"");
  CHECK(format_event(LogFormat::json, "refusing", fields) ==
        R"("event":"refusing","rule":"per key","key":"ip:10.0.0.1","n":7,"rate":1.5,)"
        R"("odd":"a\"b\u000ac")");
  const std::string json = "{" + format_event(LogFormat::json, "refusing", fields) + "}";
  const Result<JsonValue> parsed = JsonValue::parse(json);
  REQUIRE(parsed);
  CHECK(parsed->find("event")->text() == "refusing");
  CHECK(parsed->find("rule")->text() == "per key");
  CHECK(parsed->find("n")->number() == 7);
  CHECK(parsed->find("odd")->text() == "a\"b\nc");
}

}  // namespace
}  // namespace ratewin::server
