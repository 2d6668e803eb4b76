// The reloader both of the server's reloads use (reloader.h): what it counts, what the
// watch skips, one reload at a time, and the metrics it writes. A test source stands in
// for the files; a reload held in its read waits on an event the test sets.
#include "rules/reloader.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/prometheus.h"
#include "ratewin/hash.h"

namespace ratewin::server {
namespace {

// A value whose version is the first word of its bytes ("v1 touched": v1's version).
struct Value {
  std::string name = "none";
  const std::string& version() const noexcept { return name; }
};

// What the reloader reads: bytes set by the test (those starting "bad" fail to parse), or
// a read error; how often each step ran, and what the hooks were told.
struct Source {
  std::mutex mutex;
  std::condition_variable changed;
  std::string bytes = "v1";
  std::string read_error;  // set: reads fail with it
  int reads = 0;
  int parses = 0;
  std::vector<std::string> log;
  // Set: a read waits, once in, until the test clears it.
  bool hold = false;
  int in_read = 0;  // reads in progress
  int most_in_read = 0;

  Reloader<Value>::Hooks hooks() {
    Reloader<Value>::Hooks h;
    h.read = [this] {
      std::unique_lock lock(mutex);
      ++reads;
      most_in_read = std::max(most_in_read, ++in_read);
      changed.notify_all();
      changed.wait(lock, [this] { return !hold; });
      --in_read;
      if (!read_error.empty()) throw RulesError("source", 0, 0, read_error);
      return Reloader<Value>::Input{hash(bytes), [this, text = bytes] {
                                      std::lock_guard parsing(mutex);
                                      ++parses;
                                      if (text.starts_with("bad"))
                                        throw RulesError("source", 1, 1, "cannot parse " + text);
                                      return Value{text.substr(0, text.find(' '))};
                                    }};
    };
    h.refused = [this](std::string_view why, const std::string& error, const Value& kept,
                       bool same_error) {
      std::lock_guard lock(mutex);
      log.push_back("refused (" + std::string(why) + "), keeping " + kept.version() + ": " +
                    error + (same_error ? " (again)" : ""));
    };
    h.changed = [this](std::string_view why, const Value& next) {
      std::lock_guard lock(mutex);
      log.push_back(next.version() + " (" + std::string(why) + ")");
    };
    return h;
  }
  void set(std::string text, std::string error = {}) {
    std::lock_guard lock(mutex);
    bytes = std::move(text);
    read_error = std::move(error);
  }
  // Waits until `n` reads have begun.
  void wait_reads(int n) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return reads >= n; });
  }
  void release() {
    std::lock_guard lock(mutex);
    hold = false;
    changed.notify_all();
  }
};

struct Counted {
  std::uint64_t ok = 0;
  std::uint64_t rejected = 0;
  bool failing = false;
  bool operator==(const Counted&) const = default;
};
Counted loads_of(const ReloadRecord& r) {
  const ReloadFigures f = r.figures();
  return Counted{f.ok, f.rejected, f.failing};
}

TEST_CASE("every good load is counted, the first and unchanged ones included; a new version "
          "is published") {
  Source s;
  Reloader<Value> r(s.hooks());
  CHECK(loads_of(r) == Counted{1, 0, false});
  CHECK(r.figures().loaded_ms > 0);
  CHECK(r.get()->version() == "v1");
  CHECK(s.parses == 1);
  Published<Value>::View view(r.published());
  CHECK(view.get().version() == "v1");

  CHECK(r.reload("again"));  // the same bytes
  s.set("v1 touched");       // other bytes, the same version
  CHECK(r.reload("touched"));
  CHECK(loads_of(r) == Counted{3, 0, false});
  CHECK(s.log.empty());  // nothing published
  CHECK(view.get().version() == "v1");
  CHECK(view.generation() == 0);

  s.set("v2");
  CHECK(r.reload("edit"));
  CHECK(loads_of(r) == Counted{4, 0, false});
  CHECK(r.get()->version() == "v2");
  CHECK(view.get().version() == "v2");
  CHECK(s.log == std::vector<std::string>{"v2 (edit)"});
}

