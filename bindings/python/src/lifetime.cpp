#include "lifetime.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace ratewin::python {
namespace {

thread_local bool running_callback = false;

// Deletes what reap() is given, on a thread of its own.
class Reaper {
 public:
  static Reaper& instance() {
    static auto* reaper = new Reaper();  // never destroyed: it may outlive static cleanup
    return *reaper;
  }

  void adopt(std::shared_ptr<void> last) noexcept {
    try {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(last));
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      wake_.notify_one();
    } catch (...) {
      // Out of memory or threads: keep the object alive rather than delete it unsafely.
      new std::shared_ptr<void>(std::move(last));
    }
  }

  void drain() {
    std::unique_lock lock(mutex_);
    drained_.wait(lock, [this] { return queue_.empty() && busy_ == 0; });
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return !queue_.empty(); });
      std::shared_ptr<void> next = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      lock.unlock();
      next.reset();  // deletes: joins the engine's threads, without the GIL
      lock.lock();
      --busy_;
      if (queue_.empty() && busy_ == 0) drained_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<std::shared_ptr<void>> queue_;
  std::size_t busy_ = 0;
  bool started_ = false;
};

// Whether our threads may still take the GIL, and how many are taking it (a PyCallback
// between its pass and its end, a without_gil between its work and the GIL back). Never
// destroyed: engine threads may use it during static cleanup.
struct Gate {
  std::mutex mutex;
  std::condition_variable idle;
  bool stopped = false;
  std::size_t passing = 0;
  std::size_t returning = 0;
  unsigned long main_thread = 0;  // as PyThread_get_thread_ident() gives it
};
Gate& gate() {
  static auto* g = new Gate();
  return *g;
}

}  // namespace

bool in_engine_callback() noexcept { return running_callback; }

bool finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

void reap(std::shared_ptr<void> last) noexcept { Reaper::instance().adopt(std::move(last)); }

void drain_reaped() { Reaper::instance().drain(); }

PyCallback::Pass::Pass() noexcept {
  Gate& g = gate();
  const std::lock_guard lock(g.mutex);
  granted_ = !g.stopped && Py_IsInitialized() != 0 && !finalizing();
  if (granted_) ++g.passing;
}

PyCallback::Pass::~Pass() {
  if (!granted_) return;
  Gate& g = gate();
  const std::lock_guard lock(g.mutex);
  if (--g.passing == 0 && g.returning == 0) g.idle.notify_all();
}

PyCallback::Running::Running() noexcept { running_callback = true; }
PyCallback::Running::~Running() { running_callback = false; }

PyCallback::~PyCallback() {
  PyObject* object = fn_.release().ptr();
  if (Py_IsInitialized() == 0 || finalizing()) return;  // going away: leak it
  if (PyGILState_Check() != 0) {
    Py_DECREF(object);
    return;
  }
  // If the queue of pending calls is full, the reference leaks.
  Py_AddPendingCall(
      [](void* o) {
        Py_DECREF(static_cast<PyObject*>(o));
        return 0;
      },
      object);
}

GilReturn::GilReturn() noexcept {
  Gate& g = gate();
  std::unique_lock lock(g.mutex);
  if (g.stopped && PyThread_get_thread_ident() != g.main_thread) {
    lock.unlock();
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // until the process ends
  }
  ++g.returning;
}

GilReturn::~GilReturn() {
  Gate& g = gate();
  const std::lock_guard lock(g.mutex);
  if (--g.returning == 0 && g.passing == 0) g.idle.notify_all();
}

void callbacks_stop() {
  Gate& g = gate();
  // Not without_gil: this thread must take the GIL back whatever the gate says.
  PyThreadState* state = PyEval_SaveThread();
  {
    std::unique_lock lock(g.mutex);
    g.stopped = true;
    g.idle.wait(lock, [&] { return g.passing == 0 && g.returning == 0; });
  }
  PyEval_RestoreThread(state);
}

void note_main_thread() {
  const py::object main = py::module_::import("threading").attr("main_thread")();
  gate().main_thread = main.attr("ident").cast<unsigned long>();
}

}  // namespace ratewin::python
