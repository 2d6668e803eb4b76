#include <pybind11/operators.h>

#include <string>

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

std::string seconds_text(std::chrono::milliseconds ms) {
  return py::repr(py::float_(static_cast<double>(ms.count()) / 1000.0)).cast<std::string>();
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
      .def(py::init([](py::handle max, py::handle per, py::handle resolution,
                       py::handle on_failure) {
             const std::uint64_t count = to_u64(max, "max", 1, Limit::kMaxCount);
             const auto interval = to_milliseconds(per, "per");
             Limit limit = resolution.is_none()
                               ? Limit(count, interval)
                               : Limit(count, interval, to_milliseconds(resolution, "resolution"));
             return limit.with_failure_policy(to_policy(on_failure));
           }),
           py::arg("max"), py::arg("per"), py::arg("resolution") = py::none(),
           py::arg("on_failure") = "local",
           "Limit(100, per=60) allows 100 units a minute. `per` and `resolution` are seconds "
           "(int, float or datetime.timedelta, whole milliseconds); resolution must divide "
           "per and defaults to per / 10 (or the nearest coarser divisor). `on_failure` is a "
           "FailurePolicy or 'local', 'open', 'closed'. Raises ValueError for a bad limit.")
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
      .def(
          "with_max",
          [](const Limit& l, py::handle max) {
            return l.with_max(to_u64(max, "max", 1, Limit::kMaxCount));
          },
          py::arg("max"),
          "The same window with another max; limits with the same window share counts on a "
          "resource.")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__",
           [](const Limit& l) {
             return py::hash(py::make_tuple(l.max(), l.interval().count(), l.resolution().count(),
                                            static_cast<int>(l.failure_policy())));
           })
      .def("__repr__", [](const Limit& l) {
        std::string text = "Limit(" + std::to_string(l.max()) +
                           ", per=" + seconds_text(l.interval()) +
                           ", resolution=" + seconds_text(l.resolution());
        if (l.failure_policy() != FailurePolicy::local) {
          text += std::string(", on_failure='") + policy_name(l.failure_policy()) + "'";
        }
        return text + ")";
      });
}

}  // namespace ratewin::python
