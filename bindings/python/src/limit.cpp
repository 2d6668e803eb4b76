#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <variant>

#include "bindings.h"

namespace ratewin::python {

FailurePolicy to_policy(py::handle value, const char* what) {
  if (py::isinstance<FailurePolicy>(value)) return value.cast<FailurePolicy>();
  const auto names = std::span<const internal::Named<FailurePolicy>>(internal::kFailurePolicyNames);
  if (PyUnicode_Check(value.ptr()) != 0) return to_named(value, what, names);
  throw py::type_error(std::string(what) + " must be a FailurePolicy or one of " +
                       internal::choices(names, "'", ", "));
}

namespace {

// An algorithm's name (a str, or a ratewin.Algorithm, which is one) as the Algorithm.
Algorithm to_algorithm(py::handle value) {
  const std::string text = to_utf8(value, "algorithm");
  Algorithm algorithm{};
  if (!parse_algorithm(text, algorithm)) {
    throw py::value_error(
        "algorithm must be one of sliding_window, strict_window, fixed_window, token_bucket, "
        "sliding_log, got " +
        py::repr(py::str(text)).cast<std::string>());
  }
  return algorithm;
}

// A mode's name (a str, or a ratewin.Mode, which is one) as the Mode.
Mode to_mode(py::handle value) {
  const std::string text = to_utf8(value, "mode");
  Mode mode{};
  if (!parse_mode(text, mode)) {
    throw py::value_error("mode must be 'enforce' or 'shadow', got " +
                          py::repr(py::str(text)).cast<std::string>());
  }
  return mode;
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
    // That limit's token_bucket burst when it is not its max (0 otherwise): its own scope
    // follows from it, and Limit.with_max keeps it.
    std::uint64_t burst = 0;
  };
  void record(std::uint64_t id, std::string text, bool derived, std::uint64_t burst = 0) {
    std::lock_guard lock(mutex_);
    if (names_.size() < kMax) names_.try_emplace(id, Name{std::move(text), derived, burst});
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

// The limit `spec` describes, or ValueError saying what is wrong in Python's terms (the
// arguments' names, seconds), after `where` ("Limit", "Limit.with_max").
Limit made(const LimitSpec& spec, const char* where) {
  auto made = Limit::from_spec(spec);
  if (const LimitIssue* issue = std::get_if<LimitIssue>(&made)) {
    LimitTerms terms;
    terms.interval = "per";
    terms.is = "=";
    terms.duration = [](std::chrono::milliseconds ms) { return seconds_text(ms) + " s"; };
    terms.algorithm = [](Algorithm a) { return std::string("algorithm='") + algorithm_name(a) + "'"; };
    throw py::value_error(std::string(where) + ": " + describe(*issue, spec, terms));
  }
  return std::get<Limit>(made);
}

std::string limit_repr(const Limit& l) {
  std::optional<ScopeNames::Name> name;
  if (l.has_scope()) name = ScopeNames::instance().find(l.scope());
  // In the own scope of a limit of another max: how this one was made from it.
  const bool derived = name && name->derived;
  std::string text = "Limit(" + (derived ? name->text : std::to_string(l.max())) +
                     ", per=" + seconds_text(l.interval());
  // (A token bucket or a log has no resolution: it is left out, as it must be given.)
  if (l.algorithm() != Algorithm::token_bucket && l.algorithm() != Algorithm::sliding_log)
    text += ", resolution=" + seconds_text(l.resolution());
  if (l.failure_policy() != FailurePolicy::local) {
    text += std::string(", on_failure='") + std::string(internal::name_of(l.failure_policy())) + "'";
  }
  if (l.has_scope() && !derived) text += ", scope=" + py::repr(scope_object(l)).cast<std::string>();
  if (l.algorithm() != Algorithm::sliding_window) {
    text += std::string(", algorithm='") + algorithm_name(l.algorithm()) + "'";
  }
  // A token bucket's burst when it is not max (for a limit made by with_max, when it was
  // not the max of the limit it was made from).
  const std::uint64_t burst = derived ? name->burst : l.burst() != l.max() ? l.burst() : 0;
  if (l.algorithm() == Algorithm::token_bucket && burst != 0) {
    text += ", burst=" + std::to_string(burst);
  }
  if (l.mode() != Mode::enforce) text += std::string(", mode='") + mode_name(l.mode()) + "'";
  text += ")";
  if (derived) text += ".with_max(" + std::to_string(l.max()) + ")";
  return text;
}

// The limits `text` names (several only if `many`), each `base` with the text's max and
// interval, or ValueError saying what is wrong after `where`.
std::vector<Limit> read_text(const std::string& text, bool many, const LimitSpec& base,
                             const std::string& where) {
  if (many) {
    auto read = parse_limits(text, base);
    if (std::string* error = std::get_if<std::string>(&read))
      throw py::value_error(where + ": " + *error);
    return std::get<std::vector<Limit>>(std::move(read));
  }
  auto read = parse_limit(text, base);
  if (std::string* error = std::get_if<std::string>(&read)) throw py::value_error(where + ": " + *error);
  return {std::get<Limit>(read)};
}

// The limits a limit string names, with the default settings, for the engine's methods:
// remembered, so that a string passed on every call is read once. Called with the GIL
// held, which guards the table; bounded (emptied when full).
const std::vector<Limit>& text_limits(py::handle text, const char* what) {
  static auto* seen = new std::unordered_map<std::string, std::vector<Limit>>();
  std::string key = to_utf8(text, what);
  if (const auto it = seen->find(key); it != seen->end()) return it->second;
  std::vector<Limit> limits = read_text(key, true, LimitSpec{}, what);
  if (seen->size() >= 1024) seen->clear();
  return seen->emplace(std::move(key), std::move(limits)).first->second;
}

}  // namespace

Limit to_limit(py::handle value, const char* what) {
  if (py::isinstance<Limit>(value)) return value.cast<Limit>();
  if (PyUnicode_Check(value.ptr()) == 0) {
    throw py::type_error(std::string(what) +
                         " must be a ratewin.Limit or a limit string such as '10/second', not " +
                         type_name(value));
  }
  const std::vector<Limit>& limits = text_limits(value, what);
  if (limits.size() != 1) {
    throw py::value_error(std::string(what) + ": " +
                          py::repr(value).cast<std::string>() + " names " +
                          std::to_string(limits.size()) +
                          " limits; this call takes one (try_acquire and try_acquire_all take several)");
  }
  return limits.front();
}

std::vector<Limit> to_limits(py::handle value, const char* what) {
  if (py::isinstance<Limit>(value)) return {value.cast<Limit>()};
  if (PyUnicode_Check(value.ptr()) != 0) return text_limits(value, what);
  if (!py::isinstance<py::iterable>(value) || PyBytes_Check(value.ptr()) != 0) {
    throw py::type_error(std::string(what) +
                         " must be a ratewin.Limit, a limit string such as '10/second; "
                         "1000/day', or an iterable of them, not " +
                         type_name(value));
  }
  std::vector<Limit> out;
  for (const py::handle item : py::iter(value)) {
    if (py::isinstance<Limit>(item)) {
      out.push_back(item.cast<Limit>());
    } else if (PyUnicode_Check(item.ptr()) != 0) {
      const std::vector<Limit>& named = text_limits(item, what);
      out.insert(out.end(), named.begin(), named.end());
    } else {
      throw py::type_error(std::string(what) +
                           " must hold ratewin.Limit objects or limit strings, not " +
                           type_name(item));
    }
  }
  if (out.empty()) throw py::value_error(std::string(what) + " must not be empty");
  return out;
}

void init_limit(py::module_& m) {
  py::enum_<FailurePolicy>(m, "FailurePolicy",
                           "What a limit does while the shared store (Redis) is unreachable; "
                           "decisions are then marked degraded.")
      .value("LOCAL", FailurePolicy::local, "Keep enforcing with this process's own counts.")
      .value("OPEN", FailurePolicy::open, "Allow every request.")
      .value("CLOSED", FailurePolicy::closed, "Reject every request (for login-like limits).")
      .value("PARTITIONED", FailurePolicy::partitioned,
             "Split the limit among the engines on the same key prefix: each admits max x "
             "partition_share / live engines with its own counts (the live count read from "
             "Redis before the outage; Engine(partitioned_unknown=...) says what happens "
             "before it was ever read).");

  py::class_<Limit>(m, "Limit",
                    "At most `max` units in any sliding window of `per` seconds, tracked in "
                    "subintervals of `resolution` seconds (per / resolution of them). Limits "
                    "are immutable values, safe to share between threads.")
      .def(py::init([](IntArg max, SecondsArg per, OptionalSecondsArg resolution,
                       PolicyArg on_failure, OptionalStrArg scope, StrArg algorithm,
                       OptionalIntArg burst, StrArg mode) {
             LimitSpec spec;
             spec.max = to_u64(max, "max", 1, UINT64_MAX);
             spec.interval = to_milliseconds(per, "per");
             if (!resolution.is_none()) spec.resolution = to_milliseconds(resolution, "resolution");
             spec.algorithm = to_algorithm(algorithm);
             // (None: max; 0 is not a burst.)
             if (!burst.is_none()) spec.burst = to_u64(burst, "burst", 1, UINT64_MAX);
             spec.failure_policy = to_policy(on_failure, "on_failure");
             spec.mode = to_mode(mode);
             return with_scope_name(made(spec, "Limit"), scope);
           }),
           py::arg("max"), py::arg("per"), py::arg("resolution") = py::none(),
           py::arg("on_failure") = "local", py::kw_only(), py::arg("scope") = py::none(),
           py::arg("algorithm") = "sliding_window", py::arg("burst") = py::none(),
           py::arg("mode") = "enforce",
           "Limit(100, per=60) allows 100 units a minute. `per` and `resolution` are seconds "
           "(int, float or datetime.timedelta, whole milliseconds); resolution must divide "
           "per and defaults to per / 10 (or the nearest coarser divisor). `on_failure` is a "
           "FailurePolicy or 'local', 'open', 'closed', 'partitioned'. Two different limits never share counts "
           "on a resource; limits given the same `scope` name (and the same per and resolution) "
           "do. `algorithm` (a str, or a ratewin.Algorithm) says how the limit counts: "
           "'sliding_window' (the default) weighs the subinterval leaving the window by its "
           "overlap; 'strict_window' counts it in full until it has left, so that no sliding "
           "window of per seconds ever holds more than max; 'fixed_window' counts windows of "
           "per seconds aligned on the clock (its resolution is per; up to 2 x max across a "
           "boundary); 'token_bucket' refills at max per `per` seconds, one unit every per / "
           "max, and holds `burst` units (an int; None, the default, is max), so a full bucket "
           "admits burst at once and then one unit every per / max (its decisions' limit is "
           "the burst; burst is for token_bucket only); 'sliding_log' is exact: a log of the "
           "units admitted in the last per seconds (max at most 4096). `mode` (a str, or a "
           "ratewin.Mode) is 'enforce' (the default) or 'shadow': a limit in shadow decides "
           "and counts as if it enforced, but never refuses; what it would have refused is "
           "allowed, uncounted, with Decision.would_reject set. Raises ValueError for a bad "
           "limit.")
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
          "How the limit counts: 'sliding_window', 'strict_window', 'fixed_window', "
          "'token_bucket' or 'sliding_log'.")
      .def_property_readonly(
          "mode", [](const Limit& l) { return mode_name(l.mode()); },
          "'enforce', or 'shadow': refusals are allowed and reported (Decision.would_reject).")
      .def_property_readonly("burst", &Limit::burst,
                             "The most admitted at once: a token_bucket's burst (max unless "
                             "given), max for the other algorithms.")
      .def_property_readonly("scope", &scope_object,
                             "The scope name given (or its id), None for the limit's own: "
                             "limits share counts only within one scope.")
      .def(
          "with_max",
          [](const Limit& l, IntArg max) {
            LimitSpec spec = l.spec();
            spec.max = to_u64(max, "max", 1, UINT64_MAX);
            spec.scope = l.scope();
            const Limit raised = made(spec, "Limit.with_max");
            if (!l.has_scope()) {
              // (A limit of its own scope was made by Limit(): its burst is 0, max, unless
              // it differs from max.)
              ScopeNames::instance().record(l.scope(), std::to_string(l.max()), true,
                                            l.burst() != l.max() ? l.burst() : 0);
            }
            return raised;
          },
          py::arg("max"),
          "The same window with another max, in the same scope: it shares counts with this "
          "limit (an override that raises max keeps what was counted). A token_bucket keeps "
          "its burst (max, if it was max); ValueError when it would then take too long to "
          "refill.")
      .def(
          "with_mode", [](const Limit& l, StrArg mode) { return l.with_mode(to_mode(mode)); },
          py::arg("mode"),
          "The same limit in another mode ('enforce' or 'shadow'), counting in the same scope: "
          "a limit switched from shadow to enforce keeps what it counted.")
      .def(
          "with_scope",
          [](const Limit& l, OptionalStrArg scope) { return with_scope_name(l, scope); },
          py::arg("scope"),
          "The same limit in the scope named `scope`: every limit of that scope and window "
          "shares its counts.")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__",
           [](const Limit& l) {
             return py::hash(py::make_tuple(l.max(), l.interval().count(), l.resolution().count(),
                                            static_cast<int>(l.failure_policy()),
                                            static_cast<int>(l.algorithm()), l.burst(), l.scope(),
                                            static_cast<int>(l.mode())));
           })
      .def("__repr__", &limit_repr);

