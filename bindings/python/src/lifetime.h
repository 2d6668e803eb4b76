// How the module's C++ objects live and die beside the interpreter: engines and limiter
// handles deleted where that cannot deadlock or abort, the GIL given up around engine
// calls, and every Python callable the engines' threads call (the logger, the callbacks
// of asynchronous decisions) behind one guard that never takes the GIL once the
// interpreter has begun to exit.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "bindings.h"

namespace ratewin::python {

// Set while this thread runs a PyCallback: an engine's own thread, which must not delete
// (join) its engine.
bool in_engine_callback() noexcept;

// Whether the interpreter is finalizing.
bool finalizing() noexcept;

// Hands `last` to a thread of its own that drops it, for the engines and handles whose
// last reference goes where deleting them is unsafe: under the GIL (their threads may be
// waiting for it to call the logger), in a destructor (which must not give the GIL up
// and take it back), or on one of the engine's own threads (which cannot join itself).
void reap(std::shared_ptr<void> last) noexcept;
// Blocks until everything handed to reap() so far is deleted. Call without the GIL.
void drain_reaped();

// A Python callable that the engines' threads call. Calling takes the GIL, unless the
// interpreter has begun to exit (callbacks_stop() ran, or it is finalizing): then the
// call is skipped, as taking the GIL then would end the thread by unwinding it. Errors
// it raises are reported as unraisable, naming `what`. Its reference is dropped without
// taking the GIL (in destructors, on any thread): at once when the GIL is held, else by
// the main thread through Py_AddPendingCall; leaked once the interpreter is going away.
class PyCallback {
 public:
  PyCallback(py::object fn, const char* what) : fn_(std::move(fn)), what_(what) {}
  PyCallback(const PyCallback&) = delete;
  PyCallback& operator=(const PyCallback&) = delete;
  ~PyCallback();

  template <class... Args>
  void operator()(Args&&... args) const {
    const Pass pass;
    if (!pass.granted()) return;
    const py::gil_scoped_acquire gil;
    const Running running;
    try {
      fn_(std::forward<Args>(args)...);
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable(what_);
    } catch (const std::exception& error) {  // a conversion that failed
      PyErr_SetString(PyExc_RuntimeError, error.what());
      py::error_already_set(/*fetches it*/).discard_as_unraisable(what_);
    }
  }

 private:
  // Leave to take the GIL for one call: refused once callbacks stopped; held, it keeps
  // callbacks_stop() waiting.
  class Pass {
   public:
    Pass() noexcept;
    ~Pass();
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    bool granted() const noexcept { return granted_; }

   private:
    bool granted_;
  };
  // Marks the thread as in a callback (in_engine_callback) for the call.
  struct Running {
    Running() noexcept;
    ~Running();
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;
  };

  py::object fn_;
  const char* what_;
};

// Stops every PyCallback and every GilReturn of a thread other than the main thread for
// good, waiting (without the GIL, which it is called with) for those under way to end.
// Run at interpreter exit, after the engines are closed and before finalization: from
// then on no thread of ours takes the GIL, so none is unwound by finalization.
void callbacks_stop();

// Records the main thread (for GilReturn). Called once, when the module loads.
void note_main_thread();

// Taking the GIL back after a call made without it (without_gil), counted so that
// callbacks_stop() waits for it. Once callbacks_stop() ran, a thread other than the main
// thread never takes it back: during finalization that would end the thread by unwinding
// its stack through frames that hold Python references (a crash); constructing a
// GilReturn then parks the thread until the process ends, as Python 3.14 does itself.
class GilReturn {
 public:
  GilReturn() noexcept;
  ~GilReturn();
  GilReturn(const GilReturn&) = delete;
  GilReturn& operator=(const GilReturn&) = delete;
};

// Runs `work` (which must not touch Python) without the GIL and returns its result. Not
// a scoped guard on purpose: the GIL is taken back only after GilReturn let the thread
// through, and never from a destructor.
template <class Work>
auto without_gil(Work&& work) -> decltype(work()) {
  std::optional<decltype(work())> result;
  std::exception_ptr error;
  PyThreadState* state = PyEval_SaveThread();
  try {
    result.emplace(work());
  } catch (...) {
    error = std::current_exception();
  }
  const GilReturn back;
  PyEval_RestoreThread(state);
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// An engine or limiter handle owned by shared_ptrs whose deleter never touches the GIL:
// it deletes at once when the thread holds no GIL and is not one of the engine's own,
// and reaps the object otherwise.
template <class T>
std::shared_ptr<T> deleted_safely(T* object) {
  return std::shared_ptr<T>(object, [](T* p) {
    const bool holds_gil = Py_IsInitialized() != 0 && PyGILState_Check() != 0;
    if (in_engine_callback() || holds_gil) {
      reap(std::shared_ptr<void>(p, [](void* q) { delete static_cast<T*>(q); }));
    } else {
      delete p;
    }
  });
}

// The Python object that owns an engine or a limiter handle: open until close(), and
// listed meanwhile (for close_each; guarded by the GIL). Closing drops the object at once
// without the GIL, so that close() returns once the engine's threads are gone (reaped
// instead on one of those threads: close() called from the logger); destruction always
// reaps it, as a destructor must not give up the GIL and take it back. The list is
// updated first in both, before anything could release the GIL.
template <class Self, class T>
class Owner {
 public:
  static std::unordered_set<Self*>& open() {
    static auto* objects = new std::unordered_set<Self*>();  // never destroyed
    return *objects;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;

  void close() {
    forget();
    std::shared_ptr<T> last = std::move(object_);
    if (!last) return;
    if (in_engine_callback()) {
      reap(std::move(last));
      return;
    }
    without_gil([&] {
      last.reset();
      return 0;
    });
  }
  bool closed() const noexcept { return !object_; }

 protected:
  Owner() = default;
  ~Owner() {
    forget();
    if (object_) reap(std::move(object_));
  }
  // Takes the object and lists the owner as open: the last step of a constructor.
  void own(std::shared_ptr<T> object) {
    object_ = std::move(object);
    open().insert(static_cast<Self*>(this));
  }

  std::shared_ptr<T> object_;

 private:
  void forget() { open().erase(static_cast<Self*>(this)); }
};

// Closes every owner still open (which close() takes off the list); the GIL is held.
// One at a time, each held by a reference while it closes: closing releases the GIL, and
// meanwhile other threads may drop, close or open others.
template <class T>
void close_each(std::unordered_set<T*>& open) {
  while (!open.empty()) {
    T* object = *open.begin();
    const py::object keep = py::cast(object, py::return_value_policy::reference);
    object->close();
  }
}

// __enter__ (returns the object) and __exit__ (closes it) for a class with close().
template <class T>
void def_context_manager(py::class_<T>& cls, const std::string& what) {
  cls.def(
         "__enter__", [](T& self) -> T& { return self; }, py::return_value_policy::reference,
         ("Returns the " + what + ".").c_str())
      .def(
          "__exit__",
          [](T& self, const py::args&) {
            self.close();
            return false;
          },
          ("Closes the " + what + ".").c_str());
}

}  // namespace ratewin::python
