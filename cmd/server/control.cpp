#include "control.h"

#include <csignal>
#include <filesystem>
#include <string>

#include "log.h"

namespace ratewin::server {

Control::Control(Service& service, std::vector<std::unique_ptr<Worker>>& workers,
                 rls::RateLimitService* rls, GrpcFront* grpc)
    : service_(service), workers_(workers), rls_(rls), grpc_(grpc) {
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
  for (auto& w : self->workers_) w->drain();
  if (self->grpc_ != nullptr) self->grpc_->draining();
  // The signal handles stay (a repeated signal is ignored) but no longer keep the
  // loop alive: it ends with the workers' drain.
  for (uv_signal_t* h : {&self->sigterm_, &self->sigint_, &self->sighup_})
    uv_unref(reinterpret_cast<uv_handle_t*>(h));
  for (uv_handle_t* h : {reinterpret_cast<uv_handle_t*>(&self->debounce_),
                         reinterpret_cast<uv_handle_t*>(&self->watch_),
                         reinterpret_cast<uv_handle_t*>(&self->rls_debounce_),
                         reinterpret_cast<uv_handle_t*>(&self->rls_watch_)}) {
    if (!uv_is_closing(h)) uv_close(h, nullptr);
  }
}

void Control::on_hup(uv_signal_t* s, int) {
  auto* self = static_cast<Control*>(s->data);
  self->service_.reload("SIGHUP");
  if (self->rls_ != nullptr) self->rls_->reload("SIGHUP");
}

void Control::on_change(uv_fs_event_t* handle, const char*, int, int status) {
  auto* self = static_cast<Control*>(handle->data);
  // Any change in the directory: the file may be reached through a symlink swapped
  // there (a Kubernetes ConfigMap). Unchanged bytes are not a new version.
  if (status < 0) return;
  // A save is often several events (truncate, write, rename): reload once they settle.
  uv_timer_start(&self->debounce_, on_settled, 100, 0);
}

void Control::on_settled(uv_timer_t* t) {
  static_cast<Control*>(t->data)->service_.reload("file changed");
}

void Control::on_rls_change(uv_fs_event_t* handle, const char*, int, int status) {
  if (status < 0) return;
  auto* self = static_cast<Control*>(handle->data);
  uv_timer_start(&self->rls_debounce_, on_rls_settled, 100, 0);
}

void Control::on_rls_settled(uv_timer_t* t) {
  static_cast<Control*>(t->data)->rls_->reload("file changed");
}

}  // namespace ratewin::server
