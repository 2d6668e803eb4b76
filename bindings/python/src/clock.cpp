#include <cstdint>
#include <memory>

#include "bindings.h"

namespace ratewin::python {
namespace {

// Readings stay within [0, 2^62) ns (until the year 2116), where every engine computation
// on them is defined.
constexpr std::int64_t kLatest = std::int64_t{1} << 62;

std::chrono::nanoseconds checked(std::chrono::nanoseconds t) {
  if (t.count() >= kLatest) {
    throw py::value_error("the clock would pass 2^62 ns after the Unix epoch (year 2116)");
  }
  return t;
}

}  // namespace

void init_clock(py::module_& m) {
  py::class_<ManualClock, std::shared_ptr<ManualClock>>(
      m, "ManualClock",
      "A clock that moves only when told to, for tests: pass it as Engine(clock=...) and "
      "decisions become deterministic. Times are seconds since the Unix epoch. Safe to use "
      "from several threads.")
      .def(py::init([](SecondsArg start) {
             return std::make_shared<ManualClock>(checked(to_nanoseconds(start, "start")));
           }),
           py::arg("start") = 1'700'000'000, "Starts at `start` seconds since the Unix epoch.")
      .def(
          "now", [](const ManualClock& c) { return to_seconds(c.now()); },
          "The current reading, in seconds since the Unix epoch.")
      .def(
          "set", [](ManualClock& c, SecondsArg t) { c.set(checked(to_nanoseconds(t, "t"))); },
          py::arg("t"), "Sets the reading to `t` seconds since the Unix epoch.")
      .def(
          "advance",
          [](ManualClock& c, SecondsArg seconds) {
            const std::chrono::nanoseconds step = to_nanoseconds(seconds, "seconds", true);
            // The reading and the step are each below 2^62, so their sum cannot overflow.
            checked(step);
            checked(c.now() + step);
            c.advance(step);
          },
          py::arg("seconds"),
          "Moves the clock forward by `seconds` (an int, a float or a timedelta), to the "
          "nearest nanosecond.")
      .def("__repr__", [](const ManualClock& c) {
        return "ManualClock(" + py::repr(py::float_(to_seconds(c.now()))).cast<std::string>() + ")";
      });
}

}  // namespace ratewin::python
