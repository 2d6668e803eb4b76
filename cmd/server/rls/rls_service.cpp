#include "rls/rls_service.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>
#include <variant>

#include "common/log.h"
#include "common/prometheus.h"
#include "common/text.h"
#include "ratewin/hash.h"
#include "ratewin_internal/rate_limit_headers.h"

namespace ratewin::server::rls {

// What decides a descriptor (outside the anonymous namespace: Call, a member type of
// the service, holds it).
enum class Kind : std::uint8_t {
  none,       // no limit: OK, nothing counted
  unlimited,  // OK, remaining "unlimited"
  zero,       // requests_per_unit 0: any hit is over
  engine,     // counted by the engine
};

namespace {

std::uint32_t clamp32(std::uint64_t v) {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, UINT32_MAX));
}

void append_u64(std::string& out, std::uint64_t v) { out += std::to_string(v); }

// A limit's name in the IETF headers: its rule's name, else "d<its descriptor's index>"
// (written in `scratch`).
std::string_view limit_name(const CurrentLimit& limit, std::size_t index, std::string& scratch) {
  if (!limit.name.empty()) return limit.name;
  scratch.assign(1, 'd');
  append_u64(scratch, index);
  return scratch;
}

}  // namespace

struct RateLimitService::Call {
  struct Item {
    Kind kind = Kind::none;
    std::optional<Limit> limit;
    CurrentLimit current;
    std::uint64_t hits = 1;
    std::uint64_t resource = 0;
    bool shadow = false;
    bool quota = false;
    bool overridden = false;  // Envoy gave the limit
    std::shared_ptr<HitCounters> counters;
    bool decided = false;
    Decision decision;
  };
  std::shared_ptr<const Config> config;  // what the items' rules point into
  Done done;
  std::vector<Item> items;
  std::atomic<std::size_t> pending{1};  // engine calls in flight, and decide() itself
  // One engine call's items (indices), its acquisitions and its decisions.
  struct Group {
    std::vector<std::size_t> members;
    std::vector<Acquisition> acquisitions;
    std::vector<Decision> decisions;
  };
  std::vector<Group> groups;

  // A group's answer: every item's decision. In a refused group each still says whether
  // its own limit admits the request, what it has left and when its window empties
  // (Engine::try_acquire_all describes the limits it did not decide, counting nothing),
  // so each descriptor gets its own status, as in the reference.
  void answered(const Group& group, std::span<const Decision> decisions) {
    for (std::size_t k = 0; k < group.members.size(); ++k) {
      Item& item = items[group.members[k]];
      item.decided = true;
      item.decision = decisions[k];
    }
  }
};

Reloader<Config>::Hooks RateLimitService::config_hooks() {
  options_.config.stats = &stats_;
  Reloader<Config>::Hooks hooks;
  if (options_.folder.empty()) return hooks;  // no configuration: nothing to read
  hooks.read = [this] {
    ConfigFiles files = Config::read(options_.folder);
    const std::uint64_t fingerprint = hash(files.joined());
    return Reloader<Config>::Input{fingerprint, [this, files = std::move(files)] {
                                     Config c = Config::parse(files, options_.config);
                                     if (c.rule_count() == 0 && !options_.allow_empty_config) {
                                       throw RulesError(
                                           options_.folder, 0, 0,
                                           std::string(files.files.empty()
                                                           ? "holds no *.yaml file"
                                                           : "defines no rate limit") +
                                               ": refused, since every call would be "
                                               "answered OK (--allow-empty-rls-config "
                                               "serves it)");
                                     }
                                     return c;
                                   }};
  };
  hooks.refused = [this](std::string_view why, const std::string& error, const Config&,
                         bool same_error) {
    if (same_error) return;  // logged once
    log_(LogLevel::error, "rls: configuration not reloaded (" + std::string(why) +
                              "), the last good one stays: " + error);
  };
  hooks.changed = [this](std::string_view why, const Config& next) {
    log_(LogLevel::info, "rls: configuration reloaded (" + std::string(why) +
                             "): " + std::to_string(next.domain_count()) + " domains, " +
                             std::to_string(next.rule_count()) + " rate limits (" + next.version() +
                             ")");
  };
  return hooks;
}

