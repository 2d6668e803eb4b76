#include "ratewin/stats.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace ratewin::test {
namespace {

// Where a figure's field is in Stats, and its size and alignment.
struct Place {
  std::size_t offset, size, align;
};
Place place_of(const StatField& f) {
  const Stats s;
  const auto at = [&](const void* field) {
    return static_cast<std::size_t>(static_cast<const char*>(field) -
                                    reinterpret_cast<const char*>(&s));
  };
  if (f.count != nullptr) return {at(&(s.*f.count)), sizeof(std::uint64_t), alignof(std::uint64_t)};
  if (f.duration != nullptr) {
    return {at(&(s.*f.duration)), sizeof(std::chrono::nanoseconds),
            alignof(std::chrono::nanoseconds)};
  }
  return {at(&(s.*f.flag)), sizeof(bool), alignof(bool)};
}

bool metric_name(std::string_view name) {
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
         });
}

}  // namespace

TEST_CASE("kStatFields describes every field of Stats once, and names its samples well") {
  std::set<std::string_view> names;
  std::vector<Place> places;
  std::string_view family;
  std::set<std::string_view> families;
  for (const StatField& f : kStatFields) {
    CAPTURE(f.name);
    CHECK(names.insert(f.name).second);
    CHECK((f.count != nullptr) + (f.duration != nullptr) + (f.flag != nullptr) == 1);
    CHECK((f.duration != nullptr) == (f.unit == StatUnit::seconds));
    CHECK((f.flag != nullptr) == (f.unit == StatUnit::flag));
    CHECK_FALSE(f.help.empty());
    places.push_back(place_of(f));
    // Prometheus: a valid name, counters _total, durations _seconds, bytes _bytes; the
    // samples of a family one after another, the first with the family's help.
    CHECK(metric_name(f.metric));
    CHECK(f.metric.ends_with("_total") == (f.kind == StatKind::counter));
    if (f.unit == StatUnit::seconds) CHECK(f.metric.ends_with("_seconds"));
    if (f.unit == StatUnit::bytes) CHECK(f.metric.ends_with("_bytes"));
    if (f.metric != family) {
      CHECK(families.insert(f.metric).second);
      family = f.metric;
      if (!f.labels.empty()) CHECK_FALSE(f.metric_help.empty());
    } else {
      CHECK_FALSE(f.labels.empty());
      CHECK(f.metric_help.empty());
    }
  }
  // The fields, by place, tile Stats up to last_error (a text, not a figure): a field added
  // to Stats without its line in the table leaves a gap.
  std::sort(places.begin(), places.end(),
            [](const Place& a, const Place& b) { return a.offset < b.offset; });
  std::size_t end = 0;
  for (const Place& p : places) {
    const std::size_t aligned = (end + p.align - 1) / p.align * p.align;
    CHECK(p.offset == aligned);
    end = p.offset + p.size;
  }
  CHECK((end + alignof(std::string) - 1) / alignof(std::string) * alignof(std::string) ==
        offsetof(Stats, last_error));
}

TEST_CASE("a figure's number: counts, seconds, flags; a sample may differ") {
  Stats s;
  s.writes_ok = 7;
  s.write_p50 = std::chrono::milliseconds(1500);
  const auto field = [](std::string_view name) -> const StatField& {
    return *std::find_if(std::begin(kStatFields), std::end(kStatFields),
                         [&](const StatField& f) { return f.name == name; });
  };
  CHECK(field("writes_ok").number(s) == 7);
  CHECK(field("write_p50").number(s) == 1.5);
  CHECK(field("store").number(s) == 0);
  // The store is "up" without a store: nothing is degraded.
  CHECK(field("store_available").number(s) == 0);
  CHECK(field("store_available").sample_value(s) == 1);
  s.store = true;
  CHECK(field("store_available").sample_value(s) == 0);
  s.store_available = true;
  CHECK(field("store_available").sample_value(s) == 1);
}

}  // namespace ratewin::test
