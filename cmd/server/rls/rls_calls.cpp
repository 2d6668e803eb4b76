#include "rls/rls_calls.h"

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "grpc/health/v1/health.pb.h"

namespace ratewin::server {

namespace {

namespace pb = envoy::service::ratelimit::v3;

constexpr std::string_view kShouldRateLimit =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
constexpr std::string_view kHealthCheck = "/grpc.health.v1.Health/Check";
constexpr std::string_view kHealthWatch = "/grpc.health.v1.Health/Watch";
using Health = grpc::health::v1::HealthCheckResponse;

pb::RateLimitResponse::Code code_of(rls::Code code) {
  switch (code) {
    case rls::Code::ok:
      return pb::RateLimitResponse::OK;
    case rls::Code::over_limit:
      return pb::RateLimitResponse::OVER_LIMIT;
    case rls::Code::unknown:
      break;
  }
  return pb::RateLimitResponse::UNKNOWN;
}

// A unit as the protocol numbers it (a 32-bit enum), unknown past the last one.
rls::Unit unit_of(int unit) {
  return unit > 0 && unit <= static_cast<int>(rls::Unit::week) ? static_cast<rls::Unit>(unit)
                                                              : rls::Unit::unknown;
}

void fill(pb::RateLimitResponse& out, const rls::Response& in) {
  out.set_overall_code(code_of(in.overall_code));
  for (const rls::DescriptorStatus& s : in.statuses) {
    pb::RateLimitResponse::DescriptorStatus* status = out.add_statuses();
    status->set_code(code_of(s.code));
    if (s.current_limit) {
      pb::RateLimitResponse::RateLimit* limit = status->mutable_current_limit();
      limit->set_name(s.current_limit->name);
      limit->set_requests_per_unit(s.current_limit->requests_per_unit);
      limit->set_unit(static_cast<pb::RateLimitResponse::RateLimit::Unit>(s.current_limit->unit));
    }
    status->set_limit_remaining(s.limit_remaining);
    if (s.duration_until_reset)
      status->mutable_duration_until_reset()->set_seconds(s.duration_until_reset->count());
  }
  for (const rls::Header& h : in.response_headers_to_add) {
    envoy::config::core::v3::HeaderValue* header = out.add_response_headers_to_add();
    header->set_key(h.key);
    header->set_value(h.value);
  }
}

class RlsCalls final : public GrpcHandler {
 public:
  RlsCalls(rls::RateLimitService& service, Engine& engine, uv_loop_s* loop) : service_(service) {
    if (loop != nullptr && engine.stats().store)
      acquirer_ = std::make_unique<AsyncAcquirer>(engine, loop);
  }

  void call(const GrpcCall& call, GrpcResponder responder) override {
    if (call.method == kShouldRateLimit) return should_rate_limit(call, std::move(responder));
    if (call.method == kHealthCheck) return health(call, responder);
    if (call.method == kHealthWatch) return watch(call, std::move(responder));
    responder.fail(GrpcCode::unimplemented, "unknown method " + std::string(call.method));
  }

  // Each watch of a known service gets NOT_SERVING, then every watch ends with
  // UNAVAILABLE: the server is going away, and a watcher is to reconnect (to another
  // server). gRPC's own servers send NOT_SERVING and keep the stream until their
  // connections close, which their clients see as UNAVAILABLE too; here the watch ends
  // at once, so it does not hold the drain until its deadline. (Not OK: by its contract
  // a watch never ends while the server serves, and OK would read as a normal end.) An
  // unknown service's status does not change: its watch only ends.
  void drain() override {
    draining_ = true;
    std::vector<Watcher> watchers;
    watchers.swap(watchers_);  // (each end may close a connection, and close() the loop)
    for (Watcher& w : watchers) {
      if (w.known) w.responder.send(health_response(Health::NOT_SERVING));
      w.responder.fail(GrpcCode::unavailable, "the server is shutting down");
    }
  }

  void close() override {
    watchers_.clear();  // (their connections have closed: nothing is sent)
    if (acquirer_) acquirer_->close();  // what is in flight is answered now
  }

