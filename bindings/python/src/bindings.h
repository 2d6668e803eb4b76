// Shared by the files of the _ratewin module: one init function per class, and the
// conversions every function uses.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ratewin/ratewin.h"
#include "ratewin_internal/engine_options.h"

namespace ratewin::python {

namespace py = pybind11;

void init_errors(py::module_& m);
void init_clock(py::module_& m);
void init_limit(py::module_& m);
void init_decision(py::module_& m);
void init_engine(py::module_& m);
void init_stats(py::module_& m);

// Engine.try_acquire_all's answer: one Decision per limit (in a refused request, each
// limit's own answer, nothing counted: see Engine::try_acquire_all), and which one
// describes the outcome.
struct Decisions {
  std::vector<Decision> decisions;
  std::optional<std::size_t> refused;  // the limit that refused, if one did
  // The limit whose decision describes the outcome: the refusing one, or when all
  // admitted, the one with the fewest units left (of those not in shadow that would have
  // refused, when there are any).
  std::size_t shown_index() const;
  const Decision& shown() const { return decisions[shown_index()]; }
};

// Seconds (an int, a float or a datetime.timedelta) as whole milliseconds. TypeError for
// other types; ValueError when not finite, negative (or zero, unless allow_zero), or not
// a whole number of milliseconds. `what` names the argument in messages.
std::chrono::milliseconds to_milliseconds(py::handle seconds, const char* what,
                                          bool allow_zero = false);
// Seconds (an int, a float or a datetime.timedelta) as nanoseconds, rounded to the
// nearest; the same TypeError and ValueError rules, for the manual clock.
std::chrono::nanoseconds to_nanoseconds(py::handle seconds, const char* what,
                                        bool allow_zero = false);
// A duration as float seconds.
double to_seconds(std::chrono::nanoseconds d) noexcept;
// An int within [min, max] as an unsigned 64-bit value: TypeError if not an int (bools
// are refused), ValueError outside the range.
std::uint64_t to_u64(py::handle value, const char* what, std::uint64_t min, std::uint64_t max);
// A str as UTF-8: TypeError for other types, ValueError if it cannot be encoded.
// The name of value's type, for a TypeError's message.
std::string type_name(py::handle value);
std::string to_utf8(py::handle text, const char* what);
// A file system path, a str or an os.PathLike (pathlib.Path) naming one, as UTF-8:
// TypeError for other types (bytes paths too).
std::string to_path(py::handle path, const char* what);
// A bool: TypeError for anything else (0, None, "yes").
bool to_bool(py::handle value, const char* what);
// A number (an int or a float; bools are refused) as a double: TypeError otherwise.
double to_double(py::handle value, const char* what);
// A FailurePolicy, or its name ('local', 'open', 'closed', 'partitioned').
FailurePolicy to_policy(py::handle value, const char* what);
// A str naming one of `names` (engine_options.h) as its value: TypeError for another type,
// ValueError listing the names for another str.
template <class E>
E to_named(py::handle value, const char* what, std::span<const internal::Named<E>> names) {
  const std::string text = to_utf8(value, what);
  if (const auto named = internal::parse_name(names, text)) return *named;
  throw py::value_error(std::string(what) + " must be " + internal::choices(names, "'") +
                        ", not '" + text + "'");
}
// A resource: a str (hashed as UTF-8), bytes (hashed as they are) or an int id.
std::uint64_t to_resource(py::handle resource);
// A Limit, or a limit string naming one ("10/second"; see ratewin::parse_limit): TypeError
// for other types, ValueError for a string that is not exactly one limit. `what` names the
// argument in messages.
Limit to_limit(py::handle value, const char* what);
// The limits of an argument that takes several: a Limit, a limit string naming one or more
// ("10/second; 1000/day"), or an iterable of Limits and limit strings; TypeError for what
// is none of these, ValueError for a string that names no limit, or nothing at all.
std::vector<Limit> to_limits(py::handle value, const char* what);

// Arguments taken as any Python object and checked by the conversions above (with
// messages in Python's terms), named in signatures (help(), the stubs' check) by the
// types they accept rather than as "handle".
#define RATEWIN_PYTHON_ARG(Name)                          \
  struct Name : py::handle {                              \
    Name() = default;                                     \
    explicit Name(py::handle h) : py::handle(h) {}        \
  }
RATEWIN_PYTHON_ARG(IntArg);
RATEWIN_PYTHON_ARG(OptionalIntArg);
RATEWIN_PYTHON_ARG(SecondsArg);
RATEWIN_PYTHON_ARG(OptionalSecondsArg);
RATEWIN_PYTHON_ARG(ResourceArg);
RATEWIN_PYTHON_ARG(StrArg);
RATEWIN_PYTHON_ARG(OptionalStrArg);
RATEWIN_PYTHON_ARG(OptionalPathArg);
RATEWIN_PYTHON_ARG(BoolArg);
RATEWIN_PYTHON_ARG(FloatArg);
RATEWIN_PYTHON_ARG(PolicyArg);
RATEWIN_PYTHON_ARG(LimitArg);
RATEWIN_PYTHON_ARG(LimitsArg);
RATEWIN_PYTHON_ARG(OptionalClockArg);
RATEWIN_PYTHON_ARG(OptionalLoggerArg);
#undef RATEWIN_PYTHON_ARG

// The exception types of the module (set by init_errors).
extern PyObject* closed_error;

}  // namespace ratewin::python

namespace pybind11::detail {
#define RATEWIN_PYTHON_ARG_CASTER(Name, Text)                                               \
  template <>                                                                               \
  struct type_caster<ratewin::python::Name> {                                               \
    PYBIND11_TYPE_CASTER(ratewin::python::Name, const_name(Text));                          \
    bool load(handle source, bool /*convert*/) {                                            \
      value = ratewin::python::Name(source);                                                \
      return true;                                                                          \
    }                                                                                       \
    static handle cast(const ratewin::python::Name& v, return_value_policy, handle) {       \
      return v.inc_ref();                                                                   \
    }                                                                                       \
  }
RATEWIN_PYTHON_ARG_CASTER(IntArg, "int");
RATEWIN_PYTHON_ARG_CASTER(OptionalIntArg, "int | None");
RATEWIN_PYTHON_ARG_CASTER(SecondsArg, "float | datetime.timedelta");
RATEWIN_PYTHON_ARG_CASTER(OptionalSecondsArg, "float | datetime.timedelta | None");
RATEWIN_PYTHON_ARG_CASTER(ResourceArg, "str | bytes | int");
RATEWIN_PYTHON_ARG_CASTER(StrArg, "str");
RATEWIN_PYTHON_ARG_CASTER(OptionalStrArg, "str | None");
RATEWIN_PYTHON_ARG_CASTER(OptionalPathArg, "str | os.PathLike[str] | None");
RATEWIN_PYTHON_ARG_CASTER(BoolArg, "bool");
RATEWIN_PYTHON_ARG_CASTER(FloatArg, "float");
RATEWIN_PYTHON_ARG_CASTER(PolicyArg, "FailurePolicy | str");
RATEWIN_PYTHON_ARG_CASTER(LimitArg, "Limit | str");
RATEWIN_PYTHON_ARG_CASTER(LimitsArg, "Limit | str | Iterable[Limit | str]");
RATEWIN_PYTHON_ARG_CASTER(OptionalClockArg, "ManualClock | None");
RATEWIN_PYTHON_ARG_CASTER(OptionalLoggerArg, "Callable[[str, str], object] | None");
#undef RATEWIN_PYTHON_ARG_CASTER
}  // namespace pybind11::detail
