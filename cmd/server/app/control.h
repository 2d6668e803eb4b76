// The main thread's loop: SIGTERM/SIGINT drain the HTTP loops (and turn the gRPC health
// checks to NOT_SERVING), SIGHUP and changes to the rules file reload the rules, and
// likewise for the --rls-config folder; the refusal log's summary every interval, and
// the status page's rate samples every second.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "http/http_loops.h"
#include "rls/rls_service.h"
#include "service/service.h"

namespace ratewin::server {

class Control {
 public:
  // `rls` may be null (no gRPC listener).
  Control(Service& service, std::vector<std::unique_ptr<HttpLoop>>& loops,
          rls::RateLimitService* rls = nullptr);
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  // Until a stop signal, and the HTTP loops have been told to drain.
  void run();
  // After the HTTP loops have ended: the signal handles go.
  void close();

 private:
  static void on_stop(uv_signal_t* s, int signum);
  static void on_hup(uv_signal_t* s, int);
  static void on_change(uv_fs_event_t* handle, const char*, int, int status);
  static void on_settled(uv_timer_t* t);
  static void on_rls_change(uv_fs_event_t* handle, const char*, int, int status);
  static void on_rls_settled(uv_timer_t* t);
  static void on_refusals_interval(uv_timer_t* t);
  static void on_rates_sample(uv_timer_t* t);
  // A change seen in a watched folder: the reload waits until they settle, the longer
  // wait after a write in place to a file it reads (`ours`: a file half written must not
  // go live; a temporary file written before its rename is not one).
  void changed(uv_timer_t& debounce, bool& in_place, bool ours, int events, uv_timer_cb settled);

  Service& service_;
  std::vector<std::unique_ptr<HttpLoop>>& loops_;
  rls::RateLimitService* rls_;
  uv_loop_t loop_{};
  uv_signal_t sigterm_{}, sigint_{}, sighup_{};
  uv_timer_t debounce_{};
  uv_fs_event_t watch_{};
  bool in_place_ = false;  // a write in place since the last reload
  std::string rules_name_;  // the rules file's name in its folder
  uv_timer_t rls_debounce_{};
  uv_fs_event_t rls_watch_{};
  bool rls_in_place_ = false;
  uv_timer_t refusals_timer_{};  // Refusals::roll(), every interval
  uv_timer_t rates_timer_{};     // Service::sample_rates(), every second
  bool stopping_ = false;
};

}  // namespace ratewin::server
