#include "ratewin/limit.h"

#include "core/mix.h"
#include "ratewin/hash.h"

#include <stdexcept>
#include <string>

namespace ratewin {
inline namespace v1 {
namespace {

std::string duration_text(std::int64_t ms) {
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("ratewin::Limit: " + what);
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

// A token bucket's own problems (max and interval are valid).
LimitProblem bucket_problem(std::uint64_t max, std::chrono::milliseconds interval,
                            std::uint64_t burst) noexcept {
  if (burst > Limit::kMaxCount) return LimitProblem::burst_too_large;
  const std::int64_t emission = emission_of(max, interval);
  const std::uint64_t b = burst != 0 ? burst : max;
  if (emission > kMaxResolutionNs / static_cast<std::int64_t>(b))
    return LimitProblem::bucket_too_slow;
  return LimitProblem::none;
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

std::chrono::milliseconds Limit::default_resolution(std::chrono::milliseconds interval) noexcept {
  const std::int64_t ms = interval.count();
  if (ms <= 0) return interval;  // refused by the main constructor, with its message
  for (std::int64_t n = 10; n > 1; --n) {
    if (ms % n == 0) return std::chrono::milliseconds(ms / n);
  }
  return interval;
}

LimitProblem Limit::problem(std::uint64_t max, std::chrono::milliseconds interval,
                            std::chrono::milliseconds resolution) noexcept {
  if (max == 0) return LimitProblem::max_zero;
  if (max > kMaxCount) return LimitProblem::max_too_large;
  if (interval.count() <= 0) return LimitProblem::interval_not_positive;
  if (resolution.count() <= 0) return LimitProblem::resolution_not_positive;
  if (interval > kMaxInterval) return LimitProblem::interval_too_long;
  if (resolution > kMaxResolution) return LimitProblem::resolution_too_long;
  if (interval.count() % resolution.count() != 0) return LimitProblem::resolution_does_not_divide;
  if (interval.count() / resolution.count() > kMaxSubintervals)
    return LimitProblem::too_many_subintervals;
  return LimitProblem::none;
}

LimitProblem Limit::problem(std::uint64_t max, std::chrono::milliseconds interval,
                            std::chrono::milliseconds resolution, Algorithm algorithm,
                            std::uint64_t burst) noexcept {
  const LimitProblem found = problem(max, interval, resolution);
  if (found != LimitProblem::none) return found;
  if (algorithm == Algorithm::fixed_window && interval > kMaxResolution)
    return LimitProblem::fixed_window_too_long;
  if (algorithm == Algorithm::token_bucket) return bucket_problem(max, interval, burst);
  if (algorithm == Algorithm::sliding_log && max > kMaxLogCount) return LimitProblem::log_too_large;
  return LimitProblem::none;
}

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval,
             std::chrono::milliseconds resolution)
    : max_(max), resolution_ms_(resolution.count()), subintervals_(0) {
  switch (problem(max, interval, resolution)) {
    case LimitProblem::none:
      break;
    case LimitProblem::max_zero:
      invalid("max must be at least 1");
    case LimitProblem::max_too_large:
      invalid("max " + std::to_string(max) + " exceeds " + std::to_string(kMaxCount) +
              (max > static_cast<std::uint64_t>(INT64_MAX)
                   ? " (a negative number converted to std::uint64_t?)"
                   : ""));
    case LimitProblem::interval_not_positive:
      invalid("interval must be positive, got " + std::to_string(interval.count()) + "ms");
    case LimitProblem::resolution_not_positive:
      invalid("resolution must be positive, got " + std::to_string(resolution.count()) + "ms");
    case LimitProblem::interval_too_long:
      invalid("interval " + duration_text(interval.count()) + " exceeds 366 days");
    case LimitProblem::resolution_too_long:
      invalid("resolution " + duration_text(resolution.count()) + " exceeds 4294967295ms");
    case LimitProblem::resolution_does_not_divide:
      invalid("resolution " + std::to_string(resolution.count()) + "ms does not divide interval " +
              std::to_string(interval.count()) + "ms");
    case LimitProblem::too_many_subintervals:
      invalid("interval / resolution = " + std::to_string(interval.count() / resolution.count()) +
              " subintervals, more than " + std::to_string(kMaxSubintervals));
    case LimitProblem::fixed_window_too_long:
    case LimitProblem::burst_too_large:
    case LimitProblem::bucket_too_slow:
    case LimitProblem::log_too_large:
      break;  // not problems of this constructor's arguments
  }
  subintervals_ = static_cast<std::uint32_t>(interval.count() / resolution.count());
}

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval)
    : Limit(max, interval, default_resolution(interval)) {}

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

namespace {

// Throws what bucket_problem() found.
void check_bucket(std::uint64_t max, std::chrono::milliseconds interval, std::uint64_t burst) {
  switch (bucket_problem(max, interval, burst)) {
    case LimitProblem::burst_too_large:
      invalid("burst " + std::to_string(burst) + " exceeds " + std::to_string(Limit::kMaxCount));
    case LimitProblem::bucket_too_slow:
      invalid("a token_bucket of " + std::to_string(max) + " per " +
              duration_text(interval.count()) + " takes longer than 4294967295ms to refill " +
              std::to_string(burst != 0 ? burst : max) + " (burst x interval / max)");
    default:
      break;
  }
}

void check_log(std::uint64_t max) {
  if (max > Limit::kMaxLogCount)
    invalid("a sliding_log's max " + std::to_string(max) + " exceeds " +
            std::to_string(Limit::kMaxLogCount) + " (every unit is an entry of its log)");
}

}  // namespace

Limit Limit::with_max(std::uint64_t max) const {
  // Everything else as it is (the mode too), max checked as the constructor checks it.
  Limit copy = *this;
  copy.max_ = Limit(max, interval(), resolution()).max_;
  copy.scope_ = scope();
  if (algorithm_ == Algorithm::token_bucket) check_bucket(max, interval(), burst_);
  if (algorithm_ == Algorithm::sliding_log) check_log(max);
  return copy;
}

Limit Limit::with_algorithm(Algorithm algorithm, std::uint64_t burst) const {
  if (burst != 0 && algorithm != Algorithm::token_bucket)
    invalid(std::string("burst applies to a token_bucket, not a ") + algorithm_name(algorithm));
  Limit copy = *this;
  copy.algorithm_ = algorithm;
  copy.burst_ = burst == max_ ? 0 : burst;
  const bool one_subinterval = algorithm == Algorithm::fixed_window ||
                               algorithm == Algorithm::token_bucket ||
                               algorithm == Algorithm::sliding_log;
  if (one_subinterval && subintervals_ != 1) {
    if (algorithm == Algorithm::fixed_window && interval() > kMaxResolution)
      invalid("a fixed_window's interval " + duration_text(interval().count()) +
              " exceeds its longest, 4294967295ms (its one subinterval is the whole interval)");
    // (A token bucket's or a log's resolution is not used: one over kMaxResolution,
    // which its interval may be, is left as it was.)
    if (interval() <= kMaxResolution) {
      copy.resolution_ms_ = interval().count();
      copy.subintervals_ = 1;
    }
  }
  if (algorithm == Algorithm::token_bucket) check_bucket(max_, interval(), burst);
  if (algorithm == Algorithm::sliding_log) check_log(max_);
  return copy;
}

Limit Limit::with_burst(std::uint64_t burst) const {
  if (algorithm_ != Algorithm::token_bucket)
    invalid(std::string("burst applies to a token_bucket, not a ") + algorithm_name(algorithm_));
  check_bucket(max_, interval(), burst);
  Limit copy = *this;
  copy.burst_ = burst == max_ ? 0 : burst;
  return copy;
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
