// Who is being limited: the refusals of each client key by each rule, for the refusal
// log and GET /admin/top.
//
// The log says when a key starts being refused by a rule (one line: "refusing"), then at
// most once an interval how many times it was refused in that interval ("refused"), and
// when an interval passes without a refusal, that its refusals ended ("refusals_ended",
// and the key is forgotten). Bounded: at most `max_keys` (rule, key) pairs are tracked;
// a refusal of a pair that does not fit is counted in its rule's "other", which gets a
// line of its own in each interval's summary. While the table is full, a pair refused at
// most once in this interval and the last is given up for a new one (a look at a few
// pairs, not all: the refusal path stays cheap; the oldest of the least refused); so a flood of keys refused once each
// cannot hide a key that keeps being refused.
//
// Keys are logged by fingerprint ("key#" and 12 hex digits of their hash), addresses
// ("ip:...") as they are: a log is read by more people than the admin API, and an API
// key is a secret. `log_full_keys` logs API keys whole. GET /admin/top (behind the admin
// token) shows both.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/log_event.h"
#include "ratewin/limit.h"

namespace ratewin::server {

struct RefusalOptions {
  std::size_t max_keys = 1000;  // (rule, key) pairs tracked; 0: none (no log, no top)
  std::chrono::seconds interval{60};
  bool log_full_keys = false;
  // "refusing" lines per interval at most; the keys beyond are followed all the same, and
  // the interval's summary says how many started unlogged ("refusing_unlogged"). A flood
  // of new keys refused cannot flood the log.
  std::size_t max_start_lines = 100;
};

class Refusals {
 public:
  using Clock = std::chrono::steady_clock;

  // `log` may be empty: tracked for top() only.
  Refusals(RefusalOptions options, EventLog log);

  // `rule` (whose limit reads `limit`) refused `key`, for `endpoint` (may be empty),
  // which may retry after `retry_after_s`. Thread-safe.
  void refused(std::string_view rule, const Limit& limit, std::string_view key,
               std::string_view endpoint, std::int64_t retry_after_s, Clock::time_point now);
  // The end of an interval: the summary lines, and the pairs not refused in it forgotten.
  // Called every `interval` (by the server's control loop). Thread-safe.
  void roll(Clock::time_point now);

  struct KeyFigures {
    std::string key;
    std::string fingerprint;  // as the log names it
    std::string endpoint;     // of its last refusal
    std::uint64_t refusals = 0;     // since it started being refused
    std::uint64_t recent = 0;       // in this interval and the last
    double per_second = 0;          // `recent` over the time it covers
    double refused_for_s = 0;       // since its first refusal
  };
  struct RuleFigures {
    std::string rule;
    std::vector<KeyFigures> keys;  // most refused recently first
    std::uint64_t other_refusals = 0;  // of pairs not tracked, since the rule's first
    std::uint64_t other_recent = 0;
  };
  // Per rule refusing anything, the `n` keys most refused recently. Thread-safe.
  std::vector<RuleFigures> top(std::size_t n, Clock::time_point now) const;
  // The top's JSON object (GET /admin/top; the status page's "top").
  std::string top_json(std::size_t n, Clock::time_point now) const;

  const RefusalOptions& options() const noexcept { return options_; }
  // How a key is named in the log.
  std::string logged_key(std::string_view key) const;
  static std::string fingerprint(std::string_view key);

  static constexpr std::size_t kSampled = 8;  // pairs looked at for one to give up

 private:
  struct Entry {
    std::string endpoint;
    std::string limit;
    std::uint64_t total = 0;
    std::uint64_t current = 0;   // this interval
    std::uint64_t previous = 0;  // the last
    Clock::time_point first;
    std::uint64_t order = 0;  // when it was tracked (a sequence number)
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  struct Rule {
    std::unordered_map<std::string, Entry, Hash, std::equal_to<>> keys;
    std::uint64_t other_total = 0;
    std::uint64_t other_current = 0;
    std::uint64_t other_previous = 0;
  };
  // Of a few pairs (`rule`'s first), the one with the fewest refusals lately, the oldest
  // of those, is given up for a new one if it has at most one (the newest pairs have had
  // the least time to be refused again); false if none may go. Under mutex_.
  bool make_room(Rule& rule);
  void event(std::string_view name, std::string_view rule, std::string_view key,
             const Entry& e, std::initializer_list<LogField> more) const;

  RefusalOptions options_;
  EventLog log_;
  mutable std::mutex mutex_;
  std::map<std::string, Rule, std::less<>> rules_;
  std::size_t tracked_ = 0;
  std::uint64_t next_order_ = 0;
  std::size_t start_lines_ = 0;        // "refusing" lines in this interval
  std::uint64_t starts_unlogged_ = 0;  // starts beyond max_start_lines in this interval
  Clock::time_point interval_start_;   // of this interval
  Clock::time_point previous_start_;   // of the last
};

}  // namespace ratewin::server
