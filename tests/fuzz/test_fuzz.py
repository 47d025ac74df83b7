"""Issue 12's fuzz tier: seeded malformed inputs for every frontend, for CLI
option values and for output paths.  Each case must end with exit 2 and
one line (or exit 0 where the input is valid); a traceback, another status,
a second line or a hang (per-case timeout) fails.

    python -m pytest -q -m fuzz                    # this tier alone
    FUZZ_SEED=7 FUZZ_SCALE=5 python -m pytest -q tests/fuzz   # other seed, 5x the cases

Most cases run in-process; `test_subprocess_sample` reruns a seeded sample
of them through `python -m tinyllm_gen.cli` to check the real process:
status, one stderr line, no traceback."""
from __future__ import annotations

import random
import time

import pytest

import fuzz_generators  # noqa: F401  (registers the generators)
from fuzz_harness import GENERATORS, SEED, STATS, cases_of, problem, run_cases, run_subprocess

MIN_CASES = 1000


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return fuzz_generators.build_bases(tmp_path_factory.mktemp("fuzz-bases"))


@pytest.fixture(scope="module")
def all_cases(bases, tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-cases")
    return {name: cases_of(name, bases, root / name) for name in GENERATORS}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator(name, all_cases):
    cases = all_cases[name]
    if name == "onnx" and not cases:
        pytest.skip("onnx or torch is not installed: no ONNX base to mutate")
    failures, seconds = run_cases(cases)
    STATS.rows[name] = (len(cases), seconds)
    assert not failures, f"{len(failures)} of {len(cases)} {name} cases broke the promise:\n" + \
        "\n".join(failures[:15])


def test_enough_cases(all_cases):
    total = sum(len(c) for c in all_cases.values())
    assert total >= MIN_CASES, f"only {total} fuzz cases (seed {SEED})"


SUBPROCESS_SAMPLE = 24


def test_subprocess_sample(all_cases):
    """The same promise through a real process, on a seeded sample of the
    error cases (each generator's share) plus a few that must succeed."""
    rng = random.Random(f"{SEED}:subprocess")
    pool = [c for cs in all_cases.values() for c in cs
            if c.check is None and not any("\x00" in a for a in c.argv)]
    errors = [c for c in pool if c.expect == "error"]
    oks = [c for c in pool if c.expect == "ok"]
    sample = rng.sample(errors, min(SUBPROCESS_SAMPLE - 4, len(errors))) + rng.sample(oks, min(4, len(oks)))
    t0 = time.monotonic()
    failures = []
    for c in sample:
        why = problem(c, run_subprocess(c.argv))
        if why:
            failures.append(f"[{c.id}] argv={c.argv[:4]}: {why}")
    STATS.rows["subprocess sample"] = (len(sample), time.monotonic() - t0)
    assert not failures, "\n".join(failures)


def test_report_figures(all_cases):
    """Cases and seconds per generator (shown with -s or on failure)."""
    lines = [f"{name:20s} {n:5d} cases {s:6.1f} s" for name, (n, s) in sorted(STATS.rows.items())]
    print("\nfuzz tier (seed %d):\n" % SEED + "\n".join(lines))