  m.def(
      "parse",
      [](py::handle text, PolicyArg on_failure, OptionalStrArg scope) {
        if (PyUnicode_Check(text.ptr()) == 0)
          throw py::type_error("ratewin.parse: text must be a str, not " + type_name(text));
        LimitSpec base;
        base.failure_policy = to_policy(on_failure, "on_failure");
        const Limit limit =
            read_text(to_utf8(text, "text"), false, base, "ratewin.parse").front();
        return with_scope_name(limit, scope);
      },
      py::arg("text").noconvert(), py::kw_only(), py::arg("on_failure") = "local",
      py::arg("scope") = py::none(),
      "One limit from text such as '10/second', '5/Minute' or '100 per 5 minutes': COUNT "
      "('/' or 'per') [AMOUNT] UNIT, COUNT and AMOUNT whole numbers (AMOUNT 1 when left out), "
      "UNIT second, minute, hour, day, month (30 days) or year (365 days), singular or "
      "plural, in any case. The grammar and the messages are those of the C++ API, the C "
      "ABI (ratewin_limit_parse) and the server's rules. `on_failure` and `scope` are as for "
      "Limit. Raises ValueError naming what is wrong, TypeError if text is not a str.");
  m.def(
      "parse_many",
      [](py::handle text, PolicyArg on_failure) {
        if (PyUnicode_Check(text.ptr()) == 0)
          throw py::type_error("ratewin.parse_many: text must be a str, not " + type_name(text));
        LimitSpec base;
        base.failure_policy = to_policy(on_failure, "on_failure");
        return read_text(to_utf8(text, "text"), true, base, "ratewin.parse_many");
      },
      py::arg("text").noconvert(), py::kw_only(), py::arg("on_failure") = "local",
      "Several limits separated by ';', ',' or '|': '10/second; 1000/day' (each as parse "
      "reads it). Raises ValueError naming the part that is wrong, or if there is none.");
  m.def(
      "_limits", [](LimitsArg value) { return to_limits(value, "limits"); }, py::arg("limits"),
      "The limits an engine method taking several accepts, as a list of Limit.");
}

}  // namespace ratewin::python
