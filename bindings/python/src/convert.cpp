#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "bindings.h"

namespace ratewin::python {

PyObject* closed_error = nullptr;

std::string type_name(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>();
}

namespace {

bool is_int(py::handle value) {
  return PyLong_Check(value.ptr()) != 0 && PyBool_Check(value.ptr()) == 0;
}

}  // namespace

void init_errors(py::module_& m) {
  static py::exception<void> error(m, "Error", PyExc_Exception);
  error.doc() = "Base class of the errors ratewin raises itself.";
  static py::exception<void> closed(m, "ClosedError", error.ptr());
  closed.doc() = "The engine or limiter was closed before this call.";
  closed_error = closed.ptr();
  static py::exception<void> store(m, "StoreError", error.ptr());
  store.doc() =
      "Engine(connect='require'): the shared store (Redis) cannot be used (unreachable, or "
      "a password missing or refused).";
  // Library failures other than bad arguments (a thread or an event loop that could not
  // be created, too many handles on one limiter) become ratewin.Error. Custom
  // translators run before pybind11's own, so Python-side errors pass through untouched.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const py::error_already_set&) {
      throw;
    } catch (const StoreError& e) {
      PyErr_SetString(store.ptr(), e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::logic_error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const std::runtime_error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
}

namespace {

// Seconds in `unit`s (1e3: milliseconds, 1e9: nanoseconds), rounded; `whole` says whether
// the value was a whole number of units, to within a millionth of one.
long long to_units(py::handle seconds, const char* what, bool allow_zero, double unit,
                   bool& whole) {
  double units = 0;
  whole = true;
  py::module_ datetime = py::module_::import("datetime");
  if (py::isinstance(seconds, datetime.attr("timedelta"))) {
    // Exact: days, seconds and microseconds are integers.
    const auto days = seconds.attr("days").cast<long long>();
    const auto secs = seconds.attr("seconds").cast<long long>();
    const auto micros = seconds.attr("microseconds").cast<long long>();
    const double exact = (static_cast<double>(days) * 86'400.0 + static_cast<double>(secs)) * unit +
                         static_cast<double>(micros) * unit / 1e6;
    units = std::round(exact);
    whole = units == exact;
  } else if (is_int(seconds) || PyFloat_Check(seconds.ptr()) != 0) {
    // An int too large for a double is as out of range as an infinite float.
    const double s = PyFloat_AsDouble(seconds.ptr());
    if (s == -1.0 && PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      throw py::value_error(std::string(what) + " is too long");
    }
    if (!std::isfinite(s)) {
      throw py::value_error(std::string(what) + " must be a finite number of seconds");
    }
    const double exact = s * unit;
    units = std::round(exact);
    // Within a millionth of a unit (floats such as 0.1 are not exact), or within the
    // rounding of the multiplication itself where that is coarser (long windows).
    whole = std::fabs(exact - units) <=
            std::max(1e-6, 4 * std::numeric_limits<double>::epsilon() * std::fabs(exact));
  } else {
    throw py::type_error(std::string(what) +
                         " must be seconds as an int, a float or a datetime.timedelta, not " +
                         type_name(seconds));
  }
  const std::string given = py::repr(seconds).cast<std::string>();
  if (units < 0) {
    throw py::value_error(std::string(what) + " must be " + (allow_zero ? "0 or more" : "positive") +
                          " seconds, got " + given);
  }
  if (units == 0 && !allow_zero) {
    throw py::value_error(
        std::string(what) + " must be positive" +
        (unit == 1e3 ? ", at least 0.001 s (whole milliseconds)" : "") + ", got " + given);
  }
  if (units > 9.0e18) throw py::value_error(std::string(what) + " is too long");
  return static_cast<long long>(units);
}

}  // namespace

std::string to_utf8(py::handle text, const char* what) {
  if (PyUnicode_Check(text.ptr()) == 0) {
    throw py::type_error(std::string(what) + " must be a str, not " + type_name(text));
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (utf8 == nullptr) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " is not valid Unicode (a lone surrogate?)");
  }
  return std::string(utf8, static_cast<std::size_t>(size));
}

std::string to_path(py::handle path, const char* what) {
  if (PyUnicode_Check(path.ptr()) != 0) return to_utf8(path, what);
  if (!py::hasattr(path, "__fspath__")) {
    throw py::type_error(std::string(what) + " must be a str or an os.PathLike, not " +
                         type_name(path));
  }
  const py::object text = py::module_::import("os").attr("fspath")(path);
  if (PyUnicode_Check(text.ptr()) == 0) {
    throw py::type_error(std::string(what) + " must name a path as a str, not " +
                         type_name(text));
  }
  return to_utf8(text, what);
}

bool to_bool(py::handle value, const char* what) {
  if (PyBool_Check(value.ptr()) == 0) {
    throw py::type_error(std::string(what) + " must be True or False, not " + type_name(value));
  }
  return value.ptr() == Py_True;
}

double to_double(py::handle value, const char* what) {
  if (!is_int(value) && PyFloat_Check(value.ptr()) == 0) {
    throw py::type_error(std::string(what) + " must be a number, not " + type_name(value));
  }
  const double v = PyFloat_AsDouble(value.ptr());
  if (v == -1.0 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return v;
}

std::chrono::milliseconds to_milliseconds(py::handle seconds, const char* what, bool allow_zero) {
  bool whole = true;
  const long long ms = to_units(seconds, what, allow_zero, 1e3, whole);
  if (!whole) {
    throw py::value_error(std::string(what) + " must be a whole number of milliseconds, got " +
                          py::repr(seconds).cast<std::string>() + " s");
  }
  return std::chrono::milliseconds(ms);
}

std::chrono::nanoseconds to_nanoseconds(py::handle seconds, const char* what, bool allow_zero) {
  bool whole = true;
  return std::chrono::nanoseconds(to_units(seconds, what, allow_zero, 1e9, whole));
}

double to_seconds(std::chrono::nanoseconds d) noexcept {
  return static_cast<double>(d.count()) / 1e9;
}

std::uint64_t to_u64(py::handle value, const char* what, std::uint64_t min, std::uint64_t max) {
  if (!is_int(value)) {
    throw py::type_error(std::string(what) + " must be an int, not " + type_name(value));
  }
  int overflow = 0;
  const long long small = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  std::uint64_t v = 0;
  bool in_range = true;
  if (overflow < 0 || (overflow == 0 && small < 0)) {
    in_range = false;
  } else if (overflow == 0) {
    v = static_cast<std::uint64_t>(small);
  } else {
    v = PyLong_AsUnsignedLongLong(value.ptr());
    if (PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      in_range = false;
    }
  }
  if (!in_range || v < min || v > max) {
    const std::string given = py::repr(value).cast<std::string>();
    if (max == UINT64_MAX) {
      throw py::value_error(std::string(what) + " must be " +
                            (min == 0 ? std::string("0 or more") : std::to_string(min) + " or more") +
                            ", got " + given);
    }
    throw py::value_error(std::string(what) + " must be between " + std::to_string(min) + " and " +
                          std::to_string(max) + ", got " + given);
  }
  return v;
}

std::uint64_t to_resource(py::handle resource) {
  if (PyUnicode_Check(resource.ptr()) != 0) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(resource.ptr(), &size);
    if (utf8 == nullptr) throw py::error_already_set();  // lone surrogates
    return hash(std::string_view(utf8, static_cast<std::size_t>(size)));
  }
  if (PyBytes_Check(resource.ptr()) != 0) {
    return hash(std::string_view(PyBytes_AS_STRING(resource.ptr()),
                                 static_cast<std::size_t>(PyBytes_GET_SIZE(resource.ptr()))));
  }
  if (is_int(resource)) return to_u64(resource, "resource", 0, UINT64_MAX);
  throw py::type_error("resource must be a str, bytes or an int id, not " + type_name(resource));
}

}  // namespace ratewin::python
