// ratewin/stats.h: what an engine counts, and one description of each figure, from which
// every output is made (the C ABI's ratewin_stats, Python's Stats, the server's /metrics).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratewin {
inline namespace v1 {

// Counters since the engine was created, and gauges of its current state (Engine::stats).
// Each field is described in kStatFields below.
struct Stats {
  std::uint64_t allowed = 0;
  std::uint64_t rejected = 0;
  std::uint64_t degraded = 0;
  std::uint64_t would_reject = 0;
  std::uint64_t limiters = 0;
  std::uint64_t max_limiters = 0;
  std::uint64_t pinned = 0;
  std::uint64_t evictions = 0;
  std::uint64_t evictions_active = 0;
  std::uint64_t overflowed = 0;
  std::uint64_t memory = 0;
  std::uint64_t max_memory = 0;

  // The shared store (all zero in local mode).
  bool store = false;
  bool store_available = false;
  std::uint64_t circuit_opens = 0;
  std::uint64_t connections = 0;
  std::uint64_t writes_ok = 0;
  std::uint64_t writes_failed = 0;
  std::uint64_t writes_skipped = 0;
  std::chrono::nanoseconds write_p50{0};
  std::chrono::nanoseconds write_p90{0};
  std::chrono::nanoseconds write_p99{0};
  std::chrono::nanoseconds write_max{0};
  std::uint64_t warm_starts = 0;
  std::uint64_t warm_start_failures = 0;
  std::uint64_t sync_rounds = 0;
  std::uint64_t sync_failures = 0;
  std::uint64_t sync_last_keys = 0;
  std::uint64_t sync_last_change_sets = 0;
  std::chrono::nanoseconds sync_last_duration{0};
  std::chrono::nanoseconds sync_max_duration{0};
  std::uint64_t active_limiters = 0;
  std::chrono::nanoseconds clock_offset{0};
  std::chrono::nanoseconds clock_rtt{0};
  std::uint64_t live_nodes = 0;
  // Batched write mode (Options::write_mode).
  std::uint64_t flushes = 0;
  std::uint64_t flush_failures = 0;
  std::uint64_t flushed_units = 0;
  // The latest store failure, empty if none (a text: not one of kStatFields).
  std::string last_error;
  // Store failures so far by reason, in the order first seen: a Redis error code (NOPERM,
  // NOAUTH, WRONGPASS, READONLY, OOM, MISCONF, CLUSTERDOWN, ...; SCRIPT for an error
  // inside a script, ERR for another), else timeout, connect, closed or other (not one
  // of kStatFields: /metrics shows them as ratewin_store_errors_total{reason}).
  std::vector<std::pair<std::string, std::uint64_t>> store_errors;
};

// Whether a figure only grows (a counter) or says how things are now (a gauge).
enum class StatKind { counter, gauge };
// What a figure is: a number of things, bytes, a duration (nanoseconds in Stats, seconds
// in Python and /metrics), or a yes or no.
enum class StatUnit { count, bytes, seconds, flag };

// One figure of Stats, described once.
struct StatField {
  // Its name in Python and in the C struct (where a duration's has _ns after it).
  std::string_view name;
  StatKind kind;
  StatUnit unit;
  // What it is, in a sentence.
  std::string_view help;
  // Its sample in the Prometheus text format: the metric family and the sample's labels.
  // Figures of one family follow each other, the first with the family's help.
  std::string_view metric;
  std::string_view labels;
  std::string_view metric_help;  // the family's help, when not `help`
  bool store_only = false;  // shown by /metrics only with a shared store
  // The field (one of the three).
  std::uint64_t Stats::*count = nullptr;
  std::chrono::nanoseconds Stats::*duration = nullptr;
  bool Stats::*flag = nullptr;
  // The sample's value, when it is not the field's (below).
  double (*sample)(const Stats&) = nullptr;

  // The field's value as a number: a count, seconds, or 1 / 0.
  double number(const Stats& s) const noexcept {
    if (count != nullptr) return static_cast<double>(s.*count);
    if (duration != nullptr) return static_cast<double>((s.*duration).count()) / 1e9;
    return (s.*flag) ? 1 : 0;
  }
  // The Prometheus sample's value.
  double sample_value(const Stats& s) const noexcept {
    return sample != nullptr ? sample(s) : number(s);
  }
};

namespace stat_fields_detail {
struct Sample {
  std::string_view metric, labels = {}, metric_help = {};
};
constexpr StatField counter(std::string_view name, std::uint64_t Stats::*field,
                            std::string_view help, Sample at, bool store_only = false) {
  return {name,      StatKind::counter, StatUnit::count, help,  at.metric,
          at.labels, at.metric_help,    store_only,      field, nullptr,
          nullptr,   nullptr};
}
constexpr StatField gauge(std::string_view name, std::uint64_t Stats::*field, StatUnit unit,
                          std::string_view help, Sample at, bool store_only = false) {
  return {name,      StatKind::gauge, unit,       help,  at.metric,
          at.labels, at.metric_help,  store_only, field, nullptr,
          nullptr,   nullptr};
}
constexpr StatField seconds(std::string_view name, std::chrono::nanoseconds Stats::*field,
                            std::string_view help, Sample at) {
  return {name,      StatKind::gauge, StatUnit::seconds, help,    at.metric,
          at.labels, at.metric_help,  true,              nullptr, field,
          nullptr,   nullptr};
}
constexpr StatField flag(std::string_view name, bool Stats::*field, std::string_view help,
                         Sample at, double (*sample)(const Stats&) = nullptr) {
  return {name,      StatKind::gauge, StatUnit::flag, help,    at.metric,
          at.labels, at.metric_help,  false,          nullptr, nullptr,
          field,     sample};
}
}  // namespace stat_fields_detail

// Every figure of Stats (all but last_error), in the order /metrics shows them. How the
// outputs are made from it: docs/architecture.md, "Stats, described once".
inline constexpr StatField kStatFields[] = {
    stat_fields_detail::flag("store", &Stats::store, "A shared store (Redis) is configured.",
                             {"ratewin_store_configured", {},
                              "1 when the engine shares counts through Redis."}),
    stat_fields_detail::flag(
        "store_available", &Stats::store_available,
        "The store's circuit is closed and its latest command succeeded: writes and reads "
        "go through (false in local mode).",
        {"ratewin_store_up", {},
         "1 while the store is reachable (its circuit is closed) and its commands succeed; 0 "
         "while it is not, or its commands fail (an ACL, a read-only replica, out of "
         "memory...): decisions are then degraded. Always 1 without a store."},
        [](const Stats& s) -> double { return !s.store || s.store_available ? 1 : 0; }),
    stat_fields_detail::counter("allowed", &Stats::allowed, "Decisions that admitted the request.",
                                {"ratewin_engine_decisions_total", "result=\"allowed\"",
                                 "Decisions of the engine, per limit, by result."}),
    stat_fields_detail::counter("rejected", &Stats::rejected,
                                "Decisions that turned the request away.",
                                {"ratewin_engine_decisions_total", "result=\"rejected\""}),
    stat_fields_detail::counter("degraded", &Stats::degraded,
                                "Decisions made while the store was unreachable.",
                                {"ratewin_engine_degraded_decisions_total"}),
    stat_fields_detail::counter(
        "would_reject", &Stats::would_reject,
        "Decisions of limits in shadow that would have refused (allowed, and counted so).",
        {"ratewin_engine_would_reject_decisions_total"}),
    stat_fields_detail::gauge("limiters", &Stats::limiters, StatUnit::count, "Limiters held now.",
                              {"ratewin_engine_limiters"}),
    stat_fields_detail::gauge("max_limiters", &Stats::max_limiters, StatUnit::count,
                              "The configured bound on limiters.", {"ratewin_engine_max_limiters"}),
    stat_fields_detail::gauge("pinned", &Stats::pinned, StatUnit::count,
                              "Limiters held by handles now (never evicted).",
                              {"ratewin_engine_pinned_limiters"}),
    stat_fields_detail::counter("evictions", &Stats::evictions,
                                "Limiters whose windows were empty, dropped to make room.",
                                {"ratewin_engine_evictions_total"}),
    stat_fields_detail::counter(
        "evictions_active", &Stats::evictions_active,
        "Limiters that still counted, dropped to make room while the bounds were full of "
        "live limiters (a flood of new keys); in local mode their counts are kept as ghosts "
        "their keys start from again.",
        {"ratewin_engine_active_evictions_total"}),
    stat_fields_detail::gauge("memory", &Stats::memory, StatUnit::bytes,
                              "Memory the limiters take now (records and table).",
                              {"ratewin_engine_memory_bytes"}),
    stat_fields_detail::gauge("max_memory", &Stats::max_memory, StatUnit::bytes,
                              "The configured bound on that memory.",
                              {"ratewin_engine_max_memory_bytes"}),
    stat_fields_detail::counter(
        "overflowed", &Stats::overflowed,
        "Decisions on new resources made by an overflow limiter (the bounds full of limiters "
        "that still count and cannot go: sliding logs, or limiters held by handles).",
        {"ratewin_engine_overflowed_decisions_total"}),
    stat_fields_detail::counter("circuit_opens", &Stats::circuit_opens,
                                "Times the store was found unreachable.",
                                {"ratewin_store_circuit_opens_total"}, true),
    stat_fields_detail::counter("connections", &Stats::connections,
                                "Times the background connection (re)connected.",
                                {"ratewin_store_connections_total"}, true),
    stat_fields_detail::counter("writes_ok", &Stats::writes_ok,
                                "Allowed requests counted in the store.",
                                {"ratewin_store_writes_total", "result=\"ok\"",
                                 "Writes of allowed requests, by result."},
                                true),
    stat_fields_detail::counter("writes_failed", &Stats::writes_failed,
                                "Writes that failed or timed out.",
                                {"ratewin_store_writes_total", "result=\"failed\""}, true),
    stat_fields_detail::counter("writes_skipped", &Stats::writes_skipped,
                                "Writes not attempted: the store's circuit was open.",
                                {"ratewin_store_writes_total", "result=\"skipped\""}, true),
    stat_fields_detail::seconds("write_p50", &Stats::write_p50,
                                "The median write round trip since start (within 12.5%).",
                                {"ratewin_store_write_latency_seconds", "quantile=\"0.5\"",
                                 "Write round-trip latency quantiles since start (within "
                                 "12.5%)."}),
    stat_fields_detail::seconds("write_p90", &Stats::write_p90,
                                "The 90th percentile write round trip since start.",
                                {"ratewin_store_write_latency_seconds", "quantile=\"0.9\""}),
    stat_fields_detail::seconds("write_p99", &Stats::write_p99,
                                "The 99th percentile write round trip since start.",
                                {"ratewin_store_write_latency_seconds", "quantile=\"0.99\""}),
    stat_fields_detail::seconds("write_max", &Stats::write_max, "The slowest write since start.",
                                {"ratewin_store_write_latency_max_seconds"}),
    stat_fields_detail::counter("warm_starts", &Stats::warm_starts,
                                "Limiters loaded from the store before deciding.",
                                {"ratewin_store_warm_starts_total"}, true),
    stat_fields_detail::counter("warm_start_failures", &Stats::warm_start_failures,
                                "Limiters that could not be loaded from the store before "
                                "deciding (decided on local counts).",
                                {"ratewin_store_warm_start_failures_total"}, true),
    stat_fields_detail::counter("sync_rounds", &Stats::sync_rounds,
                                "Boundary reads completed.",
                                {"ratewin_store_sync_rounds_total", "result=\"ok\"",
                                 "Boundary reads by result."},
                                true),
    stat_fields_detail::counter("sync_failures", &Stats::sync_failures,
                                "Boundary reads that failed (retried later).",
                                {"ratewin_store_sync_rounds_total", "result=\"failed\""}, true),
    stat_fields_detail::seconds("sync_last_duration", &Stats::sync_last_duration,
                                "Duration of the last boundary read.",
                                {"ratewin_store_sync_last_seconds"}),
    stat_fields_detail::seconds("sync_max_duration", &Stats::sync_max_duration,
                                "Duration of the longest boundary read since start.",
                                {"ratewin_store_sync_max_seconds"}),
    stat_fields_detail::gauge("sync_last_keys", &Stats::sync_last_keys, StatUnit::count,
                              "Windows read by the last boundary read (limiters other nodes "
                              "wrote).",
                              {"ratewin_store_sync_last_keys"}, true),
    stat_fields_detail::gauge("sync_last_change_sets", &Stats::sync_last_change_sets,
                              StatUnit::count, "Change sets read by the last boundary read.",
                              {"ratewin_store_sync_last_change_sets"}, true),
    stat_fields_detail::gauge("active_limiters", &Stats::active_limiters, StatUnit::count,
                              "Limiters kept in step by boundary reads.",
                              {"ratewin_store_active_limiters"}, true),
    stat_fields_detail::gauge(
        "live_nodes", &Stats::live_nodes, StatUnit::count,
        "Engines on this key prefix heartbeating to the store at its last reading, this one "
        "included (0: not read yet): what the partitioned failure policy splits a limit by.",
        {"ratewin_store_live_nodes"}, true),
    stat_fields_detail::counter("flushes", &Stats::flushes,
                                "Batched mode: flushes that wrote admitted counts to the store.",
                                {"ratewin_store_flushes_total", "result=\"ok\"",
                                 "Batched mode's flushes by result."},
                                true),
    stat_fields_detail::counter("flush_failures", &Stats::flush_failures,
                                "Batched mode: flushes with a write that failed (its counts "
                                "are kept for the next flush while in the window).",
                                {"ratewin_store_flushes_total", "result=\"failed\""}, true),
    stat_fields_detail::counter("flushed_units", &Stats::flushed_units,
                                "Batched mode: units admitted here and written by flushes.",
                                {"ratewin_store_flushed_units_total"}, true),
    stat_fields_detail::seconds("clock_offset", &Stats::clock_offset,
                                "The store's clock minus this engine's.",
                                {"ratewin_store_clock_offset_seconds"}),
    stat_fields_detail::seconds("clock_rtt", &Stats::clock_rtt,
                                "Round trip of the clock measurement in use.",
                                {"ratewin_store_clock_rtt_seconds"}),
};

}  // namespace v1
}  // namespace ratewin
