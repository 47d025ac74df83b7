"""Speculative decoding without a firmware build: the reference algorithm
(reference/speculative.py) against plain decoding, the prompt-lookup draft's
rule, the speculation pass's declarations (lower/speculate.py), the search's
choice of k and its refusals (fit/search.py), and the memory: SmolLM2-135M's
plan with speculation on the DK in the same 512 KiB."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.abi import LOOKUP_NGRAM_MAX, LOOKUP_NGRAM_MIN, SPECULATE_MAX_K
from tinyllm_gen.board import load_board
from tinyllm_gen.compile import CompileOptions, compile_path, quantize
from tinyllm_gen.errors import UserError
from tinyllm_gen.fit.search import FitRequest, fit, speculation_cost
from tinyllm_gen.frontends import load_model
from tinyllm_gen.ir import Graph, ModelConfig, build_decoder_graph, expected_weight_shapes
from tinyllm_gen.lower.prefill import batch_step
from tinyllm_gen.lower.records import StepSource, source_of
from tinyllm_gen.lower.speculate import parse_speculate, speculate_step
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.reference.speculative import generate_speculative, lookup_draft

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
REPEATING = "Once upon a time there was a cat. The cat was happy. Once upon a time there was a"


# --- the prompt-lookup draft ---------------------------------------------------------
def naive_draft(tokens: list[int], k: int) -> list[int]:
    """The rule as stated: for m from the longest suffix down, the latest earlier place it ends."""
    L = len(tokens)
    for m in range(min(LOOKUP_NGRAM_MAX, L - 1), LOOKUP_NGRAM_MIN - 1, -1):
        suffix = tokens[L - m:]
        for e in range(L - 2, m - 2, -1):
            if tokens[e - m + 1:e + 1] == suffix:
                return tokens[e + 1:e + 1 + k] if k > 0 else []
    return []


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=40), st.integers(0, SPECULATE_MAX_K + 2))
def test_lookup_draft_is_the_stated_rule(tokens, k):
    assert lookup_draft(tokens, k) == naive_draft(tokens, k)


def test_lookup_draft_continues_the_latest_longest_match():
    assert lookup_draft([1, 2, 3, 9, 2, 3, 8, 1, 2, 3], 3) == [9, 2, 3]  # "1 2 3" beats the later "2 3"
    assert lookup_draft([5, 7, 5, 8, 5], 2) == [8, 5]  # of equal lengths the later one
    assert lookup_draft([4, 5, 9, 6, 9], 3) == [6, 9]  # never past the context's end
    assert lookup_draft([1, 2, 3], 3) == []


# --- the reference algorithm against plain decoding -----------------------------------
@pytest.fixture(scope="module")
def story():
    m = load_model(STORY)
    return m, {bits: quantize(m, CompileOptions(kv_bits=bits)) for bits in (8, 4)}


@pytest.mark.parametrize("kv_bits", [8, 4])
@pytest.mark.parametrize("max_seq,n_new", [(96, 200), (48, 30)])  # the end of the context; the token limit
def test_greedy_speculation_is_plain_decoding(story, kv_bits, max_seq, n_new):
    m, qgs = story
    ex = Executor(m.graph, QuantKernels(qgs[kv_bits], max_seq))
    eos = m.graph.config.eos_ids
    for text in (REPEATING, "Lily and Ben went to the park. Lily and Ben"):
        prompt = m.tokenizer.encode(text)
        plain = generate(ex, prompt, n_new, max_seq, eos, SamplingOptions())
        for k in range(1, SPECULATE_MAX_K + 1):
            spec = generate_speculative(ex, prompt, n_new, max_seq, eos, SamplingOptions(), k=k)
            assert (spec.generated_ids, spec.stop_reason) == (plain.generated_ids, plain.stop_reason), (text, k)
            assert sum(spec.pass_tokens) >= len(spec.generated_ids) > sum(spec.pass_tokens[:-1])
            assert spec.accepted == len(spec.generated_ids) - spec.passes + (sum(spec.pass_tokens)
                                                                             - len(spec.generated_ids))


def test_k0_is_plain_sampling(story):
    """No guesses: the same coins in the same order as plain decoding, for a sampled request too."""
    m, qgs = story
    ex = Executor(m.graph, QuantKernels(qgs[8], 96))
    prompt, s = m.tokenizer.encode(REPEATING), SamplingOptions(0.9, 0.85, 77)
    plain = generate(ex, prompt, 40, 96, m.graph.config.eos_ids, s, top_k=8)
    spec = generate_speculative(ex, prompt, 40, 96, m.graph.config.eos_ids, s, top_k=8, k=0)
    assert spec.generated_ids == plain.generated_ids and spec.pass_tokens == [1] * len(plain.generated_ids)


def test_sampled_speculation_accepts_and_rejects(story):
    """A sampled generation with lookup guesses both keeps some guesses and resamples others (the two
    branches of the acceptance rule the host and emulator tiers compare bit for bit)."""
    m, qgs = story
    ex = Executor(m.graph, QuantKernels(qgs[8], 96))
    prompt = m.tokenizer.encode(REPEATING)
    totals = np.zeros(2, int)
    for seed in range(1, 6):
        g = generate_speculative(ex, prompt, 40, 96, m.graph.config.eos_ids, SamplingOptions(0.8, 1.0, seed), k=3)
        totals += (g.accepted, g.guessed - g.accepted)
    assert totals.min() > 0, totals


# --- the speculation pass -----------------------------------------------------------------
def test_the_pass_batches_the_head_and_declares_per_position_outputs(story):
    m, qgs = story
    for sampler, head, outs in [("greedy", {"xf.x16", "logits"}, {"verify.best", "verify.best_v"}),
                                ("topk:8", {"xf.x16", "logits", "topk.value", "topk.id"}, {"verify.held"}),
                                ("full", {"xf.x16", "logits"}, set())]:
        base = batch_step(lower_step(source_of(quantize(m, CompileOptions(kernels="cortex-m7"))), sampler), 4)
        step = speculate_step(base, 2)
        assert step.speculate.batched == head and step.speculate.positions == 3
        one = {d.name: d.count for d in base.decls}
        for d in step.decls:
            if d.name in head:
                assert d.count == 3 * one[d.name], d.name
            elif d.kind == "verify":
                assert d.name in outs and d.count == 3
            else:
                assert d.count == one[d.name], d.name
        assert {d.name for d in step.decls if d.kind == "verify"} == outs


def test_the_pass_refuses_what_it_cannot_verify(story):
    m, qgs = story
    base = lower_step(source_of(qgs[8]), "greedy")
    with pytest.raises(UserError, match="prefill batch is 2: use --prefill-batch 4 or --speculate lookup:1"):
        speculate_step(batch_step(base, 2), 3)
    with pytest.raises(UserError, match="prefilled token by token"):
        speculate_step(batch_step(base, 1), 1)
    assert parse_speculate("draft:student.gguf:2") == ("draft", 2) and parse_speculate("draft:s") == ("draft", 3)
    with pytest.raises(UserError, match="k must be 1..3"):
        parse_speculate("lookup:4")
    assert parse_speculate("lookup") == ("lookup", None) and parse_speculate("lookup:2") == ("lookup", 2)


# --- the search -------------------------------------------------------------------------
def test_auto_speculates_where_the_timing_model_predicts_a_gain(story):
    """Off on the host and QEMU (compute alone: verifying P positions costs more than it saves), lookup on the
    flash-bound STM32H750 boards, and the k the timing model ranks first."""
    m, _ = story
    src = StepSource(m.graph, 32, 8, "cortex-m7")
    base = lower_step(src, "greedy")
    for board, on in [("host", False), ("qemu-mps2-an500", False), ("stm32h750b-dk", True), ("weact-h750", True)]:
        f = fit(base, src, FitRequest(load_board(board), 512 * 1024, 256, "all" if on else "off",
                                      speculate=("auto", None)))
        assert (f.step.speculate is not None) == on, (board, f.speculate_why)
        assert f.speculate_why.startswith("lookup:" if on else "off: the timing model")


def test_an_explicit_k_that_does_not_fit_is_one_line(story):
    m, _ = story
    src = StepSource(m.graph, 32, 8, "cortex-m7")
    base = lower_step(src, "full")
    req = FitRequest(load_board("qemu-mps2-an500"), 512 * 1024, None, prefill_batch=1, speculate=("lookup", 2))
    with pytest.raises(UserError, match="prefilled token by token") as e:
        fit(base, src, req)
    assert "\n" not in str(e.value)


def smollm2_graph() -> Graph:
    """SmolLM2-135M-Instruct's shape (FACTS.md), no weights: enough to lower and plan."""
    c = ModelConfig("llama", 576, 1536, 30, 9, 3, 64, 49152, 8192, rope_theta=100000.0, tied_embeddings=True,
                    eos_ids=(2,))
    return build_decoder_graph(c, {})


