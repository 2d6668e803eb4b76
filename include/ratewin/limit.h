// ratewin/limit.h: what a limit is.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ratewin {
inline namespace v1 {

// What a limit does while the shared store is unreachable (decisions are then marked
// Decision::degraded).
enum class FailurePolicy {
  local,   // keep enforcing with this process's own counts (the default)
  open,    // allow every request
  closed,  // reject every request (for login-like endpoints)
  // Split the limit among the nodes: enforce max x Options::partition_share / live nodes
  // with this process's own counts, where live nodes is the count of engines on the same
  // key prefix this engine last read from the store (Stats::live_nodes). An engine that
  // has never read the count decides as Options::partitioned_unknown says (local by
  // default), and logs it. See docs/operations.md.
  partitioned,
};

// Whether a limit's refusals take effect. A limit in shadow counts what it admits, in the
// store too, exactly as if it enforced, but never refuses: what it would have refused is
// allowed, uncounted, with Decision::would_reject set. Switching it to enforce
// (Limit::with_mode) keeps what it counted.
enum class Mode {
  enforce,  // refusals are refusals (the default)
  shadow,   // refusals are allowed and reported (Decision::would_reject)
};

// The mode's name as the bindings and the server's rules spell it ("enforce", "shadow").
const char* mode_name(Mode mode) noexcept;
// The mode of a name; false when there is none.
bool parse_mode(std::string_view name, Mode& out) noexcept;

// How a limit counts. The first three keep the same ring of subinterval counts, locally
// and in the shared store, and differ in how the subinterval that is sliding out of the
// window (the trailing one) counts; token_bucket keeps one time.
enum class Algorithm {
  // The approximate sliding window (the default): the trailing subinterval counts in
  // proportion to its overlap with the window. Rejects nothing an exact window would
  // admit under steady traffic, and may admit more than max in a sliding window after a
  // burst at a boundary.
  sliding_window,
  // The same ring, but the trailing subinterval counts in full until it leaves: never
  // more than max in any sliding window of `interval`, on one node or across nodes, at
  // the price of refusing up to one subinterval's worth too early.
  strict_window,
  // One counter per window of `interval`, aligned to multiples of it on the shared
  // clock (resolution = interval): never more than max per fixed window, and up to
  // 2 x max across a boundary.
  fixed_window,
  // A token bucket, as GCRA: it refills at max per interval, one unit every
  // interval / max, and holds at most burst (Limit::with_burst; max by default). Its
  // state is one theoretical arrival time, with no timer. In any span of time t it admits
  // at most burst + t x max / interval. The resolution is not used (it becomes the
  // interval).
  token_bucket,
  // Exact: a log of the expiry time of every unit admitted in the last `interval`
  // (a sorted set per resource in the shared store). Never more than max in any sliding
  // window of `interval`, on one node or across nodes, and nothing refused that an exact
  // window would admit (but a request the store itself refuses). Its max is at most
  // Limit::kMaxLogCount: every unit is an entry, 8 bytes per limiter here and one member
  // of the shared sorted set. The resolution is not used (it becomes the interval).
  sliding_log,
};

// The algorithm's name as the bindings and the server's rules spell it
// ("sliding_window", ...).
const char* algorithm_name(Algorithm algorithm) noexcept;
// The algorithm of a name; false when there is none.
bool parse_algorithm(std::string_view name, Algorithm& out) noexcept;

// Why a limit cannot be made (LimitIssue::problem).
enum class LimitProblem {
  none,
  max_zero,                     // max is 0
  max_too_large,                // max exceeds Limit::kMaxCount
  interval_not_positive,        // interval <= 0
  resolution_not_positive,      // resolution <= 0, or 0 subintervals
  interval_too_long,            // interval exceeds Limit::kMaxInterval
  resolution_too_long,          // the resolution exceeds Limit::kMaxResolution
  resolution_does_not_divide,   // interval is not a whole number of resolutions
  too_many_subintervals,        // interval / resolution exceeds Limit::kMaxSubintervals
  fixed_window_too_long,        // a fixed_window's interval exceeds Limit::kMaxResolution
  burst_too_large,              // a token_bucket's burst exceeds Limit::kMaxCount
  log_too_large,                // a sliding_log's max exceeds Limit::kMaxLogCount
  bucket_too_slow,              // a token_bucket's refill of its whole burst,
                                // burst x interval / max, exceeds Limit::kMaxResolution
  burst_not_bucket,             // a burst for an algorithm other than token_bucket
  not_one_subinterval,          // a resolution other than the interval (or subintervals
                                // other than 1) for a fixed_window, token_bucket or log
  resolution_and_subintervals,  // both a resolution and a number of subintervals
};

// The part of a LimitSpec that a LimitIssue is about.
enum class LimitField { max, interval, resolution, subintervals, burst };

// A limit as a configuration gives it, before it is checked: what Limit::from_spec makes a
// Limit of, or refuses with a LimitIssue. Every front end (C++, the C ABI, Python, the
// server's rules) fills one in from what its user wrote, so the rules live in one place.
struct LimitSpec {
  std::uint64_t max = 0;
  std::chrono::milliseconds interval{0};
  // The subinterval, or how many the interval holds (at most one of the two); neither:
  // Limit::default_resolution. A fixed_window, token_bucket or sliding_log has one
  // subinterval, the whole interval: only that may be given for them.
  std::optional<std::chrono::milliseconds> resolution{};
  std::optional<std::uint64_t> subintervals{};
  Algorithm algorithm = Algorithm::sliding_window;
  std::uint64_t burst = 0;  // a token_bucket's, the most admitted at once; 0: max
  FailurePolicy failure_policy = FailurePolicy::local;
  Mode mode = Mode::enforce;
  std::uint64_t scope = 0;  // a scope id (Limit::with_scope_id); 0: the limit's own
};

// Why a LimitSpec makes no limit: the first problem found, the field it is about, and
// the bound that field breaks (a count, or milliseconds for a duration):
//   max_zero, max_too_large       max; 1 to bound (kMaxCount)
//   log_too_large                 max; bound kMaxLogCount
//   interval_not_positive         interval; bound 1
//   interval_too_long             interval; bound kMaxInterval
//   fixed_window_too_long         interval; bound kMaxResolution
//   resolution_not_positive       resolution or subintervals; bound 1
//   resolution_too_long           resolution, subintervals, or interval (the resolution
//                                 chosen for it); bound kMaxResolution
//   resolution_does_not_divide    resolution or subintervals; bound the interval
//   too_many_subintervals         resolution or subintervals; bound kMaxSubintervals
//   not_one_subinterval           resolution (bound the interval) or subintervals (1)
//   resolution_and_subintervals   subintervals
//   burst_not_bucket              burst
//   burst_too_large               burst; bound kMaxCount
//   bucket_too_slow               burst, or interval when no burst is given; bound
//                                 kMaxResolution (the ms to refill the burst)
struct LimitIssue {
  LimitProblem problem = LimitProblem::none;
  LimitField field = LimitField::max;
  std::uint64_t bound = 0;
  explicit operator bool() const noexcept { return problem != LimitProblem::none; }
  // Whether it is a rule of the spec's algorithm (a configuration that gave the algorithm
  // by default may say where it came from).
  bool about_algorithm() const noexcept {
    return problem == LimitProblem::burst_not_bucket ||
           problem == LimitProblem::not_one_subinterval ||
           problem == LimitProblem::fixed_window_too_long ||
           problem == LimitProblem::bucket_too_slow || problem == LimitProblem::log_too_large;
  }
};

// How a front end names a LimitSpec's fields and writes their values, for describe().
struct LimitTerms {
  std::string_view max = "max";
  std::string_view interval = "interval";
  std::string_view resolution = "resolution";
  std::string_view subintervals = "subintervals";
  std::string_view burst = "burst";
  // Between a field's name and its value ("max 0", "max=0").
  std::string_view is = " ";
  // A duration ("60s", "1500ms" when null) and an algorithm ("token_bucket" when null).
  std::string (*duration)(std::chrono::milliseconds) = nullptr;
  std::string (*algorithm)(Algorithm) = nullptr;
};

// What is wrong, in `terms`: one sentence that names the field, its value and the bound it
// breaks (the C++ API's own wording with the default terms).
std::string describe(const LimitIssue& issue, const LimitSpec& spec, const LimitTerms& terms = {});

// A limit: at most `max` units in any sliding `interval`, tracked in subintervals of
// `resolution` (interval / resolution = N subintervals; more subintervals follow the
// sliding window more closely and cost 4 bytes each per limiter).
//
// Every Limit object is valid: the constructors check the invariants and throw
// std::invalid_argument naming the problem, so no bad limit reaches the engine.
// Limits are small values, cheap to copy, and safe to share between threads.
class Limit {
 public:
  // Largest `max` (and so the largest count a subinterval can hold).
  static constexpr std::uint64_t kMaxCount = 0xffffffffULL;
  // Largest max of a sliding_log (each unit in its window is an entry of its log).
  static constexpr std::uint64_t kMaxLogCount = 4096;
  // Largest number of subintervals, interval / resolution.
  static constexpr std::uint32_t kMaxSubintervals = 65535;
  // Longest interval accepted.
  static constexpr std::chrono::milliseconds kMaxInterval = std::chrono::hours(24 * 366);
  // Longest resolution accepted (2^32 - 1 ms, about 49.7 days).
  static constexpr std::chrono::milliseconds kMaxResolution =
      std::chrono::milliseconds(0xffffffffLL);

  // Throws std::invalid_argument when max is 0 or above kMaxCount, interval or
  // resolution is not positive, resolution does not divide interval, interval exceeds
  // kMaxInterval, resolution exceeds kMaxResolution, or interval / resolution exceeds
  // kMaxSubintervals (saying so as describe() does).
  Limit(std::uint64_t max, std::chrono::milliseconds interval,
        std::chrono::milliseconds resolution);

  // Resolution chosen for you: interval / 10 when that is a whole number of
  // milliseconds, otherwise interval / d for the largest d < 10 that divides it.
  Limit(std::uint64_t max, std::chrono::milliseconds interval);

  // The limit `spec` describes, or the first problem that keeps it from being one.
  static std::variant<Limit, LimitIssue> from_spec(const LimitSpec& spec) noexcept;
  // The limit written as `text` ("10/second", "100 per 5 minutes"; see parse_limits), or
  // std::invalid_argument saying what is wrong with it.
  static Limit parse(std::string_view text);
  // The limits written as `text` ("10/second; 1000/day"; see parse_limits), or
  // std::invalid_argument saying what is wrong with them.
  static std::vector<Limit> parse_many(std::string_view text);
  // The spec that makes this limit (from_spec(limit.spec()) is the limit), with its scope
  // id when it was given.
  LimitSpec spec() const noexcept;
  // The resolution Limit(max, interval) picks.
  static std::chrono::milliseconds default_resolution(std::chrono::milliseconds interval) noexcept;

  std::uint64_t max() const noexcept { return max_; }
  std::chrono::milliseconds interval() const noexcept {
    return std::chrono::milliseconds(resolution_ms_ * subintervals_);
  }
  std::chrono::milliseconds resolution() const noexcept {
    return std::chrono::milliseconds(resolution_ms_);
  }
  std::uint32_t subintervals() const noexcept { return subintervals_; }
  std::int64_t resolution_ns() const noexcept { return resolution_ms_ * 1'000'000; }

  FailurePolicy failure_policy() const noexcept { return failure_policy_; }
  Algorithm algorithm() const noexcept { return algorithm_; }
  Mode mode() const noexcept { return mode_; }
  // The most admitted at once: a token_bucket's burst; max for the other algorithms.
  std::uint64_t burst() const noexcept { return burst_ != 0 ? burst_ : max_; }
  // A token_bucket's refill: one unit every emission_ns() (interval / max, rounded up to
  // a whole nanosecond, so the rate errs low), and the whole burst in tolerance_ns()
  // (burst() x emission_ns(), at most kMaxResolution).
  std::int64_t emission_ns() const noexcept;
  std::int64_t tolerance_ns() const noexcept {
    return static_cast<std::int64_t>(burst()) * emission_ns();
  }

  // Which limits count together. Limits share counts on a resource only when they have
  // the same scope, interval and resolution. A limit's own scope follows from its max
  // and algorithm, so two different limits never share counts. with_scope() names a
  // scope, for limits meant to count together; with_max() keeps the scope it is called on.
  std::uint64_t scope() const noexcept;
  // True when the scope was given (with_scope, with_scope_id or with_max), not the
  // limit's own.
  bool has_scope() const noexcept { return scope_ != 0; }
  // The same limit, counted in the scope named `name` (its id is hash(name)): every
  // limit with that scope and this limit's interval and resolution shares its counts.
  Limit with_scope(std::string_view name) const noexcept;
  // The same with a scope id; 0 gives the limit its own scope back.
  Limit with_scope_id(std::uint64_t scope) const noexcept {
    Limit copy = *this;
    copy.scope_ = scope;
    return copy;
  }

  // The same window with another max, in the same scope: it shares counts with this
  // limit (an override that raises max keeps what was already counted).
  // For a token_bucket it keeps the burst (max, if it was max). Throws
  // std::invalid_argument as from_spec() would refuse the result (a bucket that would then
  // take longer than kMaxResolution to refill, a sliding_log's max above kMaxLogCount).
  Limit with_max(std::uint64_t max) const;
  // The same limit counted by `algorithm`. For fixed_window, token_bucket and sliding_log
  // the resolution becomes the interval (one subinterval: a fixed window's counter, and
  // not used by the other two). Limits of one scope and geometry share their counts
  // whatever their algorithms (each decides from them its own way), so a limit whose
  // algorithm changes under with_scope (as a server rule does on reload) keeps what was
  // counted. A token_bucket has room for `burst` at once (0: max; as with_burst). Throws
  // std::invalid_argument as from_spec() would refuse the result (a fixed window longer
  // than kMaxResolution, a bucket that would take longer than that to refill, a burst
  // for another algorithm, a sliding_log's max above kMaxLogCount).
  Limit with_algorithm(Algorithm algorithm, std::uint64_t burst = 0) const;
  // A token_bucket with room for `burst` at once (0: max). Throws std::invalid_argument
  // as from_spec() would refuse it (another algorithm, a burst above kMaxCount, a bucket
  // that would take longer than kMaxResolution to refill).
  Limit with_burst(std::uint64_t burst) const;
  // The same limit with another failure policy.
  Limit with_failure_policy(FailurePolicy policy) const noexcept {
    Limit copy = *this;
    copy.failure_policy_ = policy;
    return copy;
  }

  // The same limit in another mode. It counts in the same scope (the mode is not part of
  // a limit's own scope), so a limit switched from shadow to enforce keeps its counts.
  Limit with_mode(Mode mode) const noexcept {
    Limit copy = *this;
    copy.mode_ = mode;
    return copy;
  }

  // "100/60s@5s" style text, for logs and error messages, followed by the algorithm
  // when it is not the default ("100/60s@60s fixed_window"), and a token_bucket's burst
  // when it is not max ("100/1m@1m token_bucket burst 20"), and "shadow" for a limit in
  // shadow ("100/1m@6s shadow").
  std::string to_string() const;

  // Equal limits: the same max, window, algorithm, burst, failure policy, mode and scope.
  friend bool operator==(const Limit& a, const Limit& b) noexcept {
    return a.max_ == b.max_ && a.resolution_ms_ == b.resolution_ms_ &&
           a.subintervals_ == b.subintervals_ && a.failure_policy_ == b.failure_policy_ &&
           a.algorithm_ == b.algorithm_ && a.mode_ == b.mode_ && a.burst() == b.burst() &&
           a.scope() == b.scope();
  }

 private:
  Limit() = default;  // (from_spec fills it in)

  std::uint64_t max_ = 0;
  std::int64_t resolution_ms_ = 0;
  std::uint32_t subintervals_ = 0;
  FailurePolicy failure_policy_ = FailurePolicy::local;
  Algorithm algorithm_ = Algorithm::sliding_window;
  Mode mode_ = Mode::enforce;
  std::uint64_t burst_ = 0;  // a token_bucket's; 0: max
  std::uint64_t scope_ = 0;  // 0: the limit's own (see scope())
};

// Limits written as text, in the grammar of the `limits` package that flask-limiter and
// slowapi use, read alike by every front end (C++, the C ABI, Python, the server's rules):
//   "10/second"   "100 per 5 minutes"   "5/Minute"   "10/second; 1000/day"
// One limit is COUNT ("/" | "per") [AMOUNT] UNIT. COUNT and AMOUNT are whole numbers
// (AMOUNT is 1 when left out); UNIT is second, minute, hour, day, month (30 days) or year
// (365 days), singular or plural, in any case; spaces may stand between the parts ("per"
// is a word of its own). The window is AMOUNT UNITs; several limits are separated by ';',
// ',' or '|'. What is wrong is said in one sentence that quotes the text (as Python's
// repr does), the same in every front end, which puts its own name before it.
//
// One limit's spec: `base` with max and interval read from `text` (its other fields, the
// algorithm, failure policy, mode, resolution and scope, kept), not yet checked by
// Limit::from_spec; or what keeps `text` from being one (its grammar, its unit, a count of
// 0 or above Limit::kMaxCount, a window of 0 or longer than Limit::kMaxInterval).
std::variant<LimitSpec, std::string> read_limit(std::string_view text, const LimitSpec& base = {});
// One limit (no separators), made from read_limit's spec and checked as from_spec checks
// it (its problems said in the text's terms, count and window); or what is wrong.
std::variant<Limit, std::string> parse_limit(std::string_view text, const LimitSpec& base = {});
// One limit or several separated by ';', ',' or '|', each as parse_limit makes it; or what
// is wrong (no limit at all, an empty one between separators, or a part's problem).
std::variant<std::vector<Limit>, std::string> parse_limits(std::string_view text,
                                                           const LimitSpec& base = {});

}  // namespace v1
}  // namespace ratewin
