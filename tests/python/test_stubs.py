"""The shipped stubs (_ratewin.pyi) match the compiled module, and the package and a
typical user of it type-check strictly against them (mypy, Debian's python3-mypy)."""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import subprocess
import sys
import textwrap

import ratewin

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_ROOT = pathlib.Path(ratewin.__file__).resolve().parent.parent


def mypy(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT), MYPYPATH=str(PACKAGE_ROOT))
    env["MYPY_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run([sys.executable, "-m", *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_stubs_match_the_module(tmp_path):
    result = mypy(tmp_path, "mypy.stubtest", "ratewin._ratewin",
                  "--allowlist", str(HERE / "stubtest-allowlist.txt"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_and_its_users_type_check(tmp_path):
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""
        import datetime
        import ratewin
        from ratewin.asgi import RateLimitMiddleware as Asgi
        from ratewin.wsgi import RateLimitMiddleware as Wsgi
        from ratewin.wsgi import Answer
        from typing import Any, Sequence

        limit = ratewin.Limit(100, per=datetime.timedelta(minutes=1), resolution=5)
        with ratewin.Engine(key_prefix="app") as engine:
            decision: ratewin.Decision = engine.try_acquire("user:42", limit, cost=2)
            headers: dict[str, str] = decision.headers()
            retry: float = decision.retry_after
            with engine.limiter(42, limit) as hot:
                ok: bool = bool(hot.try_acquire())
            limits: list[ratewin.Limit] = ratewin.parse_many("10/second; 1000/day")
            login: ratewin.Limit = ratewin.parse("3/minute", scope="login")
            scope: str | int | None = login.scope
            strict = ratewin.Limit(3, per=60, algorithm=ratewin.Algorithm.STRICT_WINDOW)
            fixed = ratewin.Limit(3, per=60, algorithm="fixed_window")
            algorithm: str = strict.algorithm
            same: bool = fixed.algorithm == ratewin.Algorithm.FIXED_WINDOW
            bucket = ratewin.Limit(10, per=1, algorithm=ratewin.Algorithm.TOKEN_BUCKET, burst=4)
            full = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=None)
            burst: int = bucket.burst + full.burst
            both: ratewin.Decisions = engine.try_acquire_all("user:42", limits, cost=1)
            refused: int | None = both.refused
            each: list[ratewin.Decision] = both.decisions
            shown: ratewin.Decision = both.decision
            cleared: bool = engine.reset("user:42", login)
            given_back: int = engine.refund("user:42", limit, 2)
            waited: ratewin.Decision = engine.acquire("vendor", limit, timeout=1.5)
            key: str | None = engine.redis_key("user:42", limit)

        async def handler(engine: ratewin.Engine) -> bool:
            d: ratewin.Decision = await engine.try_acquire_async("user:42", limit)
            ds: ratewin.Decisions = await engine.try_acquire_all_async("u", limits)
            w: ratewin.Decision = await engine.acquire_async("vendor", limit, timeout=2)
            return bool(d) and bool(ds) and bool(w)

        def slow_down(environ: object, decisions: ratewin.Decisions,
                      limits: Sequence[ratewin.Limit]) -> Answer:
            return Answer(429, [("Content-Type", "text/plain")], b"slow down")

        def wrap(app: Any, engine: ratewin.Engine) -> Wsgi:
            return Wsgi(app, engine, ["10/second", limit], on_reject=slow_down,
                        headers="ietf", reset="unix")
        """))
    for target in (["-p", "ratewin"], [str(user)]):
        result = mypy(tmp_path, "mypy", "--strict", *target)
        assert result.returncode == 0, result.stdout + result.stderr
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import ratewin\nratewin.Limit('100', per=60)\n")
    result = mypy(tmp_path, "mypy", "--strict", str(wrong))
    assert result.returncode != 0 and "Limit" in result.stdout, "the stubs carry the types"


def split_top_level(text: str) -> list[str]:
    """Splits "a: X[b, c], d: str = 'x,y'" at the commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def runtime_parameters(obj: object, name: str) -> list[tuple[str, object]]:
    """(name, default) of each parameter in pybind11's signature line; '*' marks where
    keyword-only parameters start, and a missing default is the class NoDefault."""
    if inspect.isfunction(obj):  # written in Python (ratewin/_waiting.py): its own signature
        out_py: list[tuple[str, object]] = []
        for p in inspect.signature(obj).parameters.values():
            if p.kind is p.KEYWORD_ONLY and not any(n == "*" for n, _ in out_py):
                out_py.append(("*", NoDefault))
            out_py.append((p.name, NoDefault if p.default is p.empty else p.default))
        return out_py
    doc = (getattr(obj, "__doc__", None) or "").splitlines()
    assert doc and doc[0].startswith(name + "("), f"{name}: no pybind11 signature line"
    inside = doc[0][len(name) + 1:doc[0].rindex(") -> ")]
    out: list[tuple[str, object]] = []
    for part in split_top_level(inside):
        head, _, default = part.partition(" = ")
        out.append((head.split(":")[0].strip(), ast.literal_eval(default) if default
                    else NoDefault))
    return out


class NoDefault:
    pass


def stub_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, object]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [NoDefault] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, d) for a, d in zip(positional, defaults)]
    if args.vararg is not None:
        out.append(("*" + args.vararg.arg, NoDefault))
    elif args.kwonlyargs:
        out.append(("*", NoDefault))
    out += [(a.arg, NoDefault if d is None else d)
            for a, d in zip(args.kwonlyargs, args.kw_defaults)]

    def value(d: object) -> object:
        if d is NoDefault:
            return NoDefault
        assert isinstance(d, ast.expr)
        return ... if isinstance(d, ast.Constant) and d.value is ... else ast.literal_eval(d)

    return [(n, value(d)) for n, d in out]


def test_stub_signatures_match_the_modules_parameters():
    """stubtest cannot see pybind11 parameters (no __text_signature__), so compare the
    stub's parameter names, keyword-only marker and defaults with pybind11's signature
    line in each docstring. A stub default of ... stands for any default."""
    from ratewin import _ratewin

    stub = ast.parse((pathlib.Path(_ratewin.__file__).parent / "_ratewin.pyi").read_text())
    checked = 0

    def compare(fn: ast.FunctionDef | ast.AsyncFunctionDef, runtime: object, where: str) -> None:
        nonlocal checked
        have = runtime_parameters(runtime, fn.name)
        want = stub_parameters(fn)
        assert [n for n, _ in have] == [n for n, _ in want], where
        for (n, h), (_, w) in zip(have, want):
            assert (h is NoDefault) == (w is NoDefault), f"{where}: default of {n}"
            if w is not ... and w is not NoDefault:
                assert h == w, f"{where}: default of {n} is {h!r} in the module"
        checked += 1

    def is_plain(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        decorated = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
        dunder = fn.name.startswith("__") and fn.name != "__init__"
        return not decorated and not dunder

    for node in stub.body:
        if isinstance(node, ast.FunctionDef):
            compare(node, getattr(_ratewin, node.name), node.name)
        elif isinstance(node, ast.ClassDef):
            cls = getattr(_ratewin, node.name)
            if issubclass(cls, BaseException):
                continue
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_plain(fn):
                    if fn.name == "__init__" and node.name in {"Decision", "Limiter"}:
                        continue  # not constructible (see stubtest-allowlist.txt)
                    compare(fn, getattr(cls, fn.name), f"{node.name}.{fn.name}")
    assert checked >= 15
