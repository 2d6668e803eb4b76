"""The Python examples of README.md and docs/python.md run as written."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import ratewin

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_example(tmp_path, name: str) -> list[str]:
    """Runs the code block marked <!-- example:NAME --> (in README.md or docs/*.md) as
    written; its output lines."""
    example = tmp_path / f"{name}.py"
    subprocess.run(["cmake", f"-DROOT={ROOT}", f"-DNAME={name}",
                    f"-DOUT={example}", "-P", str(ROOT / "tests" / "readme" / "extract.cmake")],
                   check=True, timeout=60)
    package_root = pathlib.Path(ratewin.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(package_root))
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_readme_python_example(tmp_path):
    lines = run_example(tmp_path, "python")
    assert [line.split()[1] for line in lines[:4]] == ["allowed"] * 3 + ["rejected"]
    assert "'Retry-After'" in lines[3] and "'X-RateLimit-Remaining': '0'" in lines[3]
    assert lines[4] == "4 allowed so far"


def test_readme_python_limits_example(tmp_path):
    lines = run_example(tmp_path, "python-limits")
    assert lines[0].startswith("both allowed {'X-RateLimit-Limit': '10'"), lines
    assert lines[1] == "refunded 2", lines


def test_readme_python_async_example(tmp_path):
    lines = run_example(tmp_path, "python-async")
    assert lines[0] == "True True 10 vendor calls made", lines
    assert lines[1].startswith("late call refused, retry in "), lines


def test_readme_python_web_example(tmp_path):
    lines = run_example(tmp_path, "python-web")
    assert lines[0] == '429 Too Many Requests "3/60s";q=3;w=60 slow down', lines
    assert lines[1] == "200 OK", lines
    assert lines[2] == "StoreError: True", lines


def test_python_overhead_benchmark_runs(tmp_path):
    """cmd/bench/python_overhead.py runs (one short round; figures are not asserted)."""
    package_root = pathlib.Path(ratewin.__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, str(ROOT / "cmd" / "bench" / "python_overhead.py"),
         "--runs", "1", "--calls", "2000"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(package_root)),
        timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Python over C++ on the rejecting path: at most" in result.stdout
