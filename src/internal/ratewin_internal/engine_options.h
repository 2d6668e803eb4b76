// The engine's options described once, as kStatFields describes Stats: the names the
// enums are spelled by, and the range of every numeric option, for each surface that
// reads or checks them. The Engine's constructor checks Options against kOptionRanges
// (its messages are made here); the C ABI, the Python binding and ratewin-server take
// their defaults from ratewin::Options{} (never retyped), their ranges from
// kOptionRanges, and their enum names from the tables below. Header-only, so that the
// engine itself can use it. Part of the internal target ratewin::internal: not installed,
// no stability promise.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>
#include <cstdint>

#include "ratewin/engine.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace internal {

// An enum value and the one name every surface spells it by (a Python str argument, a
// server flag's value, a log line).
template <class E>
struct Named {
  std::string_view name;
  E value;
};

inline constexpr Named<FailurePolicy> kFailurePolicyNames[] = {
    {"local", FailurePolicy::local},
    {"open", FailurePolicy::open},
    {"closed", FailurePolicy::closed},
    {"partitioned", FailurePolicy::partitioned},
};
// Options::partitioned_unknown takes two of them.
inline constexpr Named<FailurePolicy> kPartitionedUnknownNames[] = {
    {"local", FailurePolicy::local},
    {"closed", FailurePolicy::closed},
};
inline constexpr Named<WriteMode> kWriteModeNames[] = {
    {"sync", WriteMode::sync},
    {"batched", WriteMode::batched},
};
inline constexpr Named<LogLevel> kLogLevelNames[] = {
    {"debug", LogLevel::debug},
    {"info", LogLevel::info},
    {"warning", LogLevel::warning},
    {"error", LogLevel::error},
};
inline constexpr Named<TlsVerify> kTlsVerifyNames[] = {
    {"full", TlsVerify::full},
    {"ca", TlsVerify::ca},
    {"none", TlsVerify::none},
};
// TlsOptions::min_version is text: these are the values it may hold.
inline constexpr std::string_view kTlsVersions[] = {"1.2", "1.3"};

template <class E>
constexpr std::optional<E> parse_name(std::span<const Named<E>> names, std::string_view text) {
  for (const Named<E>& n : names)
    if (n.name == text) return n.value;
  return std::nullopt;
}

// The value's name; empty for a value the table does not name.
template <class E>
constexpr std::string_view name_of(std::span<const Named<E>> names, E value) {
  for (const Named<E>& n : names)
    if (n.value == value) return n.name;
  return {};
}

constexpr std::string_view name_of(FailurePolicy p) {
  return name_of<FailurePolicy>(kFailurePolicyNames, p);
}
constexpr std::string_view name_of(WriteMode m) { return name_of<WriteMode>(kWriteModeNames, m); }
constexpr std::string_view name_of(LogLevel l) { return name_of<LogLevel>(kLogLevelNames, l); }
constexpr std::string_view name_of(TlsVerify v) { return name_of<TlsVerify>(kTlsVerifyNames, v); }

// The names for a message, each between `quote`s: "'full', 'ca' or 'none'" (last = " or "),
// or "'local', 'open', ..." (last = ", ").
inline std::string choices(std::span<const std::string_view> names, std::string_view quote = "",
                           std::string_view last = " or ") {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? last : ", ";
    out.append(quote).append(names[i]).append(quote);
  }
  return out;
}
template <class E>
std::string choices(std::span<const Named<E>> names, std::string_view quote = "",
                    std::string_view last = " or ") {
  std::vector<std::string_view> spelled;
  for (const Named<E>& n : names) spelled.push_back(n.name);
  return choices(std::span<const std::string_view>(spelled), quote, last);
}

// A numeric option's range: the values it may take, in its unit (milliseconds for a
// duration), and how a message says them.
struct OptionRange {
  std::string_view name;  // the C++ member, the Python argument and the C field's stem
  double (*get)(const Options&);  // its value, in its unit
  void (*set)(Options&, double);
  double min;
  double max;     // infinity: no upper bound
  bool zero_too;  // 0 is accepted too, below min (it means something: see `range`)
  std::string_view range;  // "<name> must be <range>"

