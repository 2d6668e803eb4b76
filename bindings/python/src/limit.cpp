#include <pybind11/operators.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "bindings.h"

namespace ratewin::python {
namespace {

FailurePolicy to_policy(py::handle value) {
  if (py::isinstance<FailurePolicy>(value)) return value.cast<FailurePolicy>();
  if (PyUnicode_Check(value.ptr()) != 0) {
    const std::string text = to_utf8(value, "on_failure");
    if (text == "local") return FailurePolicy::local;
    if (text == "open") return FailurePolicy::open;
    if (text == "closed") return FailurePolicy::closed;
    throw py::value_error("on_failure must be 'local', 'open' or 'closed', not '" + text + "'");
  }
  throw py::type_error("on_failure must be a FailurePolicy or one of 'local', 'open', 'closed'");
}

// An algorithm's name (a str, or a ratewin.Algorithm, which is one) as the Algorithm.
Algorithm to_algorithm(py::handle value) {
  const std::string text = to_utf8(value, "algorithm");
  Algorithm algorithm{};
  if (!parse_algorithm(text, algorithm)) {
    throw py::value_error(
        "algorithm must be one of sliding_window, strict_window, fixed_window, got " +
        py::repr(py::str(text)).cast<std::string>());
  }
  return algorithm;
}

const char* policy_name(FailurePolicy p) {
  switch (p) {
    case FailurePolicy::open:
      return "open";
    case FailurePolicy::closed:
      return "closed";
    case FailurePolicy::local:
      break;
  }
  return "local";
}

// The names of the scopes given in this process, for Limit.scope and repr (a Limit holds
// only the id). Bounded: past that many, new names are not recorded (they show as ids).
class ScopeNames {
 public:
  static ScopeNames& instance() {
    static ScopeNames* names = new ScopeNames();  // never destroyed: used at exit too
    return *names;
  }
  struct Name {
    std::string text;  // the scope's name, or the max of the limit whose own scope it is
    bool derived;      // the own scope of another limit (Limit.with_max)
  };
  void record(std::uint64_t id, std::string text, bool derived) {
    std::lock_guard lock(mutex_);
    if (names_.size() < kMax) names_.try_emplace(id, Name{std::move(text), derived});
  }
  std::optional<Name> find(std::uint64_t id) const {
    std::lock_guard lock(mutex_);
    const auto it = names_.find(id);
    if (it == names_.end()) return std::nullopt;
    return it->second;
  }

