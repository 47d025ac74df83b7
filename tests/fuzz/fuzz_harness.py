"""The fuzz tier's machinery: cases, the generator registry, and the two
ways a case runs.

A `Case` is a command line (file paths in it point at inputs a generator
wrote) and what must happen: `"error"` (exit 2, one stderr line starting
with "tinyllm-gen: error:", no traceback, optionally naming something),
`"ok"` (exit 0) or `"any"` (either of the two, for inputs whose validity the
generator cannot tell cheaply).  Whatever is expected, a traceback, another
exit status, a second stderr line or a run past the per-case timeout is a
failure.

Most cases run in-process (`run_in_process`: `cli.main` with its stdout and
stderr captured and a SIGALRM timer), which is what makes a thousand cases
take seconds; a seeded sample also runs through a real subprocess
(`run_subprocess`) to check the process-level promise: status 2, one line,
no traceback.  Cases marked `isolate` (FIFOs, where a blocking open() inside
Rust code cannot be interrupted by the alarm) always run in a subprocess
with a timeout.

Generators register themselves by name with `@generator("name")` and yield
cases; `tests/fuzz/fuzz_generators.py` has one per input kind.  A new
frontend (GGUF) adds its generator there, or in a module it imports, and
the tier picks it up.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

SEED = int(os.environ.get("FUZZ_SEED", "20261201"))
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))  # more (or fewer) cases per generator
CASE_TIMEOUT_S = float(os.environ.get("FUZZ_CASE_TIMEOUT", "20"))


@dataclass
class Case:
    id: str
    argv: list[str]
    expect: str = "error"  # "error" | "ok" | "any"
    needle: str | None = None  # must appear in the error line when it fails
    check: Callable[["Outcome"], str | None] | None = None  # extra check after the run: a problem or None
    # Run in a subprocess with a timeout: a FIFO blocks inside a library's own
    # open() (Rust retries EINTR), where no in-process alarm can interrupt it.
    isolate: bool = False

    def __post_init__(self):
        assert self.expect in ("error", "ok", "any"), self.expect


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    crash: str | None = None  # traceback text of an exception that escaped main
    hung: bool = False
    seconds: float = 0.0


@dataclass
class Generator:
    name: str
    fn: Callable[[random.Random, object, Path, int], Iterator[Case]]
    cases: int  # how many cases it yields at SCALE 1


GENERATORS: dict[str, Generator] = {}


def generator(name: str, cases: int):
    """Register `fn(rng, bases, workdir, n) -> Iterator[Case]` under `name`."""
    def wrap(fn):
        assert name not in GENERATORS, name
        GENERATORS[name] = Generator(name, fn, cases)
        return fn
    return wrap


def cases_of(name: str, bases, workdir: Path) -> list[Case]:
    g = GENERATORS[name]
    n = max(1, int(g.cases * SCALE))
    rng = random.Random(f"{SEED}:{name}")
    workdir.mkdir(parents=True, exist_ok=True)
    out = list(g.fn(rng, bases, workdir, n))
    for i, c in enumerate(out):
        c.id = f"{name}#{i} {c.id}"
    return out


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a hung case (a BaseException: no `except
    Exception` in the code under test can swallow it)."""


def _alarm(signum, frame):
    raise CaseTimeout()


def run_in_process(argv: list[str], timeout_s: float = CASE_TIMEOUT_S) -> Outcome:
    import time

    from tinyllm_gen.cli import main

    out, err = io.StringIO(), io.StringIO()
    code, crash, hung = None, None, False
    previous = signal.signal(signal.SIGALRM, _alarm)
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except CaseTimeout:
        hung = True
    except BaseException:  # noqa: B036 - anything escaping main is the failure we look for
        crash = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(code, out.getvalue(), err.getvalue(), crash, hung, time.monotonic() - t0)


def run_subprocess(argv: list[str], timeout_s: float = 120) -> Outcome:
    import time

    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *argv], capture_output=True, text=True,
                           errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "", hung=True, seconds=time.monotonic() - t0)
    return Outcome(p.returncode, p.stdout, p.stderr, seconds=time.monotonic() - t0)


def problem(case: Case, o: Outcome) -> str | None:
    """Why the outcome breaks the promise for this case, or None."""
    if o.hung:
        return "hang (per-case timeout)"
    if o.crash:
        return "exception escaped main:\n" + o.crash[-1500:]
    if "Traceback" in o.stderr:
        return "traceback on stderr:\n" + o.stderr[-1500:]
    lines = [ln for ln in o.stderr.splitlines() if ln.strip()]
    if o.code == 2:
        if case.expect == "ok":
            return f"expected exit 0, got 2: {o.stderr.strip()[:300]}"
        if len(lines) != 1 or not lines[0].startswith("tinyllm-gen: error: "):
            return f"exit 2 must print exactly one 'tinyllm-gen: error:' line, got {len(lines)}: {o.stderr[:500]!r}"
        if case.needle and case.needle not in lines[0]:
            return f"error line does not mention {case.needle!r}: {lines[0][:300]}"
    elif o.code == 0:
        if case.expect == "error":
            return f"expected a one-line error (exit 2), got exit 0 (accepted an invalid input); stderr {o.stderr[:200]!r}"
    else:
        return f"exit status {o.code}: {o.stderr[-500:]!r}"
    if case.check is not None:
        return case.check(o)
    return None


def run_cases(cases: list[Case], runner=run_in_process) -> tuple[list[str], float]:
    """(failure reports, seconds) for all cases."""
    import time

    t0 = time.monotonic()
    failures = []
    for c in cases:
        o = run_subprocess(c.argv, timeout_s=60) if c.isolate else runner(c.argv)
        why = problem(c, o)
        if why:
            failures.append(f"[{c.id}] (FUZZ_SEED={SEED}) argv={_short(c.argv)}: {why}")
    return failures, time.monotonic() - t0


def _short(argv: list[str]) -> str:
    return repr([a if len(a) < 120 else a[:60] + f"...({len(a)} chars)" for a in argv])


@dataclass
class Stats:
    """Cases and seconds per generator, printed at the end of the tier."""
    rows: dict[str, tuple[int, float]] = field(default_factory=dict)


STATS = Stats()
