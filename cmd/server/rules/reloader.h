// reloader.h: a value read from files and loaded again while the server runs (the rules,
// the --rls-config folder), one reload at a time: the watch's loads of unchanged bytes
// skipped, the outcome kept (counts, the last error, when it last loaded), the value
// published when its version changed; and its metrics, written alike for every such value.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "common/published.h"
#include "rules/rules.h"  // RulesError

namespace ratewin::server {

class PrometheusText;

// What asked for a reload. The watch (a change anywhere in the watched folder, where a
// symlink may be swapped) loads only bytes other than the last ones read, good or bad:
// files beside the ones read, and a bad edit seen again, are not new loads (neither
// counted nor logged). SIGHUP and the admin API always load.
enum class ReloadCause { watch, request };

// A reloaded value's loads, as its metrics show them.
struct ReloadFigures {
  // Good loads: the first (at start) and those of unchanged bytes included.
  std::uint64_t ok = 0;
  std::uint64_t rejected = 0;  // refused loads (the last good value stayed)
  bool failing = false;        // the last load was refused
  std::int64_t loaded_ms = 0;  // the last good load's time (Unix ms)
};

// The metric names of one reloaded value (as dashboards and alerts know them) and their
// help texts.
struct ReloadMetricNames {
  std::string_view loads;          // counter family: one sample per outcome, ok and rejected
  std::string_view outcome_label;  // the outcome's label key
  std::string_view loads_help;
  std::string_view failing;  // gauge: 1 while the last load was refused
  std::string_view failing_help;
  std::string_view loaded_at = {};  // gauge: the last good load's time in seconds; none if empty
  std::string_view loaded_at_help = {};
};

// The reload metrics of one value: both reloaded values' come from here.
void write_reload_metrics(PrometheusText& out, const ReloadMetricNames& names,
                          const ReloadFigures& figures);

// A reloaded value's bookkeeping, whatever the value (Reloader<T> below): reloads one at a
// time, those under way, the bytes last read, the outcome. Thread-safe but for the
// protected part, which is Reloader's.
class ReloadRecord {
 public:
  // Reloads under way: running, waiting for the one running, or queued().
  int under_way() const noexcept { return under_way_.load(std::memory_order_acquire); }
  // A reload is under way, or a reload asked for waits its turn.
  bool reloading() const noexcept { return under_way() != 0; }
  // A reload asked for and queued (an admin reload waiting for the reload thread) is under
  // way from queued() until the matching unqueued(), after its outcome was recorded.
  void queued() noexcept { under_way_.fetch_add(1, std::memory_order_relaxed); }
  void unqueued() noexcept { under_way_.fetch_sub(1, std::memory_order_release); }
  // The last load's error, empty if it succeeded.
  std::string last_error() const;
  ReloadFigures figures() const;

 protected:
  ReloadRecord() = default;
  ~ReloadRecord() = default;
  ReloadRecord(const ReloadRecord&) = delete;
  ReloadRecord& operator=(const ReloadRecord&) = delete;

  // Counted under way while it lives.
  class UnderWay {
   public:
    explicit UnderWay(ReloadRecord& record) : record_(record) { record_.queued(); }
    ~UnderWay() { record_.unqueued(); }
    UnderWay(const UnderWay&) = delete;
    UnderWay& operator=(const UnderWay&) = delete;

   private:
    ReloadRecord& record_;
  };

  // Whether a load of bytes that tell apart as `fingerprint` (or of a read that failed
  // with `read_error`, told apart from any bytes) goes ahead: always for a request, and
  // for the watch only when they differ from the last ones read. Records them. Under
  // reloading_.
  bool goes_ahead(ReloadCause cause, std::uint64_t fingerprint, const std::string& read_error);
  // The outcome, under outcome_: a good load (counted, its time kept, the error cleared),
  // or a refused one (counted, its error kept; true when the load before failed with the
  // same error).
  void loaded();
  bool refused(const std::string& error);

  std::mutex reloading_;  // held by the reload under way, through its read and parse
  // Only while an outcome is recorded, so that figures() never waits on a parse.
  mutable std::mutex outcome_;

 private:
  std::atomic<int> under_way_{0};
  std::uint64_t last_read_ = 0;  // the fingerprint last read; under reloading_
  std::string last_error_;
  std::uint64_t ok_ = 0;
  std::uint64_t rejected_ = 0;
  std::int64_t loaded_ms_ = 0;
};

// A value of type T (its version() tells versions apart), read and parsed by its hooks and
// published: Service's rules and RateLimitService's configuration. The first load is the
// constructor's; reload() loads again.
template <class T>
class Reloader : public ReloadRecord {
 public:
  // A load's input, read: what tells its bytes apart (hash(bytes)), and their parse
  // (throws RulesError: the load is refused with its message).
  struct Input {
    std::uint64_t fingerprint = 0;
    std::function<T()> parse;
  };
  struct Hooks {
    // Reads a load's input; throws RulesError when it cannot (a refused load too). Empty:
    // there is nothing to read (no file given): the value is T(), reload() does nothing.
    std::function<Input()> read;
    // A load refused, once counted: what asked for it, the error, the value that stays
    // in force, and whether the load before failed with the same error. Not called for
    // the first load (which throws). May be empty, as may `changed`.
    std::function<void(std::string_view why, const std::string& error, const T& kept,
                       bool same_error)>
        refused;
    // A good load of another version, just before it is published.
    std::function<void(std::string_view why, const T& next)> changed;
  };

  // Loads the value (throws RulesError if it fails; nothing is counted then), counted as
  // a good load.
  explicit Reloader(Hooks hooks)
      : hooks_(std::move(hooks)), value_(std::make_shared<const T>(first_load())) {}

  // Reads the value again, after any reload under way. Good: counted, and published if
  // its version differs from the one in force (true). Refused: counted, the error kept
  // (last_error()) and given to the refused hook, the last good value stays (false). A
  // watch's load of the bytes last read is no load: nothing happens (true when the last
  // load was good).
  bool reload(std::string_view why, ReloadCause cause = ReloadCause::request) {
    if (!hooks_.read) return true;
    const UnderWay until_recorded(*this);  // (reloading())
    std::lock_guard one_at_a_time(reloading_);
    Input input;
    std::string error;
    try {
      input = hooks_.read();
    } catch (const RulesError& e) {
      error = e.what();
    }
    if (!goes_ahead(cause, input.fingerprint, error)) return last_error().empty();
    std::shared_ptr<const T> next;
    if (error.empty()) {
      try {
        next = std::make_shared<const T>(input.parse());
      } catch (const RulesError& e) {
        error = e.what();
      }
    }
    std::lock_guard lock(outcome_);
    if (next == nullptr) {
      const bool same_error = refused(error);
      if (hooks_.refused) hooks_.refused(why, error, *value_.get(), same_error);
      return false;
    }
    loaded();
    if (next->version() == value_.get()->version()) return true;  // nothing new to publish
    if (hooks_.changed) hooks_.changed(why, *next);
    value_.publish(std::move(next));
    return true;
  }

  std::shared_ptr<const T> get() const { return value_.get(); }
  // What readers view (Published::View).
  const Published<T>& published() const noexcept { return value_; }

 private:
  T first_load() {
    if (!hooks_.read) {
      std::lock_guard lock(outcome_);
      loaded();
      return T();
    }
    Input input = hooks_.read();
    goes_ahead(ReloadCause::request, input.fingerprint, {});
    T value = input.parse();
    std::lock_guard lock(outcome_);
    loaded();
    return value;
  }

  Hooks hooks_;
  Published<T> value_;
};

}  // namespace ratewin::server
