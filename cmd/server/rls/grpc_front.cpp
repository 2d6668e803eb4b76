// GrpcFront with gRPC: the callback API, so that a call waits on the engine's
// asynchronous admission without holding a thread, and gRPC's own health service.
#include "grpc_front.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <stdexcept>
#include <utility>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace ratewin::server {

namespace {

namespace pb = envoy::service::ratelimit::v3;

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
    if (s.duration_until_reset) status->mutable_duration_until_reset()->set_seconds(s.duration_until_reset->count());
  }
  for (const rls::Header& h : in.response_headers_to_add) {
    envoy::config::core::v3::HeaderValue* header = out.add_response_headers_to_add();
    header->set_key(h.key);
    header->set_value(h.value);
  }
}

class RlsCalls final : public pb::RateLimitService::CallbackService {
 public:
  explicit RlsCalls(rls::RateLimitService& service) : service_(service) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    rls::Request r;
    r.domain = request->domain();
    r.hits_addend = request->hits_addend();
    r.descriptors.resize(static_cast<std::size_t>(request->descriptors_size()));
    for (int i = 0; i < request->descriptors_size(); ++i) {
      const auto& d = request->descriptors(i);
      rls::RequestDescriptor& out = r.descriptors[static_cast<std::size_t>(i)];
      out.entries.reserve(static_cast<std::size_t>(d.entries_size()));
      for (const auto& e : d.entries()) out.entries.push_back(rls::Entry{e.key(), e.value()});
      if (d.has_limit()) {
        out.limit = rls::LimitOverride{d.limit().requests_per_unit(),
                                       static_cast<rls::Unit>(d.limit().unit())};
      }
      if (d.has_hits_addend()) out.hits_addend = d.hits_addend().value();
    }
    // The request and response live until Finish; `done` may run on the engine's I/O
    // thread, before or after this returns.
    const std::optional<std::string> problem =
        service_.decide(r, [reactor, response](rls::Response&& answer) {
          fill(*response, answer);
          reactor->Finish(grpc::Status::OK);
        });
    if (problem) reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, *problem));
    return reactor;
  }

 private:
  rls::RateLimitService& service_;
};

class Front final : public GrpcFront {
 public:
  Front(rls::RateLimitService& service, const std::string& address) : calls_(service) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    // No SO_REUSEPORT: a second server on the same port must fail, not share it.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&calls_);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      throw std::runtime_error("--grpc-listen " + address + ": cannot listen there (in use, or "
                               "not an address of this host?)");
    }
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    for (const char* name : {"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"})
      health->SetServingStatus(name, true);
  }
  ~Front() override { stop(std::chrono::milliseconds(0)); }

  int port() const override { return port_; }
  void draining() override {
    if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  }
  void stop(std::chrono::milliseconds timeout) override {
    if (!server_) return;
    draining();
    server_->Shutdown(std::chrono::system_clock::now() + timeout);
    server_->Wait();
    server_.reset();
  }

 private:
  RlsCalls calls_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace

bool GrpcFront::available() noexcept { return true; }

std::unique_ptr<GrpcFront> GrpcFront::start(rls::RateLimitService& service, const std::string& address) {
  return std::make_unique<Front>(service, address);
}

}  // namespace ratewin::server
