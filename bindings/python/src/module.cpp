// The compiled half of the `ratewin` package. The pure-Python package re-exports it;
// each class is bound beside its own init function.
#include <pybind11/pybind11.h>

#include "bindings.h"

#ifndef RATEWIN_VERSION_STRING
#error "RATEWIN_VERSION_STRING must be defined by the build"
#endif

PYBIND11_MODULE(_ratewin, m) {
  m.doc() =
      "ratewin's compiled core: a distributed approximate sliding-window rate limiter. "
      "Import the `ratewin` package rather than this module.";
  m.attr("__version__") = RATEWIN_VERSION_STRING;
  ratewin::python::init_errors(m);
  ratewin::python::init_clock(m);
  ratewin::python::init_limit(m);
  ratewin::python::init_decision(m);
  ratewin::python::init_stats(m);
  ratewin::python::init_engine(m);
}
