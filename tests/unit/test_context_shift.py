"""The rolling context's pieces (codegen/context.py, exact.kv_shift_*): the
policy's parsing and rule, the RoPE delta's sign and size, and the reference
generation's shifts.  C == twin bit for bit: tests/host/test_kernel_twins.py
and tests/emu/test_kernel_twins_m7.py (registry entries tllm_kv_shift_*)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyllm_gen.context import ContextRoll, context_roll, parse_context_policy, shift_rows
from tinyllm_gen.errors import UserError
from tinyllm_gen.reference import exact
from tinyllm_gen.reference.executor import rope_tables

F32 = np.float32
STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
HD, THETA, T = 16, 10000.0, 40


def rope64(x: np.ndarray, pos: int) -> np.ndarray:
    """RoPE in float64 (rotate-half), the angle computed directly."""
    half = HD // 2
    ang = pos / THETA ** (np.arange(0, HD, 2, dtype=np.float64) / HD)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=-1)


@pytest.mark.parametrize("pos,delta", [(5, 1), (30, 13), (39, 35), (17, 17)])
def test_turning_back_by_delta_is_rope_at_the_earlier_position(pos, delta):
    x = np.random.default_rng(pos).normal(0, 2, (3, HD))
    cos, sin = rope_tables(HD, THETA, T)
    roped = exact.rope(x.astype(F32).reshape(-1), 3, HD, cos[pos], sin[pos]).reshape(3, HD)
    back = exact.rope_back(roped, cos[delta], sin[delta]).astype(np.float64)
    np.testing.assert_allclose(back, rope64(x, pos - delta), rtol=0, atol=2e-5 * np.abs(x).max())
    assert not np.allclose(back, rope64(x, pos + delta), atol=1e-2)  # the sign: back, not forward


@pytest.mark.parametrize("bits", [8, 4])
def test_a_shift_moves_the_window_down_and_keeps_the_sinks(bits):
    rng = np.random.default_rng(bits)
    nkv, sinks, delta, n_rows, group = 2, 4, 10, 20, 8
    cos, sin = rope_tables(HD, THETA, T)
    raw = rng.normal(0, 2, (T, nkv, HD))
    keys = np.stack([exact.rope(raw[t].astype(F32).reshape(-1), nkv, HD, cos[t], sin[t]) for t in range(T)])
    keys = keys.reshape(T, nkv, HD)
    vals = rng.normal(0, 2, (T, nkv, HD)).astype(F32)
    if bits == 8:
        (kq, ks), (vq, vs) = exact.quantize_rows_i8(keys), exact.quantize_rows_i8(vals)
        deq = lambda q, s: q.astype(np.float64) * s[..., None]  # noqa: E731
        shift = lambda *a: exact.kv_shift_i8(*a)  # noqa: E731
        tol = 0.01
    else:
        (kq, ks), (vq, vs) = exact.quantize_rows_i4(keys, group), exact.quantize_rows_i4(vals, group)
        deq = lambda q, s: q.astype(np.float64) * np.repeat(s, group, axis=-1)  # noqa: E731
        shift = lambda *a: exact.kv_shift_kv4(*a, group)  # noqa: E731
        tol = 0.2
    before = [a.copy() for a in (kq, ks, vq, vs)]
    shift(kq, ks, vq, vs, sinks, delta, n_rows, cos[delta], sin[delta])
    for a, b in zip((kq, ks, vq, vs), before):  # the sinks and the rows past the moved ones: untouched
        assert np.array_equal(a[:sinks], b[:sinks]) and np.array_equal(a[sinks + n_rows:], b[sinks + n_rows:])
    src = slice(sinks + delta, sinks + delta + n_rows)
    assert np.array_equal(vq[sinks:sinks + n_rows], before[2][src])  # V as it was
    assert np.array_equal(vs[sinks:sinks + n_rows].view(np.uint32), before[3][src].view(np.uint32))
    moved = deq(kq[sinks:sinks + n_rows], ks[sinks:sinks + n_rows])
    want = np.stack([rope64(raw[t], t - delta) for t in range(sinks + delta, sinks + delta + n_rows)])
    assert np.abs(moved - want).max() < tol * np.abs(raw).max()  # the key at its new slot, to quantization


def test_the_policy_parses_and_its_rule_keeps_positions_in_the_cache():
    assert parse_context_policy("stop") is None
    assert parse_context_policy("roll") == 4 and parse_context_policy("roll:0") == 0
    assert context_roll("stop", 32) is None
    roll = context_roll("roll", 32)
    assert roll == ContextRoll(4, 14) and roll.policy == "roll:4"
    assert shift_rows(roll, 31) == 13  # rows 18 .. 30 move to 4 .. 16; the pending token goes to 17
    assert context_roll("roll:30", 32) == ContextRoll(30, 1)


@pytest.mark.parametrize("text", ["roll:", "roll:-1", "roll:x", "Roll", "stop:2", "rolling", "roll:1e3"])
def test_a_bad_policy_is_one_line_naming_the_fix(text):
    with pytest.raises(UserError, match="use stop, roll or roll:SINKS"):
        parse_context_policy(text)


def test_too_many_sinks_for_the_context_is_refused():
    with pytest.raises(UserError, match=r"roll:31 keeps 31 sinks but the context has 32 positions: use fewer sinks "
                                        r"\(at most 30\)"):
        context_roll("roll:31", 32)


def test_compile_refuses_a_bad_policy_with_exit_status_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen", "compile", str(STORY), "-o",
                           str(tmp_path / "out"), "--context-policy", "roll:many"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--context-policy 'roll:many' is not known" in proc.stderr


@pytest.mark.parametrize("fp32", [False, True], ids=["quantized", "float"])
def test_the_reference_rolls_past_the_context_and_stops_without_a_policy(fp32):
    from tinyllm_gen.compile import CompileOptions, quantize
    from tinyllm_gen.frontends import load_model
    from tinyllm_gen.reference.executor import Executor, FloatKernels, QuantKernels
    from tinyllm_gen.reference.sampler import SamplingOptions
    from tinyllm_gen.reference.speculative import generate_speculative

    m = load_model(STORY)
    kernels = FloatKernels(m.graph, 32) if fp32 else QuantKernels(quantize(m, CompileOptions()), 32)
    ex, ids, eos = Executor(m.graph, kernels), m.tokenizer.encode("One day"), m.graph.config.eos_ids
    stopped = generate_speculative(ex, ids, 128, 32, eos, SamplingOptions())
    assert (len(ids) + len(stopped.generated_ids), stopped.stop_reason, stopped.shifts) == (32, "context", 0)
    rolled = generate_speculative(ex, ids, 128, 32, eos, SamplingOptions(), roll=context_roll("roll", 32))
    assert (len(rolled.generated_ids), rolled.stop_reason) == (128, "max_tokens")
    assert rolled.shifts == 8  # the first at 31 - 3 prompt ids = 29 tokens, then one per 14
    assert rolled.generated_ids[:len(stopped.generated_ids)] == stopped.generated_ids  # the same until the shift
