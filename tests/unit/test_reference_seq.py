"""The whole-sequence evaluator (reference_seq.py) against the step-by-step oracle."""
import dataclasses

import numpy as np
import pytest

from tinyllm_gen.frontends import load_model
from tinyllm_gen.quant.rtn import quantize_graph
from tinyllm_gen.reference.executor import Executor, FloatKernels, QuantKernels
from tinyllm_gen.reference.sequence import SeqFloatKernels, SeqQuantKernels, run_sequence

from tinymodels import make_hf_model

SHAPES = {
    "llama": dict(arch="llama", dim=64, hidden=96, layers=2, heads=4, kv_heads=2, vocab=300, context=64, tied=True,
                  seed=21),
    "qwen2": dict(arch="qwen2", dim=48, hidden=80, layers=2, heads=6, kv_heads=2, vocab=280, context=64, tied=False,
                  seed=22),
    # head_dim 64: int4 values in two groups of 32 per head
    "llama-hd64": dict(arch="llama", dim=128, hidden=96, layers=2, heads=2, kv_heads=1, vocab=300, context=64,
                       tied=True, seed=23),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqref")
    return {k: load_model(make_hf_model(root / k, **v)) for k, v in SHAPES.items()}


def step_logits(graph, kernels, tokens):
    ex = Executor(graph, kernels)
    ex.reset()
    return np.stack([ex.step(t, p) for p, t in enumerate(tokens)])


@pytest.mark.parametrize("shape,group,kv,rotate", [("llama", 32, 8, "off"), ("llama", 64, 4, "off"),
                                                   ("qwen2", 32, 4, "off"), ("qwen2", 128, 8, "off"),
                                                   ("llama", 32, 4, "hadamard"), ("qwen2", 64, 4, "hadamard"),
                                                   ("llama", 32, "8:4", "off"), ("qwen2", 64, "8:4", "off"),
                                                   ("llama-hd64", 32, "8:4", "off"), ("llama-hd64", 32, 4, "off")])
def test_sequence_quant_is_bit_identical(models, shape, group, kv, rotate):
    m = models[shape]
    tokens = m.tokenizer.encode("Once upon a time there was a cat. The cat liked to play.")[:24]
    qg = dataclasses.replace(quantize_graph(m.graph, group, kv), kv_rotate=rotate)
    seq, _ = run_sequence(m.graph, SeqQuantKernels(qg, 64), tokens)
    ref = step_logits(m.graph, QuantKernels(qg, 64), tokens)
    assert seq.dtype == np.float32
    assert np.array_equal(seq.view(np.uint32), ref.view(np.uint32))


def test_sequence_float_matches_float_reference(models):
    m = models["qwen2"]
    tokens = m.tokenizer.encode("One day the cat saw a big red ball.")[:20]
    seq, _ = run_sequence(m.graph, SeqFloatKernels(m.graph, 64), tokens)
    ref = step_logits(m.graph, FloatKernels(m.graph, 64), tokens)
    np.testing.assert_allclose(seq, ref, atol=1e-5, rtol=1e-5)