TEST_CASE("every refusal is counted, a read error too; the last good value stays") {
  Source s;
  Reloader<Value> r(s.hooks());
  s.set("bad 1");
  CHECK_FALSE(r.reload("edit"));
  CHECK(loads_of(r) == Counted{1, 1, true});
  CHECK(r.last_error() == "source:1:1: cannot parse bad 1");
  CHECK(r.get()->version() == "v1");
  // Asked again: counted again, and told it is the same error.
  CHECK_FALSE(r.reload("SIGHUP"));
  s.set("bad 1", "gone");
  CHECK_FALSE(r.reload("SIGHUP"));
  CHECK(loads_of(r) == Counted{1, 3, true});
  CHECK(r.last_error() == "source: gone");
  CHECK(s.log == std::vector<std::string>{
                     "refused (edit), keeping v1: source:1:1: cannot parse bad 1",
                     "refused (SIGHUP), keeping v1: source:1:1: cannot parse bad 1 (again)",
                     "refused (SIGHUP), keeping v1: source: gone"});
  CHECK(s.parses == 3);  // the first load's, and the two bad bytes' (not the read error's)

  s.set("v2");
  CHECK(r.reload("fixed"));
  CHECK(loads_of(r) == Counted{2, 3, false});
  CHECK(r.last_error().empty());
  CHECK(r.get()->version() == "v2");
  // A refusal after a good load is not "the same error" as the one before it.
  s.set("bad 1");
  CHECK_FALSE(r.reload("edit"));
  CHECK(s.log.back() == "refused (edit), keeping v2: source:1:1: cannot parse bad 1");
}

TEST_CASE("the watch loads only bytes other than the last ones read, good or bad") {
  Source s;
  Reloader<Value> r(s.hooks());
  // The bytes of the first load: read, not loaded.
  CHECK(r.reload("file changed", ReloadCause::watch));
  CHECK(s.reads == 2);
  CHECK(s.parses == 1);
  CHECK(loads_of(r) == Counted{1, 0, false});

  // A bad edit is one load, however often the watch sees the folder after it.
  s.set("bad 1");
  CHECK_FALSE(r.reload("file changed", ReloadCause::watch));
  CHECK_FALSE(r.reload("file changed", ReloadCause::watch));
  CHECK(loads_of(r) == Counted{1, 1, true});
  CHECK(s.parses == 2);
  CHECK(s.log.size() == 1);
  // A request always loads.
  CHECK_FALSE(r.reload("SIGHUP"));
  CHECK(loads_of(r) == Counted{1, 2, true});

  // The same read error is no new load either, and is told apart from bytes.
  s.set("bad 1", "gone");
  CHECK_FALSE(r.reload("file changed", ReloadCause::watch));
  CHECK_FALSE(r.reload("file changed", ReloadCause::watch));
  CHECK(loads_of(r) == Counted{1, 3, true});
  s.set("bad 1");  // the bytes before the read error: new to the watch
  CHECK_FALSE(r.reload("file changed", ReloadCause::watch));
  CHECK(loads_of(r) == Counted{1, 4, true});

  s.set("v2");
  CHECK(r.reload("file changed", ReloadCause::watch));
  CHECK(r.reload("file changed", ReloadCause::watch));
  CHECK(loads_of(r) == Counted{2, 4, false});
  CHECK(s.parses == 5);
  CHECK(s.log.back() == "v2 (file changed)");
  // A request of the same bytes is a load (counted, no new version).
  CHECK(r.reload("SIGHUP"));
  CHECK(loads_of(r) == Counted{3, 4, false});
}

// Reaches the lock a reload holds through its read and parse.
struct Probe : Reloader<Value> {
  using Reloader::Reloader;
  bool locked() {
    if (!reloading_.try_lock()) return true;
    reloading_.unlock();
    return false;
  }
};

