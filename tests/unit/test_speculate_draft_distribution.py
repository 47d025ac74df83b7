"""Speculative sampling with a draft model keeps the target's distribution:
a tiny target and its depth-pruned student (tests/drafts.py; float kernels,
the algorithm is what is tested and they are ten times faster than the
quantized ones) sample one prompt under many fixed seeds, plainly and with
the draft's guesses, and the tokens at the positions after the first are
compared with a chi-squared test of homogeneity at ALPHA = 0.001
(tests/chi2.py).  The seeds are fixed, so the verdict is too.

The test's power: the rule fed a q the draft did not sample from (uniform
over the vocabulary, so nearly every guess is kept) yields the draft's
tokens rather than the target's, and the same statistics must tell it
apart.  (The one-hot rule of lookup guesses would not do: accepting a guess
with probability p(guess), else drawing from p without it, yields p for a
guess drawn from any q; min(1, p/q) only keeps more guesses.)"""
from __future__ import annotations

import numpy as np
import pytest

from tinyllm_gen.compile import CompileOptions, load_draft
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.draft import DraftModel
from tinyllm_gen.reference.executor import Executor, FloatKernels
from tinyllm_gen.reference.exact import F32
from tinyllm_gen.reference.sampler import DraftDistribution, SamplingOptions
from tinyllm_gen.reference.speculative import generate_speculative

from chi2 import chi2_critical, position_statistics
from drafts import make_target, shallow_student

pytest.importorskip("torch")

PROMPT = "Once upon a time there was a little cat. The"
SEQ = 48
N_SEEDS = 800
N_NEW = 6


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-dist")
    target = make_target(root)
    m = load_model(target)
    draft = load_draft(shallow_student(target, root / "shallow"), m, target, CompileOptions(), SEQ, fp32=True)
    return m, Executor(m.graph, FloatKernels(m.graph, SEQ)), draft


def sample(pair, sampling: SamplingOptions, top_k: int, with_draft: bool, seed0: int):
    """N_SEEDS generations of N_NEW tokens (the prompt prefilled once: later seeds re-run only its last position,
    the rows after it are overwritten) and the draft's (accepted, guessed)."""
    m, ex, draft = pair
    ids = m.tokenizer.encode(PROMPT)
    gens, acc, guessed = [], 0, 0
    for i in range(N_SEEDS):
        s = SamplingOptions(sampling.temperature, sampling.top_p, seed0 + i)
        g = generate_speculative(ex, ids, N_NEW, SEQ, m.graph.config.eos_ids, s, top_k=top_k,
                                 k=3 if with_draft else 0, cached=len(ids) - 1 if i else 0,
                                 draft=draft if with_draft else None)
        gens.append(g.generated_ids)
        acc, guessed = acc + g.accepted, guessed + g.guessed
    return gens, (acc, guessed)


CASES = [(SamplingOptions(0.4, 0.9), 0), (SamplingOptions(0.8, 0.9), 8)]  # the tiny model is flat at T = 1: cooler


@pytest.mark.parametrize("sampling,top_k", CASES)
def test_draft_model_sampling_has_plain_samplings_distribution(pair, sampling, top_k):
    plain, _ = sample(pair, sampling, top_k, False, 1)
    spec, (acc, guessed) = sample(pair, sampling, top_k, True, 10 ** 6)  # other coins
    assert acc > N_SEEDS // 2 and guessed - acc > N_SEEDS // 2, (acc, guessed)  # both branches, often
    for what, stat, df in position_statistics(plain, spec, N_NEW):
        assert df >= 3 and stat < chi2_critical(df), f"{what}: chi-squared {stat:.1f} with {df} degrees of freedom"


def test_the_test_tells_a_wrong_q_apart(pair, monkeypatch):
    sampling, top_k = CASES[0]
    plain, _ = sample(pair, sampling, top_k, False, 1)
    uniform = DraftDistribution(np.full(pair[0].graph.config.vocab_size, 1.0 / pair[0].graph.config.vocab_size, F32),
                                F32(1.0))
    monkeypatch.setattr(DraftModel, "_q", lambda self, sampler, logits: uniform)
    skewed, _ = sample(pair, sampling, top_k, True, 10 ** 6)
    worst = max(stat / chi2_critical(df) for _, stat, df in position_statistics(plain, skewed, N_NEW))
    assert worst > 1.0, f"no statistic exceeds its critical value (largest ratio {worst:.2f})"