 private:
  static constexpr std::size_t kMax = 10'000;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Name> names_;
};

Limit with_scope_name(const Limit& limit, py::handle scope) {
  if (scope.is_none()) return limit;
  const std::string name = to_utf8(scope, "scope");
  if (name.empty()) throw py::value_error("scope must not be empty");
  ScopeNames::instance().record(hash(name), name, false);
  return limit.with_scope(name);
}

// A limit's scope as Python shows it: None for its own, the name if known, else the id.
py::object scope_object(const Limit& l) {
  if (!l.has_scope()) return py::none();
  if (std::optional<ScopeNames::Name> name = ScopeNames::instance().find(l.scope())) {
    if (!name->derived) return py::str(name->text);
  }
  return py::int_(l.scope());
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return py::repr(py::float_(static_cast<double>(ms.count()) / 1000.0)).cast<std::string>();
}

// Raises ValueError for what Limit's constructor and with_algorithm would refuse, in
// Python's terms (the arguments' names, seconds). For a fixed window, `resolution` is the
// one chosen for per (its own, the whole window, comes with with_algorithm).
void check_limit(std::uint64_t max, std::chrono::milliseconds per,
                 std::chrono::milliseconds resolution, Algorithm algorithm) {
  const auto s = [](std::chrono::milliseconds ms) { return seconds_text(ms) + " s"; };
  const bool fixed = algorithm == Algorithm::fixed_window;
  switch (Limit::problem(max, per, resolution, algorithm)) {
    case LimitProblem::none:
      return;
    case LimitProblem::resolution_too_long:
      if (!fixed) {
        throw py::value_error("Limit: resolution=" + s(resolution) +
                              " is longer than the longest, " + s(Limit::kMaxResolution));
      }
      // (A fixed window's resolution was chosen for per: per itself is too long.)
      [[fallthrough]];
    case LimitProblem::fixed_window_too_long:
      throw py::value_error("Limit: per=" + s(per) + " is longer than the longest fixed_window, " +
                            s(Limit::kMaxResolution) +
                            " (its one subinterval is the whole window)");
    case LimitProblem::interval_too_long:
      throw py::value_error("Limit: per=" + s(per) + " is longer than the longest window, 366 days");
    case LimitProblem::resolution_does_not_divide:
      throw py::value_error("Limit: resolution=" + s(resolution) + " does not divide per=" +
                            s(per) + ": the window must be a whole number of subintervals");
    case LimitProblem::too_many_subintervals:
      throw py::value_error("Limit: per / resolution = " +
                            std::to_string(per.count() / resolution.count()) +
                            " subintervals, more than " +
                            std::to_string(Limit::kMaxSubintervals) +
                            ": choose a coarser resolution");
    default:  // (max and the durations were checked as they were read)
      throw py::value_error("Limit: not a valid limit");
  }
}

std::string limit_repr(const Limit& l) {
  std::optional<ScopeNames::Name> name;
  if (l.has_scope()) name = ScopeNames::instance().find(l.scope());
  // In the own scope of a limit of another max: how this one was made from it.
  const bool derived = name && name->derived;
  std::string text = "Limit(" + (derived ? name->text : std::to_string(l.max())) +
                     ", per=" + seconds_text(l.interval()) +
                     ", resolution=" + seconds_text(l.resolution());
  if (l.failure_policy() != FailurePolicy::local) {
    text += std::string(", on_failure='") + policy_name(l.failure_policy()) + "'";
  }
  if (l.has_scope() && !derived) text += ", scope=" + py::repr(scope_object(l)).cast<std::string>();
  if (l.algorithm() != Algorithm::sliding_window) {
    text += std::string(", algorithm='") + algorithm_name(l.algorithm()) + "'";
  }
  text += ")";
  if (derived) text += ".with_max(" + std::to_string(l.max()) + ")";
  return text;
}

}  // namespace

void init_limit(py::module_& m) {
  py::enum_<FailurePolicy>(m, "FailurePolicy",
                           "What a limit does while the shared store (Redis) is unreachable; "
                           "decisions are then marked degraded.")
      .value("LOCAL", FailurePolicy::local, "Keep enforcing with this process's own counts.")
      .value("OPEN", FailurePolicy::open, "Allow every request.")
      .value("CLOSED", FailurePolicy::closed, "Reject every request (for login-like limits).");

  py::class_<Limit>(m, "Limit",
                    "At most `max` units in any sliding window of `per` seconds, tracked in "
                    "subintervals of `resolution` seconds (per / resolution of them). Limits "
                    "are immutable values, safe to share between threads.")
      .def(py::init([](IntArg max, SecondsArg per, OptionalSecondsArg resolution,
                       PolicyArg on_failure, OptionalStrArg scope, StrArg algorithm) {
             const std::uint64_t count = to_u64(max, "max", 1, Limit::kMaxCount);
             const auto interval = to_milliseconds(per, "per");
             const auto given = resolution.is_none() ? std::optional<std::chrono::milliseconds>()
                                                     : to_milliseconds(resolution, "resolution");
             const Algorithm how = to_algorithm(algorithm);
             const bool fixed = how == Algorithm::fixed_window;
             // A fixed window's one subinterval is the window: a resolution that says
             // otherwise is refused rather than ignored.
             if (fixed && given && *given != interval) {
               throw py::value_error("Limit: a fixed_window's resolution is its window, per=" +
                                     seconds_text(interval) + " s, not resolution=" +
                                     seconds_text(*given) + " s: leave resolution out");
             }
             const auto step = given && !fixed ? *given : Limit::default_resolution(interval);
             check_limit(count, interval, step, how);
             return with_scope_name(Limit(count, interval, step)
                                        .with_algorithm(how)
                                        .with_failure_policy(to_policy(on_failure)),
                                    scope);
           }),
           py::arg("max"), py::arg("per"), py::arg("resolution") = py::none(),
           py::arg("on_failure") = "local", py::kw_only(), py::arg("scope") = py::none(),
           py::arg("algorithm") = "sliding_window",
           "Limit(100, per=60) allows 100 units a minute. `per` and `resolution` are seconds "
           "(int, float or datetime.timedelta, whole milliseconds); resolution must divide "
           "per and defaults to per / 10 (or the nearest coarser divisor). `on_failure` is a "
           "FailurePolicy or 'local', 'open', 'closed'. Two different limits never share counts "
           "on a resource; limits given the same `scope` name (and the same per and resolution) "
           "do. `algorithm` (a str, or a ratewin.Algorithm) says how the limit counts: "
           "'sliding_window' (the default) weighs the subinterval leaving the window by its "
           "overlap; 'strict_window' counts it in full until it has left, so that no sliding "
           "window of per seconds ever holds more than max; 'fixed_window' counts windows of "
           "per seconds aligned on the clock (its resolution is per; up to 2 x max across a "
           "boundary). Raises ValueError for a bad limit.")
      .def_property_readonly("max", &Limit::max, "Units allowed per window.")
      .def_property_readonly(
          "per", [](const Limit& l) { return static_cast<double>(l.interval().count()) / 1000; },
          "The window, in seconds.")
      .def_property_readonly(
          "resolution",
          [](const Limit& l) { return static_cast<double>(l.resolution().count()) / 1000; },
          "The subinterval, in seconds.")
      .def_property_readonly("subintervals", &Limit::subintervals,
                             "per / resolution: subintervals in the window.")
      .def_property_readonly("on_failure", &Limit::failure_policy,
                             "The FailurePolicy applied while Redis is unreachable.")
      .def_property_readonly(
          "algorithm", [](const Limit& l) { return algorithm_name(l.algorithm()); },
          "How the limit counts: 'sliding_window', 'strict_window' or 'fixed_window'.")
      .def_property_readonly("scope", &scope_object,
                             "The scope name given (or its id), None for the limit's own: "
                             "limits share counts only within one scope.")
      .def(
          "with_max",
          [](const Limit& l, IntArg max) {
            const Limit raised = l.with_max(to_u64(max, "max", 1, Limit::kMaxCount));
            if (!l.has_scope()) {
              ScopeNames::instance().record(l.scope(), std::to_string(l.max()), true);
            }
            return raised;
          },
          py::arg("max"),
          "The same window with another max, in the same scope: it shares counts with this "
          "limit (an override that raises max keeps what was counted).")
      .def(
          "with_scope", [](const Limit& l, OptionalStrArg scope) { return with_scope_name(l, scope); },
          py::arg("scope"),
          "The same limit in the scope named `scope`: every limit of that scope and window "
          "shares its counts.")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__",
           [](const Limit& l) {
             return py::hash(py::make_tuple(l.max(), l.interval().count(), l.resolution().count(),
                                            static_cast<int>(l.failure_policy()),
                                            static_cast<int>(l.algorithm()), l.scope()));
           })
      .def("__repr__", &limit_repr);
}

}  // namespace ratewin::python
