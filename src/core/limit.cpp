#include "ratewin/limit.h"

#include "core/mix.h"
#include "ratewin/hash.h"

#include <stdexcept>
#include <string>

namespace ratewin {
inline namespace v1 {
namespace {

std::string duration_text(std::int64_t ms) {
  if (ms <= 0) return std::to_string(ms) + "ms";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

constexpr const char* kAlgorithmNames[] = {"sliding_window", "strict_window", "fixed_window",
                                           "token_bucket", "sliding_log"};
constexpr const char* kModeNames[] = {"enforce", "shadow"};

// The name of an enum's value in its table of names, and back.
template <typename E, std::size_t N>
const char* name_in(const char* const (&names)[N], E value) noexcept {
  const auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : "unknown";
}
template <typename E, std::size_t N>
bool parse_in(const char* const (&names)[N], std::string_view name, E& out) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

constexpr std::int64_t kMaxResolutionNs = Limit::kMaxResolution.count() * 1'000'000;

std::int64_t emission_of(std::uint64_t max, std::chrono::milliseconds interval) noexcept {
  const auto ns = static_cast<std::uint64_t>(interval.count()) * 1'000'000;
  return static_cast<std::int64_t>((ns + max - 1) / max);
}

bool one_subinterval(Algorithm algorithm) noexcept {
  return algorithm == Algorithm::fixed_window || algorithm == Algorithm::token_bucket ||
         algorithm == Algorithm::sliding_log;
}

LimitIssue issue(LimitProblem problem, LimitField field, std::uint64_t bound) noexcept {
  return {problem, field, bound};
}

std::uint64_t ms_bound(std::chrono::milliseconds d) noexcept {
  return static_cast<std::uint64_t>(d.count());
}

// The resolution of a limit of the ring's algorithms that `spec` gives (its interval is
// valid), or the issue with it.
std::variant<std::chrono::milliseconds, LimitIssue> ring_resolution(const LimitSpec& spec) noexcept {
  const std::int64_t interval = spec.interval.count();
  if (spec.subintervals) {
    const std::uint64_t n = *spec.subintervals;
    if (n == 0) return issue(LimitProblem::resolution_not_positive, LimitField::subintervals, 1);
    if (n > Limit::kMaxSubintervals) {
      return issue(LimitProblem::too_many_subintervals, LimitField::subintervals,
                   Limit::kMaxSubintervals);
    }
    if (static_cast<std::uint64_t>(interval) % n != 0) {
      return issue(LimitProblem::resolution_does_not_divide, LimitField::subintervals,
                   static_cast<std::uint64_t>(interval));
    }
    const std::chrono::milliseconds resolution(interval / static_cast<std::int64_t>(n));
    if (resolution > Limit::kMaxResolution) {
      return issue(LimitProblem::resolution_too_long, LimitField::subintervals,
                   ms_bound(Limit::kMaxResolution));
    }
    return resolution;
  }
  if (!spec.resolution) {
    const std::chrono::milliseconds chosen = Limit::default_resolution(spec.interval);
    if (chosen > Limit::kMaxResolution) {
      return issue(LimitProblem::resolution_too_long, LimitField::interval,
                   ms_bound(Limit::kMaxResolution));
    }
    return chosen;
  }
  const std::int64_t r = spec.resolution->count();
  if (r <= 0) return issue(LimitProblem::resolution_not_positive, LimitField::resolution, 1);
  if (*spec.resolution > Limit::kMaxResolution) {
    return issue(LimitProblem::resolution_too_long, LimitField::resolution,
                 ms_bound(Limit::kMaxResolution));
  }
  if (interval % r != 0) {
    return issue(LimitProblem::resolution_does_not_divide, LimitField::resolution,
                 static_cast<std::uint64_t>(interval));
  }
  if (interval / r > Limit::kMaxSubintervals) {
    return issue(LimitProblem::too_many_subintervals, LimitField::resolution,
                 Limit::kMaxSubintervals);
  }
  return *spec.resolution;
}

// What is wrong with `spec`, first problem first; a problem of none when nothing is.
LimitIssue check(const LimitSpec& spec, std::chrono::milliseconds& resolution) noexcept {
  if (spec.max == 0) return issue(LimitProblem::max_zero, LimitField::max, Limit::kMaxCount);
  if (spec.max > Limit::kMaxCount)
    return issue(LimitProblem::max_too_large, LimitField::max, Limit::kMaxCount);
  if (spec.interval.count() <= 0)
    return issue(LimitProblem::interval_not_positive, LimitField::interval, 1);
  if (spec.interval > Limit::kMaxInterval) {
    return issue(LimitProblem::interval_too_long, LimitField::interval,
                 ms_bound(Limit::kMaxInterval));
  }
  if (spec.burst != 0 && spec.algorithm != Algorithm::token_bucket)
    return issue(LimitProblem::burst_not_bucket, LimitField::burst, 0);
  if (spec.resolution && spec.subintervals)
    return issue(LimitProblem::resolution_and_subintervals, LimitField::subintervals, 0);
  if (!one_subinterval(spec.algorithm)) {
    const auto ring = ring_resolution(spec);
    if (const LimitIssue* problem = std::get_if<LimitIssue>(&ring)) return *problem;
    resolution = std::get<std::chrono::milliseconds>(ring);
    return {};
  }
  // One subinterval, the whole interval: a fixed window's counter; a token bucket or a
  // log does not use it (so theirs may be longer than a ring's longest).
  if (spec.resolution && *spec.resolution != spec.interval) {
    return issue(LimitProblem::not_one_subinterval, LimitField::resolution,
                 ms_bound(spec.interval));
  }
  if (spec.subintervals && *spec.subintervals != 1)
    return issue(LimitProblem::not_one_subinterval, LimitField::subintervals, 1);
  resolution = spec.interval;
  switch (spec.algorithm) {
    case Algorithm::fixed_window:
      if (spec.interval > Limit::kMaxResolution) {
        return issue(LimitProblem::fixed_window_too_long, LimitField::interval,
                     ms_bound(Limit::kMaxResolution));
      }
      break;
    case Algorithm::token_bucket: {
      if (spec.burst > Limit::kMaxCount)
        return issue(LimitProblem::burst_too_large, LimitField::burst, Limit::kMaxCount);
      const std::uint64_t burst = spec.burst != 0 ? spec.burst : spec.max;
      if (emission_of(spec.max, spec.interval) > kMaxResolutionNs / static_cast<std::int64_t>(burst)) {
        return issue(LimitProblem::bucket_too_slow,
                     spec.burst != 0 ? LimitField::burst : LimitField::interval,
                     ms_bound(Limit::kMaxResolution));
      }
      break;
    }
    case Algorithm::sliding_log:
      if (spec.max > Limit::kMaxLogCount)
        return issue(LimitProblem::log_too_large, LimitField::max, Limit::kMaxLogCount);
      break;
    default:
      break;
  }
  return {};
}

std::string default_duration(std::chrono::milliseconds d) { return duration_text(d.count()); }
std::string default_algorithm(Algorithm a) { return algorithm_name(a); }

[[noreturn]] void refuse(const LimitIssue& problem, const LimitSpec& spec) {
  throw std::invalid_argument("ratewin::Limit: " + describe(problem, spec));
}

}  // namespace

const char* algorithm_name(Algorithm algorithm) noexcept {
  return name_in(kAlgorithmNames, algorithm);
}

bool parse_algorithm(std::string_view name, Algorithm& out) noexcept {
  return parse_in(kAlgorithmNames, name, out);
}

const char* mode_name(Mode mode) noexcept { return name_in(kModeNames, mode); }

bool parse_mode(std::string_view name, Mode& out) noexcept {
  return parse_in(kModeNames, name, out);
}

std::string describe(const LimitIssue& problem, const LimitSpec& spec, const LimitTerms& terms) {
  const auto duration = [&](std::chrono::milliseconds d) {
    return (terms.duration != nullptr ? terms.duration : default_duration)(d);
  };
  const auto algorithm = [&](Algorithm a) {
    return (terms.algorithm != nullptr ? terms.algorithm : default_algorithm)(a);
  };
  const auto field = [&](std::string_view name, const std::string& value) {
    return std::string(name) + std::string(terms.is) + value;
  };
  const auto number = [](std::uint64_t v) { return std::to_string(v); };
  const auto bound_ms = [&] {
    return duration(std::chrono::milliseconds(static_cast<std::int64_t>(problem.bound)));
  };
  const std::string max = field(terms.max, number(spec.max));
  const std::string interval = field(terms.interval, duration(spec.interval));
  const std::string burst = field(terms.burst, number(spec.burst));
  const std::string resolution =
      spec.resolution ? field(terms.resolution, duration(*spec.resolution)) : std::string();
  const std::string subintervals =
      spec.subintervals ? field(terms.subintervals, number(*spec.subintervals)) : std::string();
  // The resolution or subintervals given (one of them is, for the problems that ask).
  const std::string given = problem.field == LimitField::subintervals ? subintervals : resolution;
  switch (problem.problem) {
    case LimitProblem::none:
      return "no problem";
    case LimitProblem::max_zero:
    case LimitProblem::max_too_large:
      return std::string(terms.max) + " must be from 1 to " + number(problem.bound) + ", got " +
             number(spec.max) +
             (spec.max > static_cast<std::uint64_t>(INT64_MAX)
                  ? " (a negative number converted to unsigned?)"
                  : "");
    case LimitProblem::interval_not_positive:
      return std::string(terms.interval) + " must be positive, got " + duration(spec.interval);
    case LimitProblem::interval_too_long:
      return interval + " is longer than 366 days, the longest window";
    case LimitProblem::resolution_not_positive:
      return problem.field == LimitField::subintervals
                 ? std::string(terms.subintervals) + " must be at least 1, got 0"
                 : std::string(terms.resolution) + " must be positive, got " +
                       duration(spec.resolution.value_or(std::chrono::milliseconds(0)));
    case LimitProblem::resolution_too_long:
      if (problem.field == LimitField::interval) {
        return interval + " is longer than " + bound_ms() +
               " and does not divide into 2 to 10 equal whole milliseconds: give a " +
               std::string(terms.resolution) + " that divides it, at most " + bound_ms();
      }
      return given + " makes subintervals longer than the longest, " + bound_ms();
    case LimitProblem::resolution_does_not_divide:
      return problem.field == LimitField::subintervals
                 ? interval + " does not divide into " + number(spec.subintervals.value_or(0)) +
                       " subintervals of whole milliseconds"
                 : given + " does not divide " + interval +
                       ": the window must be a whole number of subintervals";
    case LimitProblem::too_many_subintervals:
      return problem.field == LimitField::subintervals
                 ? subintervals + " is more than " + number(problem.bound)
                 : interval + " / " + given + " = " +
                       number(static_cast<std::uint64_t>(spec.interval.count() /
                                                         spec.resolution->count())) +
                       " subintervals, more than " + number(problem.bound) +
                       ": choose a coarser " + std::string(terms.resolution);
    case LimitProblem::fixed_window_too_long:
      return interval + " is longer than " + bound_ms() + ", the longest for " +
             algorithm(Algorithm::fixed_window) + " (its one subinterval is the whole window)";
    case LimitProblem::not_one_subinterval:
      return algorithm(spec.algorithm) + " has one subinterval, the whole window (" + interval +
             "): " + given + " says otherwise; leave it out";
    case LimitProblem::resolution_and_subintervals:
      return "give " + std::string(terms.resolution) + " or " + std::string(terms.subintervals) +
             ", not both";
    case LimitProblem::burst_not_bucket:
      return std::string(terms.burst) + " applies to " + algorithm(Algorithm::token_bucket) +
             " only, not to " + algorithm(spec.algorithm) + ": leave it out";
    case LimitProblem::burst_too_large:
      return std::string(terms.burst) + " must be from 1 to " + number(problem.bound) +
             ", got " + number(spec.burst);
    case LimitProblem::bucket_too_slow:
      return algorithm(Algorithm::token_bucket) + " with " + max + " and " + interval +
             " takes longer than " + bound_ms() + " (about 49.7 days) to refill " +
             (spec.burst != 0 ? burst + " (" + std::string(terms.burst) + " x " +
                                    std::string(terms.interval) + " / " + std::string(terms.max) +
                                    ")"
                              : "its burst (max, when " + std::string(terms.burst) +
                                    " is not given): give a smaller " + std::string(terms.burst));
    case LimitProblem::log_too_large:
      return max + " is more than " + number(problem.bound) + " for " +
             algorithm(Algorithm::sliding_log) + " (every unit is an entry of its log)";
  }
  return "not a valid limit";
}

std::chrono::milliseconds Limit::default_resolution(std::chrono::milliseconds interval) noexcept {
  const std::int64_t ms = interval.count();
  if (ms <= 0) return interval;  // refused by from_spec, with its message
  for (std::int64_t n = 10; n > 1; --n) {
    if (ms % n == 0) return std::chrono::milliseconds(ms / n);
  }
  return interval;
}

std::variant<Limit, LimitIssue> Limit::from_spec(const LimitSpec& spec) noexcept {
  std::chrono::milliseconds resolution{0};
  if (const LimitIssue problem = check(spec, resolution)) return problem;
  Limit out;
  out.max_ = spec.max;
  out.resolution_ms_ = resolution.count();
  out.subintervals_ = static_cast<std::uint32_t>(spec.interval.count() / resolution.count());
  out.failure_policy_ = spec.failure_policy;
  out.algorithm_ = spec.algorithm;
  out.mode_ = spec.mode;
  out.burst_ = spec.burst == spec.max ? 0 : spec.burst;
  out.scope_ = spec.scope;
  return out;
}

LimitSpec Limit::spec() const noexcept {
  LimitSpec out;
  out.max = max_;
  out.interval = interval();
  if (!one_subinterval(algorithm_)) out.resolution = resolution();
  out.algorithm = algorithm_;
  out.burst = burst_;
  out.failure_policy = failure_policy_;
  out.mode = mode_;
  out.scope = scope_;
  return out;
}

namespace {

// from_spec, throwing what it refuses.
Limit made(const LimitSpec& spec) {
  auto made = Limit::from_spec(spec);
  if (const LimitIssue* problem = std::get_if<LimitIssue>(&made)) refuse(*problem, spec);
  return std::get<Limit>(made);
}

}  // namespace

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval,
             std::chrono::milliseconds resolution)
    : Limit(made({.max = max, .interval = interval, .resolution = resolution})) {}

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval)
    : Limit(made({.max = max, .interval = interval})) {}

std::uint64_t Limit::scope() const noexcept {
  if (scope_ != 0) return scope_;
  // A limit's own scope: its max, mixed (murmur3's fmix64) so that it looks like no
  // named scope's id. Never 0 (0 is a fixed point of the mix, and max is at least 1).
  // Other algorithms than the default mix in their number (and a token bucket its
  // burst), so that a limit's own scope is its own whatever its algorithm.
  const auto algorithm = static_cast<std::uint64_t>(algorithm_);
  const std::uint64_t own = detail::fmix64(max_ ^ 0x6f776e2073636f70ULL ^ (algorithm << 56));
  return burst_ == 0 ? own : detail::fmix64(own ^ burst_);  // "own scop"
}

std::int64_t Limit::emission_ns() const noexcept { return emission_of(max_, interval()); }

Limit Limit::with_max(std::uint64_t max) const {
  // Everything else as it is (the mode and the burst too), in the same scope.
  LimitSpec s = spec();
  s.max = max;
  s.scope = scope();
  return made(s);
}

Limit Limit::with_algorithm(Algorithm algorithm, std::uint64_t burst) const {
  LimitSpec s = spec();
  s.algorithm = algorithm;
  s.burst = burst;
  // (One subinterval for the algorithms that have one: the interval.)
  s.resolution.reset();
  if (!one_subinterval(algorithm)) s.resolution = resolution();
  return made(s);
}

Limit Limit::with_burst(std::uint64_t burst) const {
  LimitSpec s = spec();
  s.burst = burst;
  return made(s);
}

Limit Limit::with_scope(std::string_view name) const noexcept { return with_scope_id(hash(name)); }

std::string Limit::to_string() const {
  std::string out = std::to_string(max_) + "/" + duration_text(interval().count()) + "@" +
                    duration_text(resolution_ms_);
  if (algorithm_ != Algorithm::sliding_window) {
    out += ' ';
    out += algorithm_name(algorithm_);
  }
  if (burst_ != 0) out += " burst " + std::to_string(burst_);
  if (mode_ != Mode::enforce) {
    out += ' ';
    out += mode_name(mode_);
  }
  return out;
}

}  // namespace v1
}  // namespace ratewin
