"""The placer never overlaps two live buffers, is deterministic, and the
plan of real transformer graphs reaches its lower bound."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm_gen.ir import ModelConfig, build_decoder_graph, expected_weight_shapes
from plans import plan_memory
from tinyllm_gen.plan.lifetimes import BufferRequest
from tinyllm_gen.plan.placer import arena_bytes, overlapping_pairs, peak_live_bytes, place
from tinyllm_gen.plan.report import plan_text
from tinyllm_gen.errors import UserError
from tinyllm_gen.quant.rtn import quantize_graph

buffers_strategy = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 10), st.sampled_from(["float", "int8_t"])),
    min_size=1, max_size=40,
).map(lambda items: [BufferRequest(f"b{i}", ct, n, t, t + d, "activation") for i, (n, t, d, ct) in enumerate(items)])


def _loop_greedy(ordered):
    """The greedy placement written as the plain loop the placer vectorises: each buffer at the lowest
    aligned offset below or between the byte ranges of the buffers placed before it that share its time."""
    placed = {}
    for buf in ordered:
        busy = sorted((off, off + o.size) for o, off in placed.values() if o.overlaps_in_time(buf))
        cand = 0
        for start, stop in busy:
            if -(-cand // buf.align) * buf.align + buf.size <= start:
                break
            cand = max(cand, stop)
        placed[buf.name] = (buf, -(-cand // buf.align) * buf.align)
    return {name: off for name, (_, off) in placed.items()}


mixed_strategy = st.lists(
    st.tuples(st.integers(0, 700), st.integers(0, 30), st.integers(0, 10), st.sampled_from(["float", "int8_t"]),
              st.sampled_from([4, 16, 32])),
    min_size=0, max_size=40,
).map(lambda items: [BufferRequest(f"b{i}", ct, n, t, t + d, "activation", align=a)
                     for i, (n, t, d, ct, a) in enumerate(items)])


@settings(max_examples=150, deadline=None)
@given(mixed_strategy)
def test_the_vectorised_placer_is_the_plain_greedy_loop(buffers):
    """place() in one unbounded memory is the first order's greedy loop or a tighter order's; the peak and
    the overlap check are their plain definitions (zero-size buffers and mixed alignments included)."""
    from tinyllm_gen.plan.placer import ORDERS

    offsets = place(buffers)
    loops = [_loop_greedy(sorted(buffers, key=key)) for key in ORDERS]
    ends = [arena_bytes(buffers, o) for o in loops]
    assert offsets == loops[ends.index(min(ends))]
    steps = sorted({b.first for b in buffers})
    live = [sum(b.size for b in buffers if b.first <= t <= b.last) for t in steps]
    peak = max(live, default=0)
    assert peak_live_bytes(buffers) == ((peak, steps[live.index(peak)]) if peak else (0, 0))
    shifted = {b.name: (i * 37) % 500 for i, b in enumerate(buffers)}  # some placement with clashes
    clashes = [(a.name, b.name) for i, a in enumerate(buffers) for b in buffers[i + 1:] if a.overlaps_in_time(b)
               and shifted[a.name] < shifted[b.name] + b.size and shifted[b.name] < shifted[a.name] + a.size]
    assert overlapping_pairs(buffers, shifted) == clashes


@settings(max_examples=150, deadline=None)
@given(buffers_strategy)
def test_no_two_live_buffers_overlap(buffers):
    offsets = place(buffers)
    assert overlapping_pairs(buffers, offsets) == []
    assert all(offsets[b.name] % b.align == 0 for b in buffers)
    peak, _ = peak_live_bytes(buffers)
    assert arena_bytes(buffers, offsets) >= peak


@settings(max_examples=50, deadline=None)
@given(buffers_strategy)
def test_placement_is_deterministic_and_order_independent(buffers):
    assert place(buffers) == place(list(reversed(buffers)))


def test_overlap_checker_catches_a_bad_placement():
    a = BufferRequest("a", "float", 16, 0, 5, "activation")
    b = BufferRequest("b", "float", 16, 3, 8, "activation")
    assert overlapping_pairs([a, b], {"a": 0, "b": 32}) == [("a", "b")]
    assert overlapping_pairs([a, b], {"a": 0, "b": 64}) == []


def model(dim, hidden, layers, heads, kv, vocab, seq, tied=True):
    c = ModelConfig("llama", dim, hidden, layers, heads, kv, dim // heads, vocab, seq, tied_embeddings=tied,
                    eos_ids=(2,))
    rng = np.random.default_rng(0)
    w = {k: rng.standard_normal(s).astype(np.float32) for k, s in expected_weight_shapes(c).items()}
    return quantize_graph(build_decoder_graph(c, w), 32)


@pytest.mark.parametrize("shape", [
    (64, 172, 5, 8, 4, 512, 512),   # stories260K
    (96, 160, 3, 6, 2, 320, 96),
    (288, 768, 2, 6, 6, 1000, 64),
])
def test_transformer_plan_reaches_lower_bound(shape):
    plan = plan_memory(model(*shape), shape[-1], 4 * 1024 * 1024)
    assert plan.arena_bytes == plan.lower_bound_bytes
    assert plan.total_bytes == plan.arena_bytes + plan.stack_bytes + plan.runtime_static_bytes
    text = plan_text(plan)
    assert "ratio 1.00" in text and "time x offset chart" in text


def test_stories260k_fits_256k_with_int8_kv():
    plan = plan_memory(model(64, 172, 5, 8, 4, 512, 512), 512, 512 * 1024)
    assert plan.total_bytes <= 256 * 1024


def test_over_budget_error_names_bytes_and_the_context_that_fits():
    qg = model(64, 172, 5, 8, 4, 512, 512)
    with pytest.raises(UserError) as e:
        plan_memory(qg, 512, 100 * 1024)
    msg = str(e.value)
    assert "over by" in msg and "102,400 B" in msg and "KV cache int8 at 512 tokens" in msg
    best = int(msg.rsplit("--max-seq ", 1)[1].split()[0])
    assert plan_memory(qg, best, 100 * 1024).fits
    with pytest.raises(UserError):
        plan_memory(qg, best + 1, 100 * 1024)
    assert "\n" not in msg


def test_per_channel_and_m7_plans_reach_lower_bound():
    """The scratch differs per scheme and kernel set; the placer (trying
    several greedy orders) still reaches the peak-live bound."""
    from dataclasses import replace

    from tinyllm_gen.quant.per_channel import quantize_per_channel

    qg = model(64, 96, 2, 4, 2, 300, 128)
    pc = quantize_per_channel(qg.graph, list(range(1, 40)))
    for variant in (pc, replace(qg, kernels="cortex-m7")):
        plan = plan_memory(variant, 128, 4 * 1024 * 1024)
        assert plan.arena_bytes == plan.lower_bound_bytes
