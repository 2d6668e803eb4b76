"""Interpreter exit and engine teardown in awkward places: daemon threads still
deciding, limiters left open, engines dropped by another thread or inside the logger.
Each case runs in its own interpreter, several times where the failure was a race."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import ratewin
from ratewin_testkit import PATIENCE

PACKAGE_ROOT = pathlib.Path(ratewin.__file__).resolve().parent.parent


def run(code: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "case.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT)), timeout=2 * PATIENCE)


# (Exit comes once each thread has been round its loop: while they all work.)
DAEMONS_AT_EXIT = """
    import threading
    import ratewin
    engine = ratewin.Engine()
    limit = ratewin.Limit(10**9, per=60)
    hot = engine.limiter("hot", limit)
    working = threading.Semaphore(0)
    def work(i):
        first = True
        while True:
            try:
                {work}
            except ratewin.ClosedError:
                pass
            if first:
                first = False
                working.release()
    for i in range(4):
        threading.Thread(target=work, args=(i,), daemon=True).start()
    for i in range(4):
        assert working.acquire(timeout=60)
    print("exiting")
    """


@pytest.mark.parametrize("work", [
    # Deciding: taking the GIL back during finalization ends a daemon thread by
    # unwinding it; that once started in a destructor and aborted (1 run in 4).
    "engine.try_acquire(f'k{i}', limit) if i % 2 else hot.try_acquire(); "
    "engine.stats() if i == 3 else None",
    # Closing and dropping engines and limiters deletes them; that must not take the
    # GIL back inside a destructor either (it aborted 1 run in 6).
    "ratewin.Engine().close() if i == 0 else "
    "ratewin.Engine() if i == 1 else engine.limiter(f'k{i}', limit).close()",
], ids=["deciding", "closing-and-dropping"])
def test_exit_while_daemon_threads_work(tmp_path, work):
    code = textwrap.dedent(DAEMONS_AT_EXIT).replace("{work}", work)
    for _ in range(12):
        result = run(code, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "exiting\n"


def test_exit_with_a_limiter_open_stops_the_engine_threads(tmp_path):
    code = """
        import os, ratewin
        threads = lambda: len(os.listdir("/proc/self/task"))
        before = threads()
        engine = ratewin.Engine("unix:///nonexistent/redis.sock", connect_timeout=0.01,
                                logger=lambda level, message: None)
        limiter = engine.limiter("x", ratewin.Limit(1, per=1))
        assert threads() > before
        engine.close()
        assert threads() > before  # the open limiter keeps the engine's threads
        ratewin._ratewin._close_all()
        assert limiter.closed and threads() == before, (threads(), before)
        print("ok")
        """
    result = run(code, tmp_path)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_close_all_while_another_thread_drops_engines(tmp_path):
    # close() releases the GIL; meanwhile another thread frees engines that _close_all
    # had yet to close. It must hold each engine it closes, and re-read the set.
    code = """
        import threading
        import ratewin
        from ratewin import _ratewin
        slow = [ratewin.Engine("unix:///nonexistent/redis.sock", connect_timeout=0.001,
                               logger=lambda level, message: None) for _ in range(3)]
        holder = [ratewin.Engine() for _ in range(30)]
        def drop():
            while not any(e.closed for e in slow):
                pass
            holder.clear()
        thread = threading.Thread(target=drop)
        thread.start()
        _ratewin._close_all()
        thread.join()
        assert all(e.closed for e in slow)
        print("ok")
        """
    for _ in range(3):
        result = run(code, tmp_path)
        assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_engine_dropped_inside_its_own_logger(tmp_path):
    # A garbage collection on the engine's loop thread (here: forced, inside the logger)
    # frees the engine there; the thread cannot join itself, so another one does.
    code = """
        import gc, os, threading, time
        import ratewin
        threads = lambda: len(os.listdir("/proc/self/task"))
        before = threads()
        main = threading.get_ident()
        fired = threading.Event()
        collected = threading.Event()
        def logger(level, message):
            if threading.get_ident() != main and not fired.is_set():
                fired.set()
                gc.collect()
                collected.set()
        class Holder:
            pass
        h = Holder()
        h.self = h
        h.engine = ratewin.Engine("unix:///nonexistent/redis.sock", logger=logger,
                                  connect_timeout=0.001)
        gc.disable()
        del h
        assert collected.wait(60)
        # Freed on its own thread, the engine is joined by another (the reaper, a thread
        # that stays): its thread ends.
        deadline = time.monotonic() + 60
        while threads() != before + 1:
            assert time.monotonic() < deadline, (threads(), before)
            time.sleep(0.01)
        print("ok")
        """
    result = run(code, tmp_path)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_closing_the_engine_inside_its_logger(tmp_path):
    # The engine's own thread cannot join itself: the Reaper deletes the engine, and exit
    # waits for it while the logger is still running (this crashed 3 runs in 4).
    code = """
        import threading, time
        import ratewin
        done = threading.Event()
        engine = None
        def logger(level, message):
            if engine is not None and not done.is_set():
                engine.close()
                done.set()
                time.sleep(0.01)
        engine = ratewin.Engine("unix:///nonexistent/redis.sock", logger=logger,
                                connect_timeout=0.001)
        engine.try_acquire("x", ratewin.Limit(1, per=1))  # fails: the logger hears of it
        assert done.wait(60) and engine.closed
        print("ok")
        """
    for _ in range(4):
        result = run(code, tmp_path)
        assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


ASYNC_AT_EXIT = {
    # The main thread leaves with decisions waiting on a stopped Redis: exit closes the
    # engine, which answers them (their callbacks run then, while they still may).
    "waiting": """
        import atexit, os, signal
        answered = []
        # (Registered before ratewin's exit hook, so it runs after it.)
        atexit.register(lambda: print("answered", len(answered)))
        import ratewin
        limit = ratewin.Limit(10**9, per=60)
        engine = ratewin.Engine("{url}", command_timeout=2, logger=lambda level, message: None)
        assert engine.try_acquire("warm", limit).allowed and engine.stats().store_available
        os.kill({pid}, signal.SIGSTOP)
        for i in range(20):
            assert engine._try_acquire_all_async(f"k{{i}}", [limit], 1, answered.append) is None
        print("exiting")
        """,
    # Daemon threads keep deciding asynchronously (on new engines once exit closed theirs)
    # while the interpreter finalizes: the engines' threads then still finish writes and
    # must neither call back nor let go of a callback by taking the GIL (which unwinds a
    # thread during finalization: std::terminate).
    # (Exit comes once each thread has decided: while they all decide.)
    "deciding": """
        import threading
        import ratewin
        limit = ratewin.Limit(10**9, per=60)
        deciding = threading.Semaphore(0)
        def work(i):
            engine = None
            first = True
            while True:
                try:
                    if engine is None or engine.closed:
                        engine = ratewin.Engine("{url}", logger=lambda level, message: None)
                    engine._try_acquire_all_async(f"k{{i}}", [limit], 1, lambda d: d.allowed)
                except ratewin.ClosedError:
                    pass
                if first:
                    first = False
                    deciding.release()
        for i in range(3):
            threading.Thread(target=work, args=(i,), daemon=True).start()
        for i in range(3):
            assert deciding.acquire(timeout=60)
        print("exiting")
        """,
}


@pytest.mark.parametrize("case", sorted(ASYNC_AT_EXIT))
def test_exit_with_asynchronous_decisions_in_flight(tmp_path, redis, case):
    code = textwrap.dedent(ASYNC_AT_EXIT[case]).format(url=redis.url, pid=redis.process.pid)
    for _ in range(3 if case == "waiting" else 8):
        result = run(code, tmp_path)
        redis.resume()
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr
        assert result.stdout == "exiting\n" + ("answered 20\n" if case == "waiting" else "")