TEST_CASE("one reload at a time; reloading() while one runs, waits its turn or is queued") {
  Source s;
  Probe r(s.hooks());
  CHECK_FALSE(r.reloading());
  s.set("v2");
  {
    std::lock_guard lock(s.mutex);
    s.hold = true;
  }
  std::thread first([&] { CHECK(r.reload("first")); });
  s.wait_reads(2);  // the first reload is in its read, holding the lock
  CHECK(r.under_way() == 1);
  CHECK(r.reloading());
  CHECK(r.locked());
  std::thread second([&] { CHECK(r.reload("second")); });
  // The second is under way from its call: waiting its turn, it has not read.
  while (r.under_way() != 2) std::this_thread::yield();
  s.release();
  first.join();
  second.join();
  CHECK(s.reads == 3);
  CHECK(s.most_in_read == 1);
  CHECK(loads_of(r) == Counted{3, 0, false});
  CHECK(s.log == std::vector<std::string>{"v2 (first)"});
  CHECK_FALSE(r.reloading());
  CHECK_FALSE(r.locked());

  // A reload queued (the admin API's, before the reload thread takes it) is under way
  // until its outcome has been handed on.
  r.queued();
  CHECK(r.reloading());
  CHECK(r.reload("admin API"));
  CHECK(r.under_way() == 1);
  r.unqueued();
  CHECK_FALSE(r.reloading());
}

TEST_CASE("without anything to read: T(), counted once, reloads do nothing") {
  Reloader<Value> r(Reloader<Value>::Hooks{});
  CHECK(r.get()->version() == "none");
  CHECK(loads_of(r) == Counted{1, 0, false});
  CHECK(r.reload("SIGHUP"));
  CHECK(r.reload("file changed", ReloadCause::watch));
  CHECK(loads_of(r) == Counted{1, 0, false});
}

TEST_CASE("the first load's failure throws, and its bytes are the watch's last read") {
  Source s;
  s.set("bad 0");
  CHECK_THROWS_AS(Reloader<Value>(s.hooks()), RulesError);
  s.set("v1");
  Reloader<Value> r(s.hooks());
  CHECK(r.reload("file changed", ReloadCause::watch));
  CHECK(s.parses == 2);  // the failed first load's, and this one's first: not the watch's
}

TEST_CASE("both reloads' metrics come from one writer: names, label key and help as given") {
  const ReloadFigures figures{.ok = 3, .rejected = 2, .failing = true, .loaded_ms = 1'500};
  PrometheusText with_time;
  write_reload_metrics(with_time,
                       ReloadMetricNames{.loads = "a_reloads_total",
                                         .outcome_label = "result",
                                         .loads_help = "Loads.",
                                         .failing = "a_last_error",
                                         .failing_help = "Failing.",
                                         .loaded_at = "a_loaded_timestamp_seconds",
                                         .loaded_at_help = "When."},
                       figures);
  CHECK(with_time.take() ==
        "# HELP a_reloads_total Loads.\n# TYPE a_reloads_total counter\n"
        "a_reloads_total{result=\"ok\"} 3\na_reloads_total{result=\"rejected\"} 2\n"
        "# HELP a_last_error Failing.\n# TYPE a_last_error gauge\na_last_error 1\n"
        "# HELP a_loaded_timestamp_seconds When.\n# TYPE a_loaded_timestamp_seconds gauge\n"
        "a_loaded_timestamp_seconds 1.5\n");
  PrometheusText without_time;
  write_reload_metrics(without_time,
                       ReloadMetricNames{.loads = "b_reloads_total",
                                         .outcome_label = "outcome",
                                         .loads_help = "Loads.",
                                         .failing = "b_error",
                                         .failing_help = "Failing.",
                                         .loaded_at = {},
                                         .loaded_at_help = {}},
                       ReloadFigures{.ok = 1, .rejected = 0, .failing = false, .loaded_ms = 0});
  CHECK(without_time.take() ==
        "# HELP b_reloads_total Loads.\n# TYPE b_reloads_total counter\n"
        "b_reloads_total{outcome=\"ok\"} 1\nb_reloads_total{outcome=\"rejected\"} 0\n"
        "# HELP b_error Failing.\n# TYPE b_error gauge\nb_error 0\n");
}

}  // namespace
}  // namespace ratewin::server
