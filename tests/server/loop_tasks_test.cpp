// LoopTasks: tasks posted from other threads run on the loop in order; close() runs what
// was posted before it and refuses the rest; the loop ends, and closes clean, once it has.
#include "http/loop_tasks.h"

#include <doctest/doctest.h>
#include <uv.h>

#include <memory>
#include <thread>
#include <vector>

namespace ratewin::server {
namespace {

struct Loop {
  uv_loop_t loop{};
  Loop() { REQUIRE(uv_loop_init(&loop) == 0); }
  ~Loop() { CHECK(uv_loop_close(&loop) == 0); }  // every handle closed
};

TEST_CASE("loop tasks: posted from another thread, run on the loop in order") {
  Loop l;
  std::shared_ptr<LoopTasks> tasks = LoopTasks::open(&l.loop);
  const std::thread::id loop_thread = std::this_thread::get_id();
  std::vector<int> ran;
  bool on_loop = true;
  std::thread poster([&] {
    for (int i = 0; i < 100; ++i) {
      CHECK(tasks->post([&, i] {
        on_loop = on_loop && std::this_thread::get_id() == loop_thread;
        ran.push_back(i);
        if (i == 99) tasks->close();  // the loop may end now
      }));
    }
  });
  uv_run(&l.loop, UV_RUN_DEFAULT);  // until the handle has closed
  poster.join();
  REQUIRE(ran.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(ran[static_cast<std::size_t>(i)] == i);
  CHECK(on_loop);
  CHECK(tasks->closed());
}

TEST_CASE("loop tasks: close() runs what was posted, refuses what comes later") {
  Loop l;
  std::shared_ptr<LoopTasks> tasks = LoopTasks::open(&l.loop);
  int ran = 0;
  CHECK(tasks->post([&] { ++ran; }));
  tasks->close();
  CHECK(ran == 1);
  auto held = std::make_shared<int>(7);
  CHECK_FALSE(tasks->post([&ran, held] { ++ran; }));
  CHECK(held.use_count() == 1);  // the refused task is gone already
  tasks->close();                // idempotent
  // Nobody holds it but the closing handle: it lives until the handle has closed.
  tasks.reset();
  uv_run(&l.loop, UV_RUN_DEFAULT);
  CHECK(ran == 1);
}

TEST_CASE("loop tasks: a thread holding them after they closed posts in vain") {
  Loop l;
  std::shared_ptr<LoopTasks> tasks = LoopTasks::open(&l.loop);
  tasks->close();
  uv_run(&l.loop, UV_RUN_DEFAULT);
  // A thread still holding them (a late outcome) posts in vain.
  std::thread late([tasks] { CHECK_FALSE(tasks->post([] {})); });
  late.join();
}

}  // namespace
}  // namespace ratewin::server
