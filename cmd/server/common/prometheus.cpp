#include "common/prometheus.h"

#include <algorithm>
#include <iterator>

#include "common/text.h"

namespace ratewin::server {

void append_label(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
}

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  current_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusText::sample(std::string_view labels, double value, std::string_view suffix) {
  out_ += current_;
  out_ += suffix;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
  append_double(out_, value);
  out_ += '\n';
}

void PrometheusText::single(std::string_view name, std::string_view type, std::string_view help,
                            double value) {
  family(name, type, help);
  sample({}, value);
}

void write_engine_metrics(PrometheusText& out, const Stats& st) {
  std::string_view family;
  for (const StatField& f : kStatFields) {
    if (f.store_only && !st.store) continue;
    if (f.metric != family) {
      family = f.metric;
      out.family(f.metric, f.kind == StatKind::counter ? "counter" : "gauge",
                 f.metric_help.empty() ? f.help : f.metric_help);
    }
    out.sample(f.labels, f.sample_value(st));
  }
  if (!st.store) return;
  // Store failures by reason: always the reasons an operator acts on, 0 until seen, and
  // any other reason once it has been.
  static constexpr std::string_view kReasons[] = {
      "NOPERM", "NOAUTH", "WRONGPASS", "READONLY", "OOM", "MISCONF", "CLUSTERDOWN", "SCRIPT",
      "timeout", "connect"};
  out.family("ratewin_store_errors_total", "counter",
             "Store failures by reason: the Redis error code (NOPERM: an ACL forbids the key "
             "prefix; NOAUTH, WRONGPASS: credentials; READONLY: a replica; OOM; MISCONF; "
             "CLUSTERDOWN; SCRIPT: an error inside a script; ERR: another), else timeout, "
             "connect, closed or other (the transport).");
  std::string labels;
  const auto reason_sample = [&](std::string_view reason, std::uint64_t n) {
    labels = "reason=\"";
    labels += reason;
    labels += '"';
    out.sample(labels, as_sample(n));
  };
  const auto count_of = [&](std::string_view reason) -> std::uint64_t {
    for (const auto& [r, n] : st.store_errors)
      if (r == reason) return n;
    return 0;
  };
  for (const std::string_view reason : kReasons) reason_sample(reason, count_of(reason));
  for (const auto& [reason, n] : st.store_errors)
    if (std::find(std::begin(kReasons), std::end(kReasons), reason) == std::end(kReasons))
      reason_sample(reason, n);
}

}  // namespace ratewin::server
