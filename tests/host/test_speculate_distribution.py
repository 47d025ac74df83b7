"""Speculative sampling keeps the model's distribution: the host firmware of
the bundled 260K model, compiled once plainly and once with `--speculate
lookup:3`, samples the same prompt under thousands of seeds (one process,
tests/c/speculate/sample_many.c), and the tokens at the positions the
verification pass decides (the first generated token comes from the
prompt's pass in both) are compared with a chi-squared test of homogeneity
at significance ALPHA.  The seeds are fixed, so the verdict is too.

The test's power is checked the same way: plain sampling at a temperature
30% higher must be told apart from plain sampling at the asked one."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from c_program import build_program
from chi2 import chi2_critical, position_statistics
from firmware_harness import need
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.frontends import load_model

pytestmark = pytest.mark.host

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
DRIVER = Path(__file__).resolve().parents[1] / "c" / "speculate" / "sample_many.c"
PROMPT = "Once upon a time there was a cat. The cat was happy. Once upon a time there was a"
N_SEEDS = 1000  # each seed prefills the prompt again: its 26 tokens are most of the cost
N_NEW = 6  # a decoded token costs a seventh of the prompt's prefill: more positions tested per seed


@pytest.fixture(scope="module")
def samplers(tmp_path_factory):
    """(sampler, speculate) -> the sample_many executable of that build."""
    need("cmake")
    need("gcc")
    root, exes = tmp_path_factory.mktemp("speculate-dist"), {}

    def get(sampler: str, speculate: str) -> Path:
        if (sampler, speculate) not in exes:
            out = root / f"out-{sampler.replace(':', '')}-{speculate.replace(':', '')}"
            write_tree(compile_path(STORY, CompileOptions(board="host", sampler=sampler, max_seq=96,
                                                          prefill_batch=4, speculate=speculate)).tree, out)
            exes[(sampler, speculate)] = build_program(root / (out.name + "-sampler"), "sample_many", DRIVER,
                                                         {"model": out})
        return exes[(sampler, speculate)]
    return get


_SAMPLES: dict = {}  # (exe, temperature, top_p, seed0) -> sample's result: the power test reuses a plain sample


def sample(exe: Path, temperature: float, top_p: float, seed0: int = 1) -> tuple[list[list[int]], list[int]]:
    key = (exe, temperature, top_p, seed0)
    if key not in _SAMPLES:
        _SAMPLES[key] = _sample(exe, temperature, top_p, seed0)
    return _SAMPLES[key]


def _sample(exe: Path, temperature: float, top_p: float, seed0: int) -> tuple[list[list[int]], list[int]]:
    ids = load_model(STORY).tokenizer.encode(PROMPT)
    run = subprocess.run([str(exe), str(N_NEW), repr(temperature), repr(top_p), str(seed0), str(N_SEEDS),
                          *map(str, ids)], check=True, capture_output=True, text=True)
    rows = [line.split(" | ") for line in run.stdout.splitlines()]
    return [[int(t) for t in toks.split()] for toks, _ in rows], [int(p) for _, p in rows]


@pytest.mark.parametrize("sampler,temperature,top_p", [("full", 0.8, 0.9), ("topk:8", 1.0, 0.95)])
def test_speculative_sampling_has_plain_samplings_distribution(samplers, sampler, temperature, top_p):
    plain, _ = sample(samplers(sampler, "off"), temperature, top_p)
    spec, passes = sample(samplers(sampler, "lookup:3"), temperature, top_p, seed0=10 ** 6)  # other coins
    # the verification pass decided a good share of the tested tokens (a fifth of the seeds keep a guess)
    assert sum(len(g) for g in spec) - sum(passes) > N_SEEDS // 5, "too few accepted guesses to test anything"
    for what, stat, df in position_statistics(plain, spec, N_NEW):
        assert df >= 3 and stat < chi2_critical(df), f"{what}: chi-squared {stat:.1f} with {df} degrees of freedom"


def test_the_test_tells_a_30_percent_hotter_temperature_apart(samplers):
    plain, _ = sample(samplers("full", "off"), 0.8, 0.9)
    hotter, _ = sample(samplers("full", "off"), 0.8 * 1.3, 0.9, seed0=10 ** 6)
    worst = max(stat / chi2_critical(df) for _, stat, df in position_statistics(plain, hotter, N_NEW))
    assert worst > 1.0, f"no statistic exceeds its critical value (largest ratio {worst:.2f})"
