// GrpcFront with gRPC: the asynchronous (completion queue) API on threads of its own, so
// that a call waits on the engine's asynchronous admission without holding a thread, and
// gRPC's own health service.
#include "rls/grpc_front.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

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
    if (s.duration_until_reset)
      status->mutable_duration_until_reset()->set_seconds(s.duration_until_reset->count());
  }
  for (const rls::Header& h : in.response_headers_to_add) {
    envoy::config::core::v3::HeaderValue* header = out.add_response_headers_to_add();
    header->set_key(h.key);
    header->set_value(h.value);
  }
}

// One ShouldRateLimit call, from its arrival to its answer, on a completion queue of
// this front's own threads: the classic asynchronous server, which hands a call to the
// thread that polls its queue with no other hop (gRPC's callback API adds an executor's).
class Call {
 public:
  Call(pb::RateLimitService::AsyncService& service, grpc::ServerCompletionQueue& queue,
       rls::RateLimitService& rls)
      : service_(service), queue_(queue), rls_(rls), responder_(&context_) {
    service_.RequestShouldRateLimit(&context_, &request_, &responder_, &queue_, &queue_, this);
  }

  // The queue's event for this call: its arrival, or its answer sent. `ok` is false for a
  // call that never came (the server is shutting down) or could not be answered.
  void proceed(bool ok) {
    if (answered_ || !ok) {
      delete this;
      return;
    }
    new Call(service_, queue_, rls_);  // the next call's slot
    rls::Request r;
    r.domain = request_.domain();
    r.hits_addend = request_.hits_addend();
    r.descriptors.resize(static_cast<std::size_t>(request_.descriptors_size()));
    for (int i = 0; i < request_.descriptors_size(); ++i) {
      const auto& d = request_.descriptors(i);
      rls::RequestDescriptor& out = r.descriptors[static_cast<std::size_t>(i)];
      out.entries.reserve(static_cast<std::size_t>(d.entries_size()));
      for (const auto& e : d.entries()) out.entries.push_back(rls::Entry{e.key(), e.value()});
      if (d.has_limit()) {
        out.limit = rls::LimitOverride{d.limit().requests_per_unit(),
                                       static_cast<rls::Unit>(d.limit().unit())};
      }
      if (d.has_hits_addend()) out.hits_addend = d.hits_addend().value();
    }
    answered_ = true;
    // The answer may come before decide() returns, or later on the engine's I/O thread:
    // either thread may finish the call (once).
    const Status problem = rls_.decide(r, [this](rls::Response&& answer) {
      fill(response_, answer);
      responder_.Finish(response_, grpc::Status::OK, this);
    });
    if (!problem.ok()) {
      responder_.FinishWithError(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, problem.message()), this);
    }
  }

 private:
  pb::RateLimitService::AsyncService& service_;
  grpc::ServerCompletionQueue& queue_;
  rls::RateLimitService& rls_;
  grpc::ServerContext context_;
  pb::RateLimitRequest request_;
  pb::RateLimitResponse response_;
  grpc::ServerAsyncResponseWriter<pb::RateLimitResponse> responder_;
  bool answered_ = false;
};

class Front final : public GrpcFront {
 public:
  Front(rls::RateLimitService& service, const std::string& address, unsigned threads) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    // No SO_REUSEPORT: a second server on the same port must fail, not share it.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&async_);
    for (unsigned i = 0; i < threads; ++i) queues_.push_back(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      throw std::runtime_error("--grpc-listen " + address +
                               ": cannot listen there (in use, or "
                               "not an address of this host?)");
    }
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    for (const char* name : {"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"})
      health->SetServingStatus(name, true);
    for (auto& queue : queues_) {
      // A few calls waiting per thread, so that arrivals need not wait for a new slot.
      for (int i = 0; i < 8; ++i) new Call(async_, *queue, service);
      threads_.emplace_back([q = queue.get()] {
        void* tag = nullptr;
        bool ok = false;
        while (q->Next(&tag, &ok)) static_cast<Call*>(tag)->proceed(ok);
      });
    }
  }
  ~Front() override { stop(std::chrono::milliseconds(0)); }

  int port() const override { return port_; }
  void draining() override {
    if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  }
  void stop(std::chrono::milliseconds timeout) override {
    if (!server_) return;
    draining();
    // Calls in flight finish (their answers still come from the engine) until the
    // deadline; then the queues drain their events, which free the calls.
    server_->Shutdown(std::chrono::system_clock::now() + timeout);
    for (auto& queue : queues_) queue->Shutdown();
    for (std::thread& t : threads_) t.join();
    server_.reset();
  }

 private:
  pb::RateLimitService::AsyncService async_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace

bool GrpcFront::available() noexcept { return true; }

std::unique_ptr<GrpcFront> GrpcFront::start(rls::RateLimitService& service,
                                            const std::string& address, unsigned threads) {
  return std::make_unique<Front>(service, address, std::max(1U, threads));
}

}  // namespace ratewin::server
