#include <cmath>
#include <limits>
#include <string>

#include "bindings.h"

namespace ratewin::python {

void init_decision(py::module_& m) {
  py::class_<Decision>(m, "Decision",
                       "The answer to one request. Durations are seconds from the moment of "
                       "the decision. True in a boolean context when the request was allowed.")
      .def_readonly("allowed", &Decision::allowed, "The request was admitted and its cost counted.")
      .def_readonly("degraded", &Decision::degraded,
                    "Redis was unreachable: the decision followed the limit's on_failure "
                    "policy.")
      .def_readonly("limit", &Decision::limit, "The limit's max.")
      .def_readonly("remaining", &Decision::remaining, "Units that could still be admitted now.")
      .def_property_readonly(
          "reset_after", [](const Decision& d) { return to_seconds(d.reset_after); },
          "Seconds until the window holds nothing of the counts made so far.")
      .def_property_readonly(
          "retry_after",
          [](const Decision& d) {
            return d.can_ever_pass() ? to_seconds(d.retry_after)
                                     : std::numeric_limits<double>::infinity();
          },
          "0 when allowed; else seconds until the same request would be allowed if nothing "
          "else arrived; math.inf if it never can (its cost exceeds max).")
      .def_property_readonly("can_ever_pass", &Decision::can_ever_pass,
                             "False when the cost exceeds the limit's max.")
      .def("__bool__", [](const Decision& d) { return d.allowed; })
      .def(
          "headers",
          [](const Decision& d) {
            py::dict out;
            for (const HeaderField& f : headers(d))
              out[py::str(f.name.data(), f.name.size())] = f.value;
            return out;
          },
          "The HTTP response headers for this decision, as a dict: X-RateLimit-Limit, "
          "X-RateLimit-Remaining, X-RateLimit-Reset (seconds until the window is empty, "
          "rounded up) and, when rejected and retrying can help, Retry-After (seconds, "
          "rounded up).")
      .def("__repr__", [](const Decision& d) {
        auto seconds = [](double s) { return py::repr(py::float_(s)).cast<std::string>(); };
        return std::string("Decision(allowed=") + (d.allowed ? "True" : "False") +
               ", limit=" + std::to_string(d.limit) + ", remaining=" + std::to_string(d.remaining) +
               ", reset_after=" + seconds(to_seconds(d.reset_after)) + ", retry_after=" +
               seconds(d.can_ever_pass() ? to_seconds(d.retry_after)
                                         : std::numeric_limits<double>::infinity()) +
               ", degraded=" + (d.degraded ? "True" : "False") + ")";
      });
}

}  // namespace ratewin::python
