"""The KV cache in the STM32H750B-DK's FMC SDRAM (--kv-region, issue 25.1),
run end to end: bringup.c starts the SDRAM (the Unicorn FMC model stops the
run at any step out of order, and at an SDRAM access the MPU leaves as
Device memory), reset.c zeroes the KV arena there, and the tokens equal the
quantized reference's.

* the bundled story-260k with a budget its 512-token int8 KV cache does not
  fit beside the rest (192 KiB): --kv-region auto sends it to SDRAM;
  under Unicorn, and under Renode where `renode` is on PATH (the stock
  STM32H743 platform has memory at 0xD0000000 and only tags the FMC's
  registers, which bring-up writes and never polls);
* SmolLM2-135M-Instruct with --kv-region sdram --kv-bits 4 --max-seq auto:
  at least 1,024 tokens of context.  Under Unicorn a prompt past position
  1,000 is about 2e11 guest instructions of prefill (51 minutes on an
  idle core, measured with --stream off; docs/sdram.md): the default run is
  the ChatML question (16 prompt tokens) and two new tokens;
  TINYLLM_SDRAM_LONG=1 prefills a prompt of 1,010 tokens so the generated
  tokens sit at positions 1,010 and 1,011."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import need
from gguf_models import need_real_emulation, smollm2_path
from tinyllm_gen import quant
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.resources import boards_dir
from tinyllm_gen.run.firmware import run_firmware

pytestmark = [pytest.mark.emu]

BUNDLED = boards_dir().parent / "models" / "story-260k"
QUESTION_TURN = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
LONG_PROMPT_TOKENS = 1010
CALIBRATION = Path(quant.__file__).parent / "calibration.txt"


def reference(compiled, ids, n):
    m, seq = compiled.model, compiled.plan.max_seq
    return generate(Executor(m.graph, QuantKernels(compiled.qgraph, seq)), ids, n, seq, m.graph.config.eos_ids,
                    SamplingOptions()).generated_ids


@pytest.fixture(scope="module")
def story_sdram(tmp_path_factory):
    need("arm-none-eabi-gcc")
    opts = CompileOptions(board="stm32h750b-dk", max_seq=512, ram_budget=192 * 1024, kv_region="auto")
    compiled = compile_path(BUNDLED, opts)
    assert compiled.plan.kv_cache_regions == ("sdram",) and compiled.plan.max_seq == 512
    out = tmp_path_factory.mktemp("sdram") / "story-dk-sdram"
    write_tree(compiled.tree, out)
    build(out)
    config = (out / "board" / "board_config.h").read_text()
    assert "#define TLLM_SDRAM_BASE 0xD0000000u" in config
    return compiled, out


def test_story_with_its_kv_cache_in_sdram_gives_the_reference_tokens_under_unicorn(story_sdram):
    pytest.importorskip("unicorn")
    compiled, out = story_sdram
    ids = compiled.model.tokenizer.encode("Once upon a time")
    want = reference(compiled, ids, 24)
    fw = run_firmware(out, ids, 24, SamplingOptions(), timeout_s=BACKSTOP_S)
    assert fw.output.generated_ids == want
    assert fw.output.canary_ok is True and fw.output.canary_regions.get("sdram") is True


@pytest.mark.skipif(shutil.which("renode") is None, reason="renode is not on PATH (see docs/renode.md)")
def test_story_with_its_kv_cache_in_sdram_gives_the_reference_tokens_under_renode(story_sdram):
    compiled, out = story_sdram
    ids = compiled.model.tokenizer.encode("Once upon a time")
    want = reference(compiled, ids, 8)
    fw = run_firmware(out, ids, 8, SamplingOptions(), timeout_s=BACKSTOP_S, emulator="renode")
    assert fw.output.generated_ids == want and fw.output.canary_ok is True


def long_prompt(tokenizer, n: int) -> list[int]:
    """n tokens of ordinary English (the package's calibration text), then the question: its answer starts
    past position n - 16."""
    question = tokenizer.encode(QUESTION_TURN, bos=False)
    text = tokenizer.encode("<|im_start|>user\n" + CALIBRATION.read_text(), bos=False)
    while len(text) < n:
        text += text
    return text[:n - len(question)] + question


@pytest.mark.slow
def test_smollm2_with_its_kv_cache_in_sdram_holds_1024_tokens_and_gives_the_reference_tokens(tmp_path):
    need_real_emulation()
    pytest.importorskip("unicorn")
    need("arm-none-eabi-gcc")
    opts = CompileOptions(board="stm32h750b-dk", sampler="greedy", kv_bits=4, max_seq="auto", kv_region="sdram")
    compiled = compile_path(smollm2_path(), opts)
    plan = compiled.plan
    assert plan.max_seq >= 1024 and plan.kv_cache_regions == ("sdram",)
    assert "with --kv-region sram (this prefill batch and stream):" in compiled.trade_off  # both figures
    out = tmp_path / "smol-dk-sdram"
    write_tree(compiled.tree, out)
    build(out)
    tok = compiled.model.tokenizer
    long = os.environ.get("TINYLLM_SDRAM_LONG") == "1"
    ids = long_prompt(tok, LONG_PROMPT_TOKENS) if long else tok.encode(QUESTION_TURN, bos=False)
    n = 2
    want = reference(compiled, ids, n)
    fw = run_firmware(out, ids, n, SamplingOptions(), timeout_s=BACKSTOP_S)
    print(f"SmolLM2 --kv-region sdram: max_seq {plan.max_seq}, {len(ids)} prompt tokens, prefill "
          f"{fw.output.prefill_instructions} instructions, per token {fw.output.instructions_per_token}")
    assert fw.output.generated_ids == want
    assert fw.output.canary_ok is True
