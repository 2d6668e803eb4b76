// rls_service.h: Envoy's rate limit service (ShouldRateLimit) without the wire: a
// request's descriptors matched against the envoyproxy/ratelimit configuration
// (rls_config.h), counted by the engine without blocking a thread (its asynchronous
// admissions), and the statuses, overall code and headers of the answer. The gRPC front
// end (rls/grpc_service.h) only translates messages; tests drive this directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/outcome.h"
#include "ratewin/ratewin.h"  // Engine, AsyncAcquirer
#include "rls/rls_config.h"
#include "rules/reloader.h"

namespace ratewin::server {
class PrometheusText;
}  // namespace ratewin::server

namespace ratewin::server::rls {

enum class Code : std::uint8_t { unknown = 0, ok = 1, over_limit = 2 };

// A descriptor's limit given in the request (Envoy's RateLimitOverride).
struct LimitOverride {
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::unknown;
};

struct RequestDescriptor {
  std::vector<Entry> entries;  // views into the caller's message, used before decide() returns
  std::optional<LimitOverride> limit;
  std::optional<std::uint64_t>
      hits_addend;  // set: overrides the request's (0 asks without counting)
};

struct Request {
  std::string_view domain;
  std::vector<RequestDescriptor> descriptors;
  std::uint32_t hits_addend = 0;  // 0 means 1
};

struct CurrentLimit {
  std::string name;
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::unknown;
};

struct DescriptorStatus {
  Code code = Code::ok;
  std::optional<CurrentLimit> current_limit;  // none: no limit applies
  std::uint32_t limit_remaining = 0;
  // Whole seconds until the window holds none of the descriptor's counts (for a
  // fixed_window, until it ends); none without a limit.
  std::optional<std::chrono::seconds> duration_until_reset;
};

struct Header {
  std::string key;
  std::string value;
};

struct Response {
  Code overall_code = Code::ok;
  std::vector<DescriptorStatus> statuses;  // one per request descriptor, in order
  std::vector<Header> response_headers_to_add;
};

enum class HeaderStyle {
  none,   // no headers (the reference's default)
  draft,  // RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (the reference's
          // LIMIT_RESPONSE_HEADERS_ENABLED), and Retry-After on OVER_LIMIT
  ietf,   // RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers), and
          // Retry-After on OVER_LIMIT
};

struct ServiceOptions {
  std::string folder;  // --rls-config; empty: no configuration (every domain unknown)
  // Count every descriptor on its own, as the reference does, instead of all or nothing
  // (nothing counted when any descriptor is over its limit).
  bool each_descriptor = false;
  // The reference's SHADOW_MODE: statuses as decided, but the overall code OK unless a
  // limit Envoy gave (a descriptor's override) is over.
  bool shadow = false;
  HeaderStyle headers = HeaderStyle::none;
  // A call's bounds: descriptors (--rls-max-descriptors), and bytes of an entry's key and
  // value together. Past them the call is INVALID_ARGUMENT.
  std::size_t max_descriptors = 64;
  std::size_t max_entry_bytes = 1024;
  // A folder that defines no rate limit is refused (at start and on reload, the last good
  // one kept) unless this is set: an emptied folder, or files cut short, would answer OK
  // to every call.
  bool allow_empty_config = false;
  ConfigOptions config;  // its stats are the service's own
};

class RateLimitService {
 public:
  using Log = std::function<void(LogLevel, std::string_view)>;
  using Done = std::function<void(Response&&)>;

  // Loads the configuration (throws RulesError naming the file and line if it fails).
  RateLimitService(Engine& engine, ServiceOptions options, Log log);
  ~RateLimitService();
  RateLimitService(const RateLimitService&) = delete;
  RateLimitService& operator=(const RateLimitService&) = delete;

  // Reads the folder again (Reloader::reload); a bad file keeps the last good
  // configuration serving, and is logged (once while its error stays the same).
  // Unchanged files are not a new version. Thread-safe. True if in force.
  bool reload(std::string_view why, ReloadCause cause = ReloadCause::request) {
    return config_.reload(why, cause);
  }

  // Decides `request`. A request the protocol forbids (empty domain, no descriptors, an
  // override with an unknown unit) is refused: an `invalid` Status says why
  // (INVALID_ARGUMENT) and `done` is not called. Otherwise ok, and `done` runs once:
  // before this returns when no round trip is needed (refusals, local mode), else on the
  // loop of `acquirer` (a loop's own admissions, AsyncAcquirer), or without one on the
  // engine's I/O thread. Never blocks on the network.
  Status decide(const Request& request, Done done, AsyncAcquirer* acquirer = nullptr);

  // The per-descriptor counters (ratewin_rls_*), the reload counters and the version.
  void write_metrics(PrometheusText& out) const;
  std::shared_ptr<const Config> config() const { return config_.get(); }
  const std::string& folder() const noexcept { return options_.folder; }
  std::string last_reload_error() const { return config_.last_error(); }

  static constexpr double kNearLimitRatio = 0.8;

 private:
  struct Call;
  void finish(Call& call);
  // How the folder is read and parsed (its rules' counters in stats_), and its reloads
  // logged.
  Reloader<Config>::Hooks config_hooks();

  Engine& engine_;
  ServiceOptions options_;
  Log log_;
  HitStats stats_;
  Reloader<Config> config_;  // loaded by the constructor (after the above, which it uses)
};

}  // namespace ratewin::server::rls