RateLimitService::RateLimitService(Engine& engine, ServiceOptions options, Log log)
    : engine_(engine), options_(std::move(options)), log_(std::move(log)), config_(config_hooks()) {
  const std::shared_ptr<const Config> c = config_.get();
  if (options_.folder.empty()) {
    log_(LogLevel::warning, "rls: no --rls-config: every domain is unknown, every call OK");
  } else {
    log_(LogLevel::info, "rls: " + std::to_string(c->domain_count()) + " domains, " +
                             std::to_string(c->rule_count()) + " rate limits from " +
                             options_.folder + " (" + c->version() + ")");
  }
}

RateLimitService::~RateLimitService() = default;

Status RateLimitService::decide(const Request& request, Done done, AsyncAcquirer* acquirer) {
  if (request.domain.empty()) return invalid("rate limit domain must not be empty");
  if (request.descriptors.empty()) return invalid("rate limit descriptor list must not be empty");
  if (request.descriptors.size() > options_.max_descriptors) {
    return invalid("a call may carry at most " + std::to_string(options_.max_descriptors) +
                   " descriptors (--rls-max-descriptors), not " +
                   std::to_string(request.descriptors.size()));
  }
  for (std::size_t i = 0; i < request.descriptors.size(); ++i) {
    for (const Entry& e : request.descriptors[i].entries) {
      if (e.key.size() + e.value.size() > options_.max_entry_bytes) {
        return invalid("descriptor " + std::to_string(i) + ": an entry of " +
                       std::to_string(e.key.size() + e.value.size()) +
                       " bytes (key and value), over " + std::to_string(options_.max_entry_bytes));
      }
    }
  }
  for (std::size_t i = 0; i < request.descriptors.size(); ++i) {
    const std::optional<LimitOverride>& o = request.descriptors[i].limit;
    if (o && unit_length(o->unit).count() == 0) {
      return invalid("descriptor " + std::to_string(i) + ": its limit has no unit");
    }
  }
  auto call = std::make_shared<Call>();
  call->config = config_.get();
  call->done = std::move(done);
  call->items.resize(request.descriptors.size());
  const Domain* domain = call->config->domain(request.domain);
  if (domain != nullptr) {
    thread_local Matched matched;
    std::vector<std::string_view> replaced;
    for (std::size_t i = 0; i < request.descriptors.size(); ++i) {
      const RequestDescriptor& d = request.descriptors[i];
      Call::Item& item = call->items[i];
      item.hits = d.hits_addend ? *d.hits_addend : std::max<std::uint32_t>(1, request.hits_addend);
      if (d.limit) {
        // Envoy's override: this limit, counted as the entries name it (never shadow).
        item.current = CurrentLimit{"", d.limit->requests_per_unit, d.limit->unit};
        item.overridden = true;
        item.resource = Config::override_resource(domain->name, d.entries);
        // Its series: the domain and the entries' keys, as a configured path names its
        // descriptor (the request's values would make a series per value).
        std::string key = domain->name;
        for (const Entry& e : d.entries) {
          key += '.';
          key += e.key;
        }
        item.counters = stats_.get(domain->name, key);
        if (d.limit->requests_per_unit == 0) {
          item.kind = Kind::zero;
          continue;
        }
        LimitSpec spec;
        spec.algorithm = options_.config.algorithm;
        spec.failure_policy = options_.config.failure_policy;
        std::variant<Limit, LimitIssue> made =
            unit_limit(spec, d.limit->requests_per_unit, d.limit->unit);
        if (const LimitIssue* issue = std::get_if<LimitIssue>(&made)) {
          return invalid("descriptor " + std::to_string(i) +
                         ": its limit cannot be counted: " + describe(*issue, spec));
        }
        item.limit = std::get<Limit>(made);
        item.kind = Kind::engine;
        continue;
      }
      Config::match(*domain, d.entries, matched);
      const RateLimitRule* rule = matched.rule;
      if (rule == nullptr) continue;
      item.current = CurrentLimit{rule->name, rule->requests_per_unit, rule->unit};
      item.resource = matched.resource;
      item.shadow = rule->shadow;
      item.quota = rule->quota_mode;
      item.counters =
          matched.stat_key.empty() ? rule->counters : stats_.get(domain->name, matched.stat_key);
      item.kind = rule->unlimited ? Kind::unlimited : rule->limit ? Kind::engine : Kind::zero;
      item.limit = rule->limit;
      for (const std::string& r : rule->replaces) replaced.push_back(r);
    }
    // A rate limit that another matched one replaces counts nothing, as if unmatched.
    if (!replaced.empty()) {
      for (std::size_t i = 0; i < call->items.size(); ++i) {
        Call::Item& item = call->items[i];
        if (item.kind == Kind::none || item.current.name.empty() || request.descriptors[i].limit)
          continue;
        if (std::find(replaced.begin(), replaced.end(), item.current.name) != replaced.end()) {
          item = Call::Item{};
        }
      }
    }
    // Which engine calls: all or nothing puts every enforcing descriptor in one, and makes
    // none at all when one is over a limit of 0; each descriptor alone otherwise (and
    // quota_mode ones always, since they never refuse the request).
    bool zero_refuses = false;
    for (const Call::Item& item : call->items) {
      zero_refuses =
          zero_refuses || (item.kind == Kind::zero && item.hits > 0 && !item.shadow && !item.quota);
    }
    Call::Group together;
    for (std::size_t i = 0; i < call->items.size(); ++i) {
      const Call::Item& item = call->items[i];
      if (item.kind != Kind::engine) continue;
      if (options_.each_descriptor || item.quota) {
        call->groups.emplace_back().members.push_back(i);
      } else if (!zero_refuses) {
        together.members.push_back(i);
      }
    }
    if (!together.members.empty()) call->groups.push_back(std::move(together));
    for (Call::Group& g : call->groups) {
      for (const std::size_t i : g.members) {
        const Call::Item& item = call->items[i];
        g.acquisitions.push_back(Acquisition{item.resource, *item.limit, item.hits});
      }
      g.decisions.resize(g.members.size());
    }
    call->pending.fetch_add(call->groups.size(), std::memory_order_relaxed);
    for (Call::Group& g : call->groups) {
      Call* raw = call.get();
      auto then = [this, call, &g](std::size_t, std::span<const Decision> decisions) {
        call->answered(g, decisions);
        if (call->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(*call);
      };
      const std::size_t refused =
          acquirer != nullptr
              ? acquirer->try_acquire_all(g.acquisitions, g.decisions, std::move(then))
              : engine_.try_acquire_all_async(g.acquisitions, g.decisions, std::move(then));
      if (refused != Engine::kPending) {
        raw->answered(g, g.decisions);
        if (raw->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(*raw);
      }
    }
  }
  if (call->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(*call);
  return {};
}

void RateLimitService::finish(Call& call) {
  Response response;
  response.statuses.resize(call.items.size());
  std::size_t shown = call.items.size();  // the status the headers describe
  bool over = false;
  bool over_overridden = false;  // over a limit Envoy gave, which SHADOW_MODE leaves enforced
  // How long a descriptor over its limit stays over (a limit of 0: for good).
  const auto wait = [&call](std::size_t i) {
    const Call::Item& item = call.items[i];
    return item.decided ? item.decision.retry_after : Decision::kNever;
  };
  for (std::size_t i = 0; i < call.items.size(); ++i) {
    const Call::Item& item = call.items[i];
    DescriptorStatus& s = response.statuses[i];
    if (item.kind == Kind::none) continue;
    if (item.kind == Kind::unlimited) {
      s.limit_remaining = UINT32_MAX;
      continue;
    }
    s.current_limit = item.current;
    const std::uint64_t limit = item.current.requests_per_unit;
    bool refused = false;
    bool would = false;  // shadow_mode let it through
    if (item.kind == Kind::zero) {
      refused = item.hits > 0;
      s.duration_until_reset = std::chrono::seconds(0);
    } else if (item.decided) {
      const Decision& d = item.decision;
      would = d.would_reject;
      refused = !d.allowed || d.would_reject;
      s.limit_remaining = refused ? 0 : clamp32(d.remaining);
      s.duration_until_reset = std::chrono::seconds(ceil_seconds(d.reset_after));
    }
    // (An item not decided was not asked: all or nothing, and a limit of 0 refused.)
    if (item.kind == Kind::zero && item.shadow) would = refused;
    s.code = refused && !would ? Code::over_limit : Code::ok;
    if (HitCounters* c = item.counters.get()) {
      HitCounters::add(c->total_hits, item.hits);
      if (refused) {
        HitCounters::add(c->over_limit, item.hits);
        if (would) HitCounters::add(c->shadow_mode, item.hits);
      } else if (item.decided) {
        HitCounters::add(c->within_limit, item.hits);
        const auto threshold =
            static_cast<std::uint64_t>(std::floor(static_cast<double>(limit) * kNearLimitRatio));
        if (limit - std::min<std::uint64_t>(limit, item.decision.remaining) > threshold)
          HitCounters::add(c->near_limit, item.hits);
      }
    }
    if (s.code == Code::over_limit) {
      if (!item.quota) over = true;
      if (item.overridden) over_overridden = true;
      // Of several over their limits, the one whose refusal lasts longest (as the engine
      // reports one), so that Retry-After holds for the whole call.
      if (shown == call.items.size() || response.statuses[shown].code != Code::over_limit ||
          wait(i) >= wait(shown))
        shown = i;
    } else if (shown == call.items.size() ||
               (response.statuses[shown].code != Code::over_limit &&
                s.limit_remaining < response.statuses[shown].limit_remaining)) {
      shown = i;
    }
  }
  response.overall_code =
      over && (!options_.shadow || over_overridden) ? Code::over_limit : Code::ok;
  if (options_.headers != HeaderStyle::none && shown < call.items.size()) {
    const DescriptorStatus& s = response.statuses[shown];
    const std::uint64_t reset =
        s.duration_until_reset ? static_cast<std::uint64_t>(s.duration_until_reset->count()) : 0;
    auto& h = response.response_headers_to_add;
    if (options_.headers == HeaderStyle::draft) {
      h.push_back({"RateLimit-Limit", std::to_string(s.current_limit->requests_per_unit)});
      h.push_back({"RateLimit-Remaining", std::to_string(s.limit_remaining)});
      h.push_back({"RateLimit-Reset", std::to_string(reset)});
    } else {
      std::string policy;
      std::string scratch;
      for (std::size_t i = 0; i < response.statuses.size(); ++i) {
        const DescriptorStatus& p = response.statuses[i];
        if (!p.current_limit) continue;
        if (!policy.empty()) policy += ", ";
        internal::append_policy_item(
            policy, limit_name(*p.current_limit, i, scratch), p.current_limit->requests_per_unit,
            static_cast<std::uint64_t>(unit_length(p.current_limit->unit).count()));
      }
      h.push_back({"RateLimit-Policy", std::move(policy)});
      std::string state;
      internal::append_rate_limit(state, limit_name(*s.current_limit, shown, scratch),
                                  s.limit_remaining, reset, false);
      h.push_back({"RateLimit", std::move(state)});
    }
    if (response.overall_code == Code::over_limit) {
      const Call::Item& item = call.items[shown];
      const std::uint64_t retry =
          item.decided && item.decision.can_ever_pass()
              ? std::max<std::uint64_t>(1, ceil_seconds(item.decision.retry_after))
              : static_cast<std::uint64_t>(unit_length(item.current.unit).count());
      h.push_back({"Retry-After", std::to_string(retry)});
    }
  }
  Done done = std::move(call.done);
  done(std::move(response));
}

void RateLimitService::write_metrics(PrometheusText& out) const {
  const std::vector<HitStats::Series> series = stats_.all();
  const auto labels = [](const HitStats::Series& s) {
    std::string l;
    append_label(l, "domain", s.domain);
    l += ',';
    append_label(l, "key", s.key);
    return l;
  };
  using Field = std::atomic<std::uint64_t> HitCounters::*;
  static constexpr std::pair<const char*, Field> kFields[] = {
      {"total_hits", &HitCounters::total_hits},   {"over_limit", &HitCounters::over_limit},
      {"near_limit", &HitCounters::near_limit},   {"within_limit", &HitCounters::within_limit},
      {"shadow_mode", &HitCounters::shadow_mode},
  };
  for (const auto& [name, field] : kFields) {
    out.family(std::string("ratewin_rls_") + name + "_total", "counter",
               std::string("Hits (hits_addend) of Envoy rate limit service descriptors: ") + name +
                   ", as envoyproxy/ratelimit's stats name them, by domain and configured "
                   "descriptor key (the request's values only where detailed_metric asks)");
    for (const HitStats::Series& s : series)
      out.sample(labels(s),
                 static_cast<double>(((*s.counters).*field).load(std::memory_order_relaxed)));
  }
  write_reload_metrics(
      out,
      ReloadMetricNames{
          .loads = "ratewin_rls_config_reloads_total",
          .outcome_label = "outcome",
          .loads_help = "Loads of the --rls-config folder by outcome: every good one (the first, "
                        "at start, and those of unchanged files included) and every rejected "
                        "one (the last good configuration then serves)",
          .failing = "ratewin_rls_config_error",
          .failing_help = "1 while the last load of --rls-config failed (the last good one serves)",
          .loaded_at = {},
          .loaded_at_help = {},
      },
      config_.figures());
}

}  // namespace ratewin::server::rls
