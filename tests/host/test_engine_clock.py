"""The engine's costs stay exact with a clock that wraps: a board extends a
32-bit cycle counter to 64 bits at each read (the H750's DWT_CYCCNT wraps
every 8.9 s at 480 MHz, and SmolLM2's 1,000-token prefill takes minutes), so
the engine must read its clock after every pass over the weights, not only
around the whole prompt.  tests/c/clock/wrapping_clock.c advances a fake
32-bit counter by 3e9 ticks per model call; every cost the engine reports
must be exactly the calls it spans times that."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from c_program import build_program
from firmware_harness import need
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.frontends import load_model

pytestmark = pytest.mark.host

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
DRIVER = Path(__file__).resolve().parents[1] / "c" / "clock" / "wrapping_clock.c"
ADVANCE = 3_000_000_000  # the driver's ticks per model call
LINK_WRAPS = ("-Wl,--wrap=tllm_model_prefill", "-Wl,--wrap=tllm_model_step")  # the driver counts these calls
PROMPT = "Once upon a time there was a little dog who liked to run in the park"


@pytest.mark.parametrize("prefill_batch", [1, 4])
def test_costs_survive_counter_wraps(tmp_path, prefill_batch):
    need("cmake")
    need("gcc")
    out = tmp_path / f"out-p{prefill_batch}"
    write_tree(compile_path(STORY, CompileOptions(board="host", max_seq=64, prefill_batch=prefill_batch)).tree, out)
    exe = build_program(tmp_path / (out.name + "-clock"), "wrapping_clock", DRIVER, {"model": out},
                        link_options=LINK_WRAPS)
    ids = load_model(STORY).tokenizer.encode(PROMPT)
    run = subprocess.run([str(exe), "5", *map(str, ids)], check=True, capture_output=True, text=True, timeout=600)
    lines = run.stdout.split("\n")
    prefill = lines[-2].split()
    assert prefill[0] == "prefill"
    cost, calls = int(prefill[1]), int(prefill[2])
    assert calls == -(-len(ids) // prefill_batch) and calls >= 2  # the bug needs two passes between reads
    assert cost == calls * ADVANCE, f"prefill cost {cost} for {calls} passes: the clock wrapped between reads"
    tokens = [tuple(map(int, line.split())) for line in lines[:-2]]
    assert len(tokens) == 5 and tokens[0] == (0, 0)  # the first token is the prompt's pass's
    assert all(c == n * ADVANCE and n == 1 for c, n in tokens[1:])
