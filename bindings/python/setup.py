"""Builds the _ratewin extension with CMake (the repository's own build) for the
interpreter running this script, and ships it inside the `ratewin` package.

`pip wheel --no-build-isolation ./bindings/python` (or `pip install`) leaves nothing in
the source tree: setuptools' build folders, its egg-info and CMake's build all go to a
temporary folder, removed when the build ends. $RATEWIN_CMAKE_ARGS, if set, adds its shell
words to CMake's configure step (a generator, a compiler, a unity build)."""

import atexit
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository: bindings/python/..
WORK = pathlib.Path(tempfile.mkdtemp(prefix="ratewin-python-build-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)


def version() -> str:
    header = (ROOT / "capi" / "ratewin.h").read_text()
    parts = [re.search(rf"#define RATEWIN_VERSION_{p} (\d+)", header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = pathlib.Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        subprocess.check_call([
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DRATEWIN_BUILD_TESTS=OFF", "-DRATEWIN_BUILD_BENCH=OFF",
            "-DRATEWIN_BUILD_SERVER=OFF", "-DRATEWIN_BUILD_GRPC=OFF", "-DRATEWIN_INSTALL=OFF",
            "-DRATEWIN_BUILD_PYTHON=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
            *shlex.split(os.environ.get("RATEWIN_CMAKE_ARGS", "")),
        ])
        subprocess.check_call([
            "cmake", "--build", str(build_dir), "--target", "_ratewin",
            "-j", str(os.cpu_count() or 1),
        ])
        built = next((build_dir / "python" / "ratewin").glob("_ratewin*.so"))
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    version=version(),
    ext_modules=[Extension("ratewin._ratewin", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(WORK / "build")}, "egg_info": {"egg_base": str(WORK)}},
)
