// Shared by the files of the _ratewin module: one init function per class, and the
// conversions every function uses.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "ratewin/ratewin.h"

namespace ratewin::python {

namespace py = pybind11;

void init_errors(py::module_& m);
void init_clock(py::module_& m);
void init_limit(py::module_& m);
void init_decision(py::module_& m);
void init_engine(py::module_& m);

// Engine.try_acquire_all's answer: one Decision per limit (none for the limits after the
// one that refused, which were not decided), and which one describes the outcome.
struct Decisions {
  std::vector<std::optional<Decision>> decisions;
  std::optional<std::size_t> refused;  // the limit that refused, if one did
  // The limit whose decision describes the outcome: the refusing one, or when all
  // admitted, the one with the fewest units left.
  std::size_t shown_index() const;
  const Decision& shown() const { return *decisions[shown_index()]; }
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
std::string to_utf8(py::handle text, const char* what);
// A bool: TypeError for anything else (0, None, "yes").
bool to_bool(py::handle value, const char* what);
// A resource: a str (hashed as UTF-8), bytes (hashed as they are) or an int id.
std::uint64_t to_resource(py::handle resource);

// The exception types of the module (set by init_errors).
extern PyObject* closed_error;

}  // namespace ratewin::python
