#!/usr/bin/env python3
"""ratewin-bench's Python figure: the per-call overhead of the Python API over the C++
call it wraps, measured in the same run.

    PYTHONPATH=build/python /usr/bin/python3 cmd/bench/python_overhead.py

Each round times, back to back, the same decision made N times from a C++ loop inside
the extension (the baseline, ratewin._ratewin._cxx_loop) and from a Python loop; the
overhead is the median over rounds of the per-round difference in ns per call. It
includes the Python loop itself, as an application pays it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import ratewin
from ratewin import _ratewin


def per_call_ns(fn, calls: int) -> float:
    start = time.perf_counter_ns()
    fn(calls)
    return (time.perf_counter_ns() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="rounds; figures are medians")
    parser.add_argument("--calls", type=int, default=300_000, help="calls per case per round")
    args = parser.parse_args()

    engine = ratewin.Engine()
    # The rejecting hot resource of ratewin-bench local: 1000/s at 100 ms, overloaded.
    strict = ratewin.Limit(1000, per=1, resolution=0.1)
    loose = ratewin.Limit(2**32 - 1, per=60, resolution=5)
    name, rid = "hot:reject", ratewin.hash("hot:reject")
    handle = engine.limiter(rid, strict)

    def py_by_name(n: int) -> None:
        acquire = engine.try_acquire
        for _ in range(n):
            acquire(name, strict)

    def py_by_id(n: int) -> None:
        acquire = engine.try_acquire
        for _ in range(n):
            acquire(rid, strict)

    def py_handle(n: int) -> None:
        acquire = handle.try_acquire
        for _ in range(n):
            acquire()

    def py_allow(n: int) -> None:
        acquire = engine.try_acquire
        for _ in range(n):
            acquire("hot:allow", loose)

    cases = [
        ("reject, hot resource, by name", py_by_name, name, strict),
        ("reject, hot resource, by id", py_by_id, rid, strict),
        ("reject, hot resource, Limiter handle", py_handle, rid, strict),
        ("allow, hot resource, by name", py_allow, "hot:allow", loose),
    ]
    results = {c[0]: ([], []) for c in cases}
    for _ in range(args.runs):
        for label, python_loop, resource, limit in cases:
            cxx, py = results[label]
            cxx.append(_ratewin._cxx_loop(engine, resource, limit, args.calls))
            py.append(per_call_ns(python_loop, args.calls))

    print(f"ratewin python overhead: medians of {args.runs} rounds of {args.calls} calls;"
          f" Python {sys.version.split()[0]} ({sys.executable})\n")
    print(f"{'case':<40} {'C++ ns':>9} {'Python ns':>10} {'overhead ns':>12}")
    worst_reject = 0.0
    for label, *_ in cases:
        cxx, py = results[label]
        overhead = statistics.median(p - c for p, c in zip(py, cxx))
        if label.startswith("reject"):
            worst_reject = max(worst_reject, overhead)
        print(f"{label:<40} {statistics.median(cxx):9.1f} {statistics.median(py):10.1f}"
              f" {overhead:12.1f}")
    verdict = "meets target" if worst_reject < 1000 else "MISSES target"
    print(f"\nsummary\n  Python over C++ on the rejecting path: at most {worst_reject:.0f} ns"
          f" per call (target < 1000 ns): {verdict}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
