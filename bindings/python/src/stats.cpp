// ratewin.Stats: Engine.stats()'s figures, one attribute per field of ratewin::kStatFields
// (durations in seconds) and last_error; it reads as a mapping of the same names too.
#include <string>

#include "bindings.h"

namespace ratewin::python {
namespace {

// A figure as Python shows it: an int, seconds as a float, or a bool.
py::object value_of(const StatField& f, const Stats& s) {
  if (f.count != nullptr) return py::int_(s.*f.count);
  if (f.duration != nullptr) return py::float_(to_seconds(s.*f.duration));
  return py::bool_(s.*f.flag);
}

constexpr const char* kLastError = "last_error";

py::list keys() {
  py::list out;
  for (const StatField& f : kStatFields) out.append(py::str(f.name.data(), f.name.size()));
  out.append(kLastError);
  return out;
}

py::object item(const Stats& s, const std::string& key) {
  if (key == kLastError) return py::str(s.last_error);
  for (const StatField& f : kStatFields)
    if (f.name == key) return value_of(f, s);
  throw py::key_error(key);
}

}  // namespace

void init_stats(py::module_& m) {
  py::class_<Stats> cls(m, "Stats",
                        "An engine's counters since it started and its state now "
                        "(Engine.stats()): one attribute per figure, durations in seconds; the "
                        "store's figures are zero in local mode. It reads as a read-only "
                        "mapping of the same names as well (stats['allowed'], dict(stats)).");
  for (const StatField& f : kStatFields) {
    // (The table's names are string literals: their text outlives the module.)
    cls.def_property_readonly(
        f.name.data(), [&f](const Stats& s) { return value_of(f, s); },
        std::string(f.help).c_str());
  }
  cls.def_property_readonly(
         kLastError, [](const Stats& s) { return s.last_error; },
         "The latest store failure, empty if none.")
      .def("__getitem__", &item, py::arg("key"))
      .def("__contains__",
           [](const Stats&, py::handle key) {
             return py::isinstance<py::str>(key) && keys().contains(key);
           })
      .def("__iter__", [](const Stats&) { return keys().attr("__iter__")(); })
      .def("__len__", [](const Stats&) { return std::size(kStatFields) + 1; })
      .def("keys", [](const Stats&) { return keys(); }, "The figures' names.")
      .def(
          "to_dict",
          [](const Stats& s) {
            py::dict d;
            for (const StatField& f : kStatFields)
              d[py::str(f.name.data(), f.name.size())] = value_of(f, s);
            d[kLastError] = s.last_error;
            return d;
          },
          "The figures as a dict.")
      .def("__repr__", [](const Stats& s) {
        std::string text = "Stats(";
        for (const StatField& f : kStatFields) {
          text += std::string(f.name) + "=" + py::repr(value_of(f, s)).cast<std::string>() + ", ";
        }
        return text + "last_error=" + py::repr(py::str(s.last_error)).cast<std::string>() + ")";
      });
}

}  // namespace ratewin::python
