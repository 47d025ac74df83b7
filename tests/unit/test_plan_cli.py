"""`tinyllm-gen plan`: no tokenizer, no quantization; exit 0 with the plan,
or 2 with one line naming what does not fit, by how much, and what would.
The two target shapes are llama2.c checkpoints of random weights."""
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from llama2c_shapes import write_llama2c_v0


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    return {"260k": write_llama2c_v0(d / "s260k.bin", 64, 172, 5, 8, 4, 512, 512),
            "15m": write_llama2c_v0(d / "s15m.bin", 288, 768, 6, 6, 6, 32000, 256)}


def one_line_error(proc):
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_stories260k_plan_json_fits_in_256k(ckpts):
    # weights read in place (--stream auto, the DK's default, would pin the blob into the SRAM left)
    proc = cli("plan", ckpts["260k"], "--board", "stm32h750b-dk", "--stream", "off", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fits"] and doc["max_seq"] == 512 and doc["total_sram_bytes"] <= 256 * 1024
    assert set(doc["regions"]) == {"dtcm", "axi"} and doc["kv_cache_bytes"] > 0
    assert doc["lower_bound_bytes"] == doc["arena_bytes"]
    text = cli("plan", ckpts["260k"], "--board", "stm32h750b-dk")
    assert text.returncode == 0 and "dtcm: time x offset chart" in text.stdout


def test_stories15m_does_not_fit_512k_and_says_what_would(ckpts):
    sram = ("--board", "stm32h750b-dk", "--kv-region", "sram", "--max-seq", "256")
    line = one_line_error(cli("plan", ckpts["15m"], *sram, "--kv-bits", "4"))
    assert "over by" in line and "KV cache int4 at 256 tokens" in line
    assert "fits with --ram-budget" in line and "--max-seq" in line
    int8 = one_line_error(cli("plan", ckpts["15m"], *sram))
    assert "--kv-bits 4" in int8 and "--kv-region sdram" in int8


def test_stories15m_by_default_puts_its_kv_cache_in_the_dks_sdram(ckpts):
    """--kv-region auto (the default): the model's 256 tokens do not fit the 512 KiB, so the DK's SDRAM holds
    the KV cache; told to keep it in SRAM without a --max-seq, the plan is the longest context SRAM holds."""
    doc = json.loads(cli("plan", ckpts["15m"], "--board", "stm32h750b-dk", "--json").stdout)
    assert doc["fits"] and doc["max_seq"] == 256 and doc["kv_region"] == "sdram"
    assert doc["kv_cache_regions"] == ["sdram"]
    sram = json.loads(cli("plan", ckpts["15m"], "--board", "stm32h750b-dk", "--kv-region", "sram", "--json").stdout)
    auto = json.loads(cli("plan", ckpts["15m"], "--board", "stm32h750b-dk", "--kv-region", "sram", "--max-seq", "auto",
                          "--json").stdout)
    assert 8 <= sram["max_seq"] == auto["max_seq"] < 256 and sram["kv_region"] == "sram"
    assert "the longest this board holds (the model's 256 do not fit" in sram["trade_off"]
    # the trade-off tables are planned as the fit was: at the context chosen, the KV cache where it went
    assert {r["max_seq"] for r in sram["prefill"]["trade_off"] if r.get("max_seq")} <= set(range(8, 256))
    assert all(r["max_seq"] == 256 for r in doc["stream"]["trade_off"]), doc["stream"]["trade_off"]


def test_stories15m_auto_context_and_trade_off(ckpts):
    proc = cli("plan", ckpts["15m"], "--board", "stm32h750b-dk", "--kv-bits", "4", "--max-seq", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fits"] and 8 <= doc["max_seq"] < 256 and doc["total_sram_bytes"] <= 512 * 1024
    assert "int8 KV would fit" in doc["trade_off"]


def test_weights_too_big_for_weact_qspi(ckpts):
    line = one_line_error(cli("plan", ckpts["15m"], "--board", "weact-h750", "--kv-bits", "4", "--max-seq", "64"))
    assert "weights are" in line and "weact-h750 holds" in line and "over by" in line


def test_budget_beyond_board_sram(ckpts):
    line = one_line_error(cli("plan", ckpts["260k"], "--board", "weact-h750", "--ram-budget", "2M"))
    assert "exceeds board weact-h750" in line


def test_plan_and_compile_agree_for_the_m7_kernels(tmp_path):
    """`plan` must pick the kernel set compile picks: it decides the scratch."""
    import json as _json
    import subprocess as _sp
    import sys as _sys
    from pathlib import Path as _Path

    model = _Path(__file__).resolve().parents[2] / "models" / "story-260k"
    run = lambda *a: _sp.run([_sys.executable, "-m", "tinyllm_gen.cli", *map(str, a)], capture_output=True,  # noqa: E731
                             text=True, check=True).stdout
    planned = _json.loads(run("plan", model, "--board", "qemu-mps2-an500", "--json"))
    run("compile", model, "-o", tmp_path / "out", "--board", "qemu-mps2-an500")
    compiled = _json.loads((tmp_path / "out" / "report.json").read_text())
    assert planned["total_sram_bytes"] == compiled["total_sram_bytes"]
    assert planned["arena_bytes"] == compiled["arena_bytes"] == compiled["lower_bound_bytes"]


def test_greedy_sampler_frees_logits_and_sampler_scratch(ckpts):
    """stories15M's 32K vocabulary: logits (128,000 B) and the sampler's index
    scratch (64,000 B) leave the plan with --sampler greedy, so the int4 KV
    cache gets ~80 more tokens in 512 KiB."""
    docs = {}
    for sampler in ("full", "greedy"):
        proc = cli("plan", ckpts["15m"], "--board", "stm32h750b-dk", "--kv-bits", "4", "--max-seq", "auto",
                   "--sampler", sampler, "--prefill-batch", "1", "--stream", "off", "--json")
        assert proc.returncode == 0, proc.stderr
        docs[sampler] = json.loads(proc.stdout)
    full, greedy = docs["full"], docs["greedy"]
    assert full["max_seq"] == 141 and greedy["max_seq"] == 221
    names = {b["name"]: b for b in greedy["buffers"]}
    assert "sample_idx" not in names and names["logits"]["count"] == 64
    assert "sample_idx" in {b["name"] for b in full["buffers"]}


def test_greedy_sampler_needs_the_group_scheme(ckpts, tmp_path):
    proc = cli("compile", ckpts["260k"], "-o", tmp_path / "o", "--sampler", "greedy", "--quant", "per-channel")
    line = one_line_error(proc)
    assert "--sampler greedy streams the group-wise classifier" in line
