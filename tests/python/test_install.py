"""`pip wheel --no-build-isolation ./bindings/python` works offline with Debian's
setuptools: it builds the extension with CMake (Release) for the interpreter running pip,
leaves no file behind in the source tree, and the wheel installs and runs."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def files(tree: pathlib.Path) -> set[pathlib.Path]:
    return {p.relative_to(tree) for p in tree.rglob("*")}


def build_choices() -> str:
    """The CMake generator and unity-build choice of the build under test (the test
    command's), for the wheel's own CMake build: RATEWIN_CMAKE_ARGS."""
    build = pathlib.Path(os.environ.get("RATEWIN_PYTHONPATH", ROOT / "build" / "python")).parent
    cache = build / "CMakeCache.txt"
    values = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.startswith(("//", "#")):
                values[key.split(":")[0]] = value
    args = []
    if values.get("CMAKE_GENERATOR") == "Ninja":
        args += ["-G", "Ninja"]
    if values.get("CMAKE_UNITY_BUILD", "").upper() in {"ON", "TRUE", "1"}:
        args.append("-DCMAKE_UNITY_BUILD=ON")
    return " ".join(args)


def test_pip_wheel_builds_offline_in_the_tree_and_installs(tmp_path):
    # A copy of the repository (what a clone holds), in which the wheel is built: the build
    # must add no file to it.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "build-*", "*.egg-info", "__pycache__"))
    before = files(source)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "RATEWIN_PYTHONPATH"}}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               RATEWIN_CMAKE_ARGS=build_choices())
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--wheel-dir", str(wheels), str(source / "bindings" / "python")],
        capture_output=True, text=True, env=env, timeout=1200)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    left = sorted(str(p) for p in files(source) - before)
    assert not left, f"the build left files in the source tree: {left[:20]}"
    (wheel,) = wheels.glob("ratewin-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", str(wheel)],
        capture_output=True, text=True, env=env, timeout=1200)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    smoke = subprocess.run(
        [str(python), "-c",
         "import ratewin, ratewin.wsgi, ratewin.asgi, pathlib\n"
         "assert pathlib.Path(ratewin.__file__).is_relative_to(pathlib.Path(__import__('sys').prefix))\n"
         "pkg = pathlib.Path(ratewin.__file__).parent\n"
         "assert (pkg / 'py.typed').exists() and (pkg / '_ratewin.pyi').exists()\n"
         "e = ratewin.Engine()\n"
         "d = [bool(e.try_acquire('k', ratewin.Limit(2, per=60))) for _ in range(3)]\n"
         "assert d == [True, True, False], d\n"
         "print(ratewin.__version__)\n"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert smoke.returncode == 0, smoke.stderr
    header = (ROOT / "capi" / "ratewin.h").read_text()
    major = header.split("#define RATEWIN_VERSION_MAJOR ")[1].split()[0]
    assert smoke.stdout.strip().startswith(major + ".")