  bool accepts(double v) const noexcept { return (zero_too && v == 0) || (v >= min && v <= max); }
  bool accepts_zero() const noexcept { return accepts(0); }
  std::string problem() const { return std::string(name) + " must be " + std::string(range); }
};

namespace options_detail {
constexpr double kDay = 24.0 * 3600 * 1000;  // ms
constexpr double kNone = std::numeric_limits<double>::infinity();

template <auto M>
using Member = std::remove_cvref_t<decltype(std::declval<Options&>().*M)>;

template <auto M>
constexpr double get(const Options& o) {
  if constexpr (std::is_same_v<Member<M>, std::chrono::milliseconds>) {
    return static_cast<double>((o.*M).count());
  } else {
    return static_cast<double>(o.*M);
  }
}
template <auto M>
constexpr void set(Options& o, double v) {
  if constexpr (std::is_same_v<Member<M>, std::chrono::milliseconds>) {
    o.*M = std::chrono::milliseconds(static_cast<std::int64_t>(v));
  } else {
    o.*M = static_cast<Member<M>>(v);
  }
}
template <auto M>
constexpr OptionRange range(std::string_view name, double min, double max, bool zero_too,
                            std::string_view text) {
  return {name, get<M>, set<M>, min, max, zero_too, text};
}
}  // namespace options_detail

// Every numeric option, in the order the constructor checks them (the first out of range
// is the one it names).
inline constexpr OptionRange kOptionRanges[] = {
    options_detail::range<&Options::max_limiters>("max_limiters", 1, options_detail::kNone,
                                                  false, "at least 1"),
    options_detail::range<&Options::max_memory>("max_memory", 16 * 1024, options_detail::kNone,
                                                false, "at least 16 KiB"),
    options_detail::range<&Options::connect_timeout>("connect_timeout", 1, options_detail::kDay,
                                                     false, "between 1 ms and 24 h"),
    options_detail::range<&Options::command_timeout>("command_timeout", 1, options_detail::kDay,
                                                     false, "between 1 ms and 24 h"),
    options_detail::range<&Options::max_connections>("max_connections", 1,
                                                     options_detail::kNone, false, "at least 1"),
    options_detail::range<&Options::sync_settle>("sync_settle", 0, options_detail::kDay, false,
                                                 "between 0 and 24 h"),
    options_detail::range<&Options::clock_sync_interval>(
        "clock_sync_interval", 0, options_detail::kDay, false,
        "between 0 (only on connecting) and 24 h"),
    options_detail::range<&Options::partition_share>("partition_share", 0.01, 1000, false,
                                                     "between 0.01 and 1000"),
    options_detail::range<&Options::flush_interval>(
        "flush_interval", 1, 1000, true, "0 (chosen per window) or between 1 ms and 1 s"),
};

// The range of the option named `name`. A name not in kOptionRanges is a programming
// error: std::logic_error (and no constant, in a constant expression).
constexpr const OptionRange& option_range(std::string_view name) {
  for (const OptionRange& r : kOptionRanges)
    if (r.name == name) return r;
  throw std::logic_error("no engine option named " + std::string(name));
}

// The first problem with `o`, as "<option> must be ...", or empty when every option is
// acceptable: the ranges above, then what is not a range.
inline std::string options_problem(const Options& o) {
  for (const OptionRange& r : kOptionRanges)
    if (!r.accepts(r.get(o))) return r.problem();
  if (o.key_prefix.find_first_of("{}") != std::string::npos)
    return "key_prefix must not contain '{' or '}'";
  if (o.redis.empty() && !(o.tls == TlsOptions{}))
    return "tls is set, but there is no Redis address (TLS is for a rediss address)";
  if (name_of<FailurePolicy>(kPartitionedUnknownNames, o.partitioned_unknown).empty())
    return "partitioned_unknown must be FailurePolicy::local or FailurePolicy::closed";
  if (name_of(o.write_mode).empty()) return "write_mode must be WriteMode::sync or WriteMode::batched";
  return {};
}

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
