#include "rules/reloader.h"

#include "common/prometheus.h"
#include "ratewin/hash.h"
#include "rules/overrides.h"  // unix_ms

namespace ratewin::server {

void write_reload_metrics(PrometheusText& out, const ReloadMetricNames& names,
                          const ReloadFigures& figures) {
  out.family(names.loads, "counter", names.loads_help);
  std::string labels(names.outcome_label);
  labels += "=\"ok\"";
  out.sample(labels, static_cast<double>(figures.ok));
  labels.assign(names.outcome_label);
  labels += "=\"rejected\"";
  out.sample(labels, static_cast<double>(figures.rejected));
  out.single(names.failing, "gauge", names.failing_help, figures.failing ? 1 : 0);
  if (!names.loaded_at.empty()) {
    out.single(names.loaded_at, "gauge", names.loaded_at_help,
               static_cast<double>(figures.loaded_ms) / 1e3);
  }
}

std::string ReloadRecord::last_error() const {
  std::lock_guard lock(outcome_);
  return last_error_;
}

ReloadFigures ReloadRecord::figures() const {
  std::lock_guard lock(outcome_);
  return ReloadFigures{ok_, rejected_, !last_error_.empty(), loaded_ms_};
}

bool ReloadRecord::goes_ahead(ReloadCause cause, std::uint64_t fingerprint,
                              const std::string& read_error) {
  // A read error is remembered apart from bytes that hash the same.
  const std::uint64_t seen = read_error.empty() ? fingerprint : hash(read_error) ^ 1;
  if (cause == ReloadCause::watch && seen == last_read_) return false;
  last_read_ = seen;
  return true;
}

void ReloadRecord::loaded() {
  loaded_ms_ = unix_ms();
  last_error_.clear();
  ++ok_;
}

bool ReloadRecord::refused(const std::string& error) {
  const bool same_error = error == last_error_;
  last_error_ = error;
  ++rejected_;
  return same_error;
}

}  // namespace ratewin::server
