"""The plan is derived from the lowered step (issue 11.3): lower_step declares
every buffer once, the planner computes live ranges over its kernel calls,
and bind writes the offsets back.  Checked for every kernel set, both
samplers, both KV precisions and the per-channel scheme, from a graph built
from its config alone (what `tinyllm-gen plan` lowers)."""
import itertools

import pytest

from plans import plan_memory
from tinyllm_gen.ir import ModelConfig, build_decoder_graph
from tinyllm_gen.kernels.refs import BufferRef, refs_of
from tinyllm_gen.lower.records import StepSource
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.plan.lifetimes import lifetimes_of

CONFIG = ModelConfig("qwen2", 96, 160, 3, 6, 2, 16, 320, 96, tied_embeddings=False, qkv_bias=True, eos_ids=(1,))
MODES = [("portable", "rtn", "full"), ("portable", "rtn", "greedy"), ("cortex-m7", "rtn", "full"),
         ("cortex-m7", "rtn", "greedy"), ("portable", "per-channel", "full")]


def shape(kernels, method, sampler, kv_bits):
    return StepSource(build_decoder_graph(CONFIG, {}), 32, kv_bits, kernels, method)


def buffers_of(call):
    return list(refs_of(call.args, BufferRef))


@pytest.mark.parametrize("mode,kv_bits", list(itertools.product(MODES, (8, 4))))
def test_every_buffer_is_declared_once_and_used(mode, kv_bits):
    step = lower_step(shape(*mode, kv_bits), mode[2])
    declared = {d.name: d for d in step.decls}
    assert len(declared) == len(step.decls)
    used = set()
    for call in step.calls:
        for ref in buffers_of(call):
            d = declared[ref.name]
            assert (d.ctype, d.count) == (ref.ctype, ref.count) and ref.offset == -1
            used.add(ref.name)
    assert {d.name for d in step.decls if d.span is None} <= used  # nothing declared and left unused
    assert used <= set(declared)
    assert ("sample_idx" in declared) == (mode[2] == "full")


@pytest.mark.parametrize("mode", MODES)
def test_live_ranges_follow_the_calls(mode):
    step = lower_step(shape(*mode, 8), mode[2])
    lt = lifetimes_of(step)
    end = len(step.calls)
    logits = lt.by_name(step.logits.name)
    assert logits.last == end  # the sampler (or the greedy token) reads it after the step
    for name in ("tokens", "gen_state", "l0.k_cache", "l2.v_scale"):
        assert (lt.by_name(name).first, lt.by_name(name).last) == (0, end)
    assert (lt.by_name("request").first, lt.by_name("request").last) == (0, 0)
    for i, call in enumerate(step.calls):
        for ref in buffers_of(call):
            b = lt.by_name(ref.name)
            assert b.first <= i <= b.last


@pytest.mark.parametrize("mode", MODES)
def test_planned_buffers_never_overlap_while_both_live(mode):
    plan = plan_memory(shape(*mode, 8), 48, 512 * 1024, sampler=mode[2])
    placed = list(plan.buffers)
    for a, b in itertools.combinations(placed, 2):
        if a.region == b.region and a.request.overlaps_in_time(b.request):
            assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a.name, b.name)


def test_plan_command_plans_the_per_channel_scheme_as_compile_does(tmp_path):
    """`plan --quant per-channel` lowers the same step compile lowers: the
    same buffers at the same offsets as the compiled model's plan."""
    import json
    import subprocess
    import sys

    from tinymodels import make_hf_model
    from tinyllm_gen.compile import CompileOptions, compile_path

    model = make_hf_model(tmp_path / "m", arch="qwen2", dim=96, hidden=160, layers=2, heads=6, kv_heads=2, vocab=320,
                          context=64, tied=False, seed=3)
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(model), "--quant", "per-channel",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    planned = {b["name"]: (b["region"], b["offset"], b["size"]) for b in json.loads(proc.stdout)["buffers"]}
    compiled = compile_path(model, CompileOptions(quant="per-channel")).plan
    assert planned == {p.name: (p.region, p.offset, p.size) for p in compiled.buffers}
    assert "l0.xn.s8" in planned