def smollm2_source(kv_bits: int, kept: bool) -> StepSource:
    """kept: the GGUF's own blocks (Q4_1 matrices, the tied Q8_0 embedding) on the portable kernels, as
    `compile SmolLM2-135M-Instruct.Q4_1.gguf` builds it; else re-rounded onto q4x4 (--weight-quant rtn)."""
    g = smollm2_graph()
    if not kept:
        return StepSource(g, 32, kv_bits, "cortex-m7")
    blocks = tuple(sorted((name, "Q8_0" if name == "tok_embeddings" else "Q4_1")
                          for name, shape in expected_weight_shapes(g.config).items() if len(shape) == 2))
    return StepSource(g, 32, kv_bits, "portable", "gguf", blocks)


@pytest.mark.parametrize("kv_bits,sampler,kept", [(8, "greedy", True), (4, "greedy", True), (8, "topk:40", True),
                                                   (8, "greedy", False)])
def test_smollm2_with_speculation_fits_the_same_512k_on_the_dk(kv_bits, sampler, kept):
    """SmolLM2-135M on the DK (weights in place over QUADSPI, --max-seq auto) with --speculate lookup in the
    same 512 KiB: the verification pass adds no buffer the batched prefill's plan does not already hold
    room for, so what speculation costs is the prefill batch's context (docs/speculation.md states it)."""
    src = smollm2_source(kv_bits, kept)
    base = lower_step(src, sampler)
    board = load_board("stm32h750b-dk")
    f = fit(base, src, FitRequest(board, 512 * 1024, "auto", speculate=("lookup", None)))
    plain_p1 = fit(base, src, FitRequest(board, 512 * 1024, "auto", prefill_batch=1))
    cost = speculation_cost(f)
    assert f.step.speculate is not None and f.plan.fits and f.plan.total_bytes <= 512 * 1024
    assert cost["max_seq"] == cost["plain_max_seq"]  # no context beyond the batched prefill's
    assert f.plan.max_seq >= 0.9 * plain_p1.plan.max_seq


def test_a_builds_k_comes_from_its_manifests_options():
    from tinyllm_gen.lower.speculate import built_k

    assert built_k({"board": "host"}) == 0  # plain builds write no speculate option
    assert built_k({"speculate": "lookup:3"}) == 3