 private:
  void should_rate_limit(const GrpcCall& call, GrpcResponder responder) {
    pb::RateLimitRequest& request = request_;
    if (!request.ParseFromArray(call.message.data(), static_cast<int>(call.message.size())))
      return responder.fail(GrpcCode::invalid_argument,
                            "not a RateLimitRequest (or a string in it is not UTF-8)");
    rls::Request r;
    r.domain = request.domain();
    r.hits_addend = request.hits_addend();
    r.descriptors.resize(static_cast<std::size_t>(request.descriptors_size()));
    for (int i = 0; i < request.descriptors_size(); ++i) {
      const auto& d = request.descriptors(i);
      rls::RequestDescriptor& out = r.descriptors[static_cast<std::size_t>(i)];
      out.entries.reserve(static_cast<std::size_t>(d.entries_size()));
      for (const auto& e : d.entries()) out.entries.push_back(rls::Entry{e.key(), e.value()});
      if (d.has_limit())
        out.limit = rls::LimitOverride{d.limit().requests_per_unit(), unit_of(d.limit().unit())};
      if (d.has_hits_addend()) out.hits_addend = d.hits_addend().value();
    }
    // The answer comes before decide() returns, or later on this loop.
    auto held = std::make_shared<GrpcResponder>(std::move(responder));
    const Status problem = service_.decide(
        r,
        [held](rls::Response&& answer) {
          pb::RateLimitResponse response;
          fill(response, answer);
          held->finish(response.SerializeAsString());
        },
        acquirer_.get());
    if (!problem.ok()) held->fail(GrpcCode::invalid_argument, problem.message());
  }

  // The service a health call names: known (the whole server, "", and the rate limit
  // service by either name) or not, its name; none when the request is not one (the call
  // has failed).
  static std::optional<std::pair<bool, std::string>> service(const GrpcCall& call,
                                                             GrpcResponder& responder) {
    grpc::health::v1::HealthCheckRequest request;
    if (!request.ParseFromArray(call.message.data(), static_cast<int>(call.message.size()))) {
      responder.fail(GrpcCode::invalid_argument, "not a HealthCheckRequest");
      return std::nullopt;
    }
    std::string& name = *request.mutable_service();
    const bool known = name.empty() || name == "envoy.service.ratelimit.v3.RateLimitService" ||
                       name == "ratelimit";
    return std::make_pair(known, std::move(name));
  }

  static std::string health_response(Health::ServingStatus status) {
    Health response;
    response.set_status(status);
    return response.SerializeAsString();
  }

  // SERVING once started, NOT_SERVING from the drain on.
  Health::ServingStatus status() const {
    return draining_ ? Health::NOT_SERVING : Health::SERVING;
  }

  void health(const GrpcCall& call, GrpcResponder& responder) const {
    const auto named = service(call, responder);
    if (!named) return;
    if (!named->first) return responder.fail(GrpcCode::not_found, "unknown service " + named->second);
    responder.finish(health_response(status()));
  }

  // The status at once, then each change, the stream kept open until the client cancels
  // or the server drains. An unknown service is SERVICE_UNKNOWN (as grpc's health.proto
  // says, not an error: the service may be added later).
  void watch(const GrpcCall& call, GrpcResponder responder) {
    const auto named = service(call, responder);
    if (!named) return;
    const bool known = named->first;
    responder.send(health_response(known ? status() : Health::SERVICE_UNKNOWN));
    if (draining_) return responder.fail(GrpcCode::unavailable, "the server is shutting down");
    if (watchers_.size() >= sweep_at_) {
      // Watches cancelled since (or whose connection closed) are dropped now and then,
      // so the list stays within twice the watches open.
      std::erase_if(watchers_, [](const Watcher& w) { return !w.responder.waiting(); });
      sweep_at_ = std::max<std::size_t>(64, 2 * watchers_.size());
    }
    watchers_.push_back(Watcher{std::move(responder), known});
  }

  struct Watcher {
    GrpcResponder responder;
    bool known;  // a known service: its status changes with the drain
  };

  rls::RateLimitService& service_;
  std::unique_ptr<AsyncAcquirer> acquirer_;  // with a loop and a store
  pb::RateLimitRequest request_;  // reused: its strings keep their room from call to call
  bool draining_ = false;
  std::vector<Watcher> watchers_;  // Health/Watch streams open (and some ended since)
  std::size_t sweep_at_ = 64;      // watchers_'s size at which the ended ones are dropped
};

}  // namespace

bool rls_calls_available() noexcept { return true; }

std::unique_ptr<GrpcHandler> make_rls_calls(rls::RateLimitService& service, Engine& engine,
                                            uv_loop_s* loop) {
  // protobuf logs every message it cannot parse (a string that is not UTF-8), one line a
  // call: a client could fill the log. The call's INVALID_ARGUMENT says it instead.
  static std::once_flag quiet;
  std::call_once(quiet, [] { google::protobuf::SetLogHandler(nullptr); });
  return std::make_unique<RlsCalls>(service, engine, loop);
}

}  // namespace ratewin::server
