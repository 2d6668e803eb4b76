#include "app/control.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>

#include "common/log.h"

namespace ratewin::server {

Control::Control(Service& service, std::vector<std::unique_ptr<HttpLoop>>& loops,
                 rls::RateLimitService* rls)
    : service_(service), loops_(loops), rls_(rls) {
  uv_loop_init(&loop_);
  for (uv_signal_t* s : {&sigterm_, &sigint_, &sighup_}) {
    uv_signal_init(&loop_, s);
    s->data = this;
  }
  uv_signal_start(&sigterm_, on_stop, SIGTERM);
  uv_signal_start(&sigint_, on_stop, SIGINT);
  uv_signal_start(&sighup_, on_hup, SIGHUP);
  uv_timer_init(&loop_, &debounce_);
  debounce_.data = this;
  uv_fs_event_init(&loop_, &watch_);
  watch_.data = this;
  uv_timer_init(&loop_, &rls_debounce_);
  rls_debounce_.data = this;
  uv_fs_event_init(&loop_, &rls_watch_);
  rls_watch_.data = this;
  // The status page's rates: a sample of the counts every second.
  uv_timer_init(&loop_, &rates_timer_);
  rates_timer_.data = this;
  service_.sample_rates(std::chrono::steady_clock::now());
  uv_timer_start(&rates_timer_, on_rates_sample, 1000, 1000);
  // The refusal log's summary, every interval.
  uv_timer_init(&loop_, &refusals_timer_);
  refusals_timer_.data = this;
  const Refusals& refusals = service_.refusals();
  if (refusals.options().max_keys != 0) {
    const auto every = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(refusals.options().interval).count());
    uv_timer_start(&refusals_timer_, on_refusals_interval, every, every);
  }
  if (rls_ != nullptr && !rls_->folder().empty()) {
    // The folder itself: its files are added, replaced and removed (or a ConfigMap's
    // symlink swapped) there.
    const std::string folder = std::filesystem::absolute(rls_->folder()).string();
    const int rc = uv_fs_event_start(&rls_watch_, on_rls_change, folder.c_str(), 0);
    if (rc != 0) {
      log(LogLevel::warning,
          std::string("cannot watch the --rls-config folder (SIGHUP still reloads): ") +
              uv_strerror(rc));
    }
  }
  if (!service_.rules_path().empty()) {
    // The directory, not the file: editors and deploy tools replace the file (a new
    // inode), which a watch on the old one would miss.
    const std::filesystem::path path = std::filesystem::absolute(service_.rules_path());
    rules_name_ = path.filename().string();
    const int rc = uv_fs_event_start(&watch_, on_change, path.parent_path().c_str(), 0);
    if (rc != 0) {
      log(LogLevel::warning,
          std::string("cannot watch the rules file (SIGHUP still reloads): ") + uv_strerror(rc));
    }
  }
}

Control::~Control() { uv_loop_close(&loop_); }

void Control::run() { uv_run(&loop_, UV_RUN_DEFAULT); }

void Control::close() {
  for (uv_signal_t* h : {&sigterm_, &sigint_, &sighup_})
    uv_close(reinterpret_cast<uv_handle_t*>(h), nullptr);
  uv_run(&loop_, UV_RUN_DEFAULT);
}

void Control::on_stop(uv_signal_t* s, int signum) {
  auto* self = static_cast<Control*>(s->data);
  if (self->stopping_) {
    log(LogLevel::info, "already draining");  // a second signal must not kill us
    return;
  }
  self->stopping_ = true;
  log(LogLevel::info, std::string(signum == SIGTERM ? "SIGTERM" : "SIGINT") +
                          ": draining in-flight requests, then exiting");
  for (auto& w : self->loops_) w->drain();
  // The signal handles stay (a repeated signal is ignored) but no longer keep the
  // loop alive: it ends with the HTTP loops' drain.
  for (uv_signal_t* h : {&self->sigterm_, &self->sigint_, &self->sighup_})
    uv_unref(reinterpret_cast<uv_handle_t*>(h));
  for (uv_handle_t* h : {reinterpret_cast<uv_handle_t*>(&self->debounce_),
                         reinterpret_cast<uv_handle_t*>(&self->watch_),
                         reinterpret_cast<uv_handle_t*>(&self->rls_debounce_),
                         reinterpret_cast<uv_handle_t*>(&self->rls_watch_),
                         reinterpret_cast<uv_handle_t*>(&self->refusals_timer_),
                         reinterpret_cast<uv_handle_t*>(&self->rates_timer_)}) {
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  }
}

void Control::on_rates_sample(uv_timer_t* t) {
  auto* self = static_cast<Control*>(t->data);
  self->service_.sample_rates(std::chrono::steady_clock::now());
}

void Control::on_refusals_interval(uv_timer_t* t) {
  auto* self = static_cast<Control*>(t->data);
  self->service_.refusals().roll(Refusals::Clock::now());
}

void Control::on_hup(uv_signal_t* s, int) {
  auto* self = static_cast<Control*>(s->data);
  self->service_.reload("SIGHUP");
  if (self->rls_ != nullptr) self->rls_->reload("SIGHUP");
}

void Control::changed(uv_timer_t& debounce, bool& in_place, bool ours, int events,
                      uv_timer_cb settled) {
  // A save is often several events (truncate, write, rename): reload once they settle.
  // A file renamed into place (or a symlink swapped) is whole at once; one written in
  // place may be half written (a deploy tool that flushes part, then the rest): it is
  // reloaded only once it has stood unchanged for the settle time.
  if (ours && (events & UV_CHANGE) != 0) in_place = true;
  uv_timer_start(&debounce, settled, in_place ? service_.reload_settle_ms() : 100, 0);
}

void Control::on_change(uv_fs_event_t* handle, const char* name, int events, int status) {
  // Any change in the directory: the file may be reached through a symlink swapped
  // there (a Kubernetes ConfigMap). Unchanged bytes are not a new version.
  if (status < 0) return;
  auto* self = static_cast<Control*>(handle->data);
  self->changed(self->debounce_, self->in_place_, name == nullptr || name == self->rules_name_,
                events, on_settled);
}

void Control::on_settled(uv_timer_t* t) {
  auto* self = static_cast<Control*>(t->data);
  self->in_place_ = false;
  self->service_.reload("file changed", ReloadCause::watch);
}

void Control::on_rls_change(uv_fs_event_t* handle, const char* name, int events, int status) {
  if (status < 0) return;
  auto* self = static_cast<Control*>(handle->data);
  const std::string_view file = name != nullptr ? name : ".yaml";
  self->changed(self->rls_debounce_, self->rls_in_place_,
                file.ends_with(".yaml") || file.ends_with(".yml"), events, on_rls_settled);
}

void Control::on_rls_settled(uv_timer_t* t) {
  auto* self = static_cast<Control*>(t->data);
  self->rls_in_place_ = false;
  self->rls_->reload("file changed", ReloadCause::watch);
}

}  // namespace ratewin::server
