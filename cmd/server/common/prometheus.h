// The Prometheus text format (version 0.0.4), as /metrics writes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ratewin/stats.h"

namespace ratewin::server {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// A count as a sample's value.
inline double as_sample(std::uint64_t v) noexcept { return static_cast<double>(v); }

// Appends a label, name="value", with the value's \, " and newline escaped.
void append_label(std::string& out, std::string_view name, std::string_view value);

class PrometheusText {
 public:
  // A family's HELP and TYPE lines; the samples after it carry its name.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // A sample of the current family: `labels` is "a=\"x\",b=\"y\"" or empty; `suffix`
  // follows the name (a histogram's _bucket, _sum and _count).
  void sample(std::string_view labels, double value, std::string_view suffix = {});
  // A family of one sample without labels.
  void single(std::string_view name, std::string_view type, std::string_view help, double value);

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::string current_;
};

// Every figure of an engine's Stats, as ratewin::kStatFields describes it: one sample each,
// under its family's HELP and TYPE (the store's figures only with a store).
void write_engine_metrics(PrometheusText& out, const Stats& stats);

}  // namespace ratewin::server
