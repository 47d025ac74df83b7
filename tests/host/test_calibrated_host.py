"""Calibrated INT4 (--weight-quant awq) through the whole pipeline: the host-built
firmware's tokens == the quantized reference's, bit for bit."""
import numpy as np
import pytest

from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate

from firmware_harness import GREEDY, N_NEW, SHAPES, SHAPES_CONTEXT, TOP_P, need
from tinymodels import make_hf_model
from bounds import BACKSTOP_S

pytestmark = pytest.mark.host


def test_awq_firmware_matches_reference(tmp_path):
    need("cmake")
    model_dir = make_hf_model(tmp_path / "model", eos=None, **SHAPES["qwen2-bias-untied"])
    opts = CompileOptions(board="host", group_size=64, weight_quant="awq")
    compiled = compile_path(model_dir, opts)
    qg = compiled.qgraph
    assert qg.method == "awq"
    m = load_model(model_dir)
    rtn = quantize(m, CompileOptions(group_size=64))
    # calibration really changed the model: norms carry folded scales, weights differ from RTN
    assert not np.array_equal(qg.vectors["layers.0.attention_norm"], rtn.vectors["layers.0.attention_norm"])
    assert not np.array_equal(qg.q4["layers.0.wq"].q, rtn.q4["layers.0.wq"].q)
    out = tmp_path / "out"
    write_tree(compiled.tree, out)
    build(out)
    ids = m.tokenizer.encode("Once upon a time there was a cat")
    for sampling in (GREEDY, TOP_P):
        fw = run_firmware(out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S)
        ex = Executor(m.graph, QuantKernels(quantize(m, opts), SHAPES_CONTEXT))
        ref = generate(ex, ids, N_NEW, SHAPES_CONTEXT, m.graph.config.eos_ids, sampling).generated_ids
        assert len(ref) == N_NEW
        assert fw.output.generated_ids == ref
