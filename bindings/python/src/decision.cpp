#include <cmath>
#include <limits>
#include <string>

#include "bindings.h"
#include "ratewin_internal/rate_limit_headers.h"

namespace ratewin::python {

namespace {

std::string repr(const Decision& d) {
  auto seconds = [](double s) { return py::repr(py::float_(s)).cast<std::string>(); };
  return std::string("Decision(allowed=") + (d.allowed ? "True" : "False") +
         ", limit=" + std::to_string(d.limit) + ", remaining=" + std::to_string(d.remaining) +
         ", reset_after=" + seconds(to_seconds(d.reset_after)) + ", retry_after=" +
         seconds(d.can_ever_pass() ? to_seconds(d.retry_after)
                                   : std::numeric_limits<double>::infinity()) +
         ", degraded=" + (d.degraded ? "True" : "False") +
         (d.would_reject ? ", would_reject=True)" : ")");
}

}  // namespace

std::size_t Decisions::shown_index() const {
  if (refused) return *refused;
  // (A limit in shadow that would have refused describes nothing the client meets.)
  std::size_t best = 0;
  for (std::size_t i = 1; i < decisions.size(); ++i) {
    const Decision& d = decisions[i];
    const Decision& b = decisions[best];
    if (b.would_reject != d.would_reject ? b.would_reject : d.remaining < b.remaining) best = i;
  }
  return best;
}

void init_decision(py::module_& m) {
  py::class_<Decision>(m, "Decision",
                       "The answer to one request. Durations are seconds from the moment of "
                       "the decision. True in a boolean context when the request was allowed.")
      .def_readonly("allowed", &Decision::allowed, "The request was admitted and its cost counted.")
      .def_readonly("degraded", &Decision::degraded,
                    "Redis was unreachable: the decision followed the limit's on_failure "
                    "policy.")
      .def_readonly("would_reject", &Decision::would_reject,
                    "A limit in shadow (mode='shadow') would have refused: the request is "
                    "allowed and was not counted; remaining and retry_after are the refusal's.")
      .def_readonly("limit", &Decision::limit,
                    "The limit's max (a token_bucket's burst: the most admitted at once).")
      .def_readonly("remaining", &Decision::remaining, "Units that could still be admitted now.")
      .def_property_readonly(
          "reset_after", [](const Decision& d) { return to_seconds(d.reset_after); },
          "Seconds until the window holds nothing of the counts made so far (a token_bucket: "
          "until it is full).")
      .def_property_readonly(
          "retry_after",
          [](const Decision& d) {
            return d.can_ever_pass() ? to_seconds(d.retry_after)
                                     : std::numeric_limits<double>::infinity();
          },
          "0 when allowed; else seconds until the same request would be allowed if nothing "
          "else arrived; math.inf if it never can (its cost exceeds max, a token_bucket's "
          "burst).")
      .def_property_readonly(
          "can_ever_pass", &Decision::can_ever_pass,
          "False when the cost exceeds the limit's max (a token_bucket's burst).")
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
      .def("__repr__", [](const Decision& d) { return repr(d); });

  py::class_<Decisions>(m, "Decisions",
                        "The answer of Engine.try_acquire_all: one Decision per limit. True "
                        "in a boolean context when every limit admitted the request.")
      .def_property_readonly(
          "allowed", [](const Decisions& d) { return !d.refused; },
          "Every limit admitted the request, and it was counted against each.")
      .def_property_readonly(
          "refused",
          [](const Decisions& d) -> py::object {
            if (!d.refused) return py::none();
            return py::int_(*d.refused);
          },
          "The index of the limit that refused (the one with the longest wait when several "
          "would), or None.")
      .def_property_readonly(
          "decisions",
          [](const Decisions& d) {
            py::list out;
            for (const Decision& x : d.decisions) out.append(py::cast(x));
            return out;
          },
          "One Decision per limit, in order. In a refused request each is its limit's own "
          "answer, nothing counted: a limit that would have admitted the request is allowed, "
          "with what it had left before it (before 1.9, the limits after the one that "
          "refused were None).")
      .def_property_readonly(
          "index", &Decisions::shown_index,
          "The index of the limit `decision` is for: the one that refused, or the one with "
          "the fewest units left.")
      .def_property_readonly(
          "decision", [](const Decisions& d) { return d.shown(); },
          "The Decision that describes the outcome: the refusing limit's, or when all "
          "admitted, the one with the fewest units left (what headers() describe).")
      .def_property_readonly(
          "degraded",
          [](const Decisions& d) {
            for (const Decision& x : d.decisions)
              if (x.degraded) return true;
            return false;
          },
          "A decision followed its limit's on_failure policy (Redis unreachable).")
      .def_property_readonly(
          "retry_after",
          [](const Decisions& d) {
            const Decision& s = d.shown();
            return s.can_ever_pass() ? to_seconds(s.retry_after)
                                     : std::numeric_limits<double>::infinity();
          },
          "0 when allowed; else the refusing limit's retry_after.")
      .def("__bool__", [](const Decisions& d) { return !d.refused; })
      .def("__len__", [](const Decisions& d) { return d.decisions.size(); })
      .def(
          "headers",
          [](const Decisions& d) {
            py::dict out;
            for (const HeaderField& f : headers(d.shown()))
              out[py::str(f.name.data(), f.name.size())] = f.value;
            return out;
          },
          "The HTTP response headers of `decision` (see Decision.headers).")
      .def("__repr__", [](const Decisions& d) {
        std::string text = std::string("Decisions(allowed=") + (d.refused ? "False" : "True");
        if (d.refused) text += ", refused=" + std::to_string(*d.refused);
        text += ", decision=" + repr(d.shown()) + ")";
        return text;
      });

  // For the middleware (ratewin/_middleware.py): the IETF headers, formatted as
  // ratewin-server formats them.
  m.def(
      "_rate_limit_headers",
      [](const py::sequence& limits, const py::sequence& names, std::size_t shown,
         std::uint64_t remaining, std::uint64_t reset, bool degraded) {
        if (names.size() != limits.size() || shown >= limits.size())
          throw py::value_error("_rate_limit_headers: one name per limit, and shown among them");
        std::string policy;
        std::string state;
        for (std::size_t i = 0; i < limits.size(); ++i) {
          const auto limit = limits[i].cast<Limit>();
          const std::string name = to_utf8(py::object(names[i]), "names");
          if (i != 0) policy += ", ";
          internal::append_policy_item(policy, name, limit.burst(),
                                       internal::policy_window_seconds(limit));
          if (i == shown) internal::append_rate_limit(state, name, remaining, reset, degraded);
        }
        return py::make_tuple(policy, state);
      },
      py::arg("limits"), py::arg("names"), py::arg("shown"), py::arg("remaining"), py::arg("reset"),
      py::arg("degraded"),
      "RateLimit-Policy (every limit, each as q=burst per w seconds, named as `names` "
      "says) and RateLimit (limit `shown`: `remaining`, `reset` seconds, and ';degraded' "
      "when `degraded`), as a tuple of two str.");
}

}  // namespace ratewin::python
