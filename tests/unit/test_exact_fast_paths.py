"""The vectorised twins (exact.py: integer block sums as one float32 matrix
product, the float epilogue over whole-row vectors block by block) against
their definitions written out as the C loops them: per group or block in
order, one row vector at a time.  Bits compared, tolerance 0; hypothesis in
its derandomized mode (repeatable).  The registry (tests/host/
test_kernel_twins.py) compares the same twins with the C."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_registry import inputs as I
from kernel_registry.entries_gguf import gguf_blocks
from tinyllm_gen.quant.formats import gguf_fields
from tinyllm_gen.quant.rtn import quantize_q4_rtn
from tinyllm_gen.reference import exact

F32 = np.float32
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def bits(a):
    return np.ascontiguousarray(a, F32).view(np.uint32)


# ------------------------------------------------------------ the definitions
def quantize_groups_i8_loop(x, group):
    """tllm_quantize_i8: one group at a time."""
    x = np.asarray(x, F32)
    q = np.zeros(x.shape[-1], np.int8)
    bounds = exact.group_bounds(x.shape[-1], group)
    scales = np.zeros(len(bounds), F32)
    for gi, (a, b) in enumerate(bounds):
        amax = F32(np.max(np.abs(x[a:b])))
        if amax >= exact.AMAX_MIN:
            scales[gi] = amax / F32(127.0)
            inv = F32(127.0) / amax
            q[a:b] = np.clip(exact.round_half_away(x[a:b] * inv), -127, 127)
    return q, scales


def matvec_q4_loop(w_q, w_scales, group, x_q, x_scales, bias=None):
    """tllm_matvec_q4: acc = acc + ((float)isum * ws) * xs, group by group."""
    acc = np.zeros(w_q.shape[0], F32)
    wq, xq = w_q.astype(np.int64), x_q.astype(np.int64)
    for gi, (a, b) in enumerate(exact.group_bounds(w_q.shape[1], group)):
        isum = (wq[:, a:b] @ xq[a:b]).astype(np.int32)
        acc = acc + (isum.astype(F32) * w_scales[:, gi]) * x_scales[gi]
    return acc + bias.astype(F32) if bias is not None else acc


def matvec_gguf_loop(qtype, d, m, q, x_q, x_scales, bias=None):
    """tllm_matvec_q40/q41/q80: one float term per block (gguf_block_terms), blocks in order."""
    acc = np.zeros(q.shape[0], F32)
    wq = q.astype(np.int64)
    for b in range(q.shape[1] // 32):
        a, e = 32 * b, 32 * b + 32
        isum = (wq[:, a:e] @ x_q[a:e].astype(np.int64)).astype(np.int32)
        xsum = np.int32(x_q[a:e].astype(np.int32).sum())
        acc = acc + exact.gguf_block_terms(qtype, d[:, b], None if m is None else m[:, b], isum, xsum, x_scales[b])
    return acc + bias.astype(F32) if bias is not None else acc


# ------------------------------------------------------------------ inputs
def activations(r, n, kind):
    if kind == "extreme":
        return I.extreme_vector(r, n)
    if kind == "tiny" and n >= 32:  # a group below TLLM_AMAX_MIN's neighbourhood, the rest of size 1
        return I.tiny_group(n, 32, 1e-37)
    return I.with_zero_groups(I.normal(r, n, 3.0), 32)


KINDS = st.sampled_from(["normal", "extreme", "tiny"])


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 300), st.sampled_from([32, 64, 128]), KINDS)
def test_quantize_groups_i8_is_the_group_loop(seed, P, n, group, kind):
    r = np.random.default_rng(seed)
    x = np.stack([activations(r, n, kind) for _ in range(P)])
    with np.errstate(over="ignore", invalid="ignore"):
        q, s = exact.quantize_groups_i8(x, group)
        for p in range(P):  # a row per vector, each quantized on its own
            q1, s1 = quantize_groups_i8_loop(x[p], group)
            assert np.array_equal(q[p], q1) and np.array_equal(bits(s[p]), bits(s1))
            q0, s0 = exact.quantize_groups_i8(x[p], group)
            assert np.array_equal(q0, q1) and np.array_equal(bits(s0), bits(s1))


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 40), st.integers(1, 300),
       st.sampled_from([32, 64, 128]), st.booleans(), st.sampled_from([None, 1, 3, 16]), KINDS)
def test_matmat_q4_is_the_group_loop(seed, P, rows, cols, group, bias, chunk, kind):
    r = np.random.default_rng(seed)
    t = quantize_q4_rtn("w", I.normal(r, (rows, cols)) * r.uniform(0.05, 3.0, (rows, 1)).astype(F32), group)
    b = I.normal(r, rows) if bias else None
    with np.errstate(over="ignore", invalid="ignore"):
        xq, xs = exact.quantize_groups_i8(np.stack([activations(r, cols, kind) for _ in range(P)]), group)
        got = exact.matmat_q4_operand(exact.block_operand(t.q, group), np.ascontiguousarray(t.scales.T), xq, xs, b,
                                      chunk)
        for p in range(P):
            want = matvec_q4_loop(t.q, t.scales, group, xq[p], xs[p], b)
            assert np.array_equal(bits(got[p]), bits(want))
            assert np.array_equal(bits(exact.matvec_q4(t.q, t.scales, group, xq[p], xs[p], b)), bits(want))


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.sampled_from(["Q4_0", "Q4_1", "Q8_0"]), st.integers(1, 5), st.integers(1, 40),
       st.integers(1, 70), st.booleans(), st.sampled_from([None, 1, 3, 16]), KINDS)
def test_matmat_gguf_is_the_block_loop(seed, qtype, P, rows, n_blocks, bias, chunk, kind):
    """Every fp16 scale class (subnormal to 65504, signed zeros), every nibble / int8 value."""
    r = np.random.default_rng(seed)
    cols = 32 * n_blocks
    d, m, q = gguf_fields(qtype, gguf_blocks(r, qtype, rows, cols), cols)
    b = I.normal(r, rows) if bias else None
    with np.errstate(over="ignore", invalid="ignore"):
        xq, xs = exact.quantize_groups_i8(np.stack([activations(r, cols, kind) for _ in range(P)]), 32)
        got = exact.matmat_gguf(exact.GGUFOperand.of(qtype, d, m, q), xq, xs, b, chunk)
        for p in range(P):
            want = matvec_gguf_loop(qtype, d, m, q, xq[p], xs[p], b)
            assert np.array_equal(bits(got[p]), bits(want))
            assert np.array_equal(bits(exact.matvec_gguf(qtype, d, m, q, xq[p], xs[p], b)), bits(want))


def test_block_sums_are_exact_at_the_largest_products():
    """The bound of exact.MAX_EXACT_BLOCK: -128 * -127 in every lane of a
    1024-input block sums to 16,646,144 < 2^24, exactly, as do mixed signs."""
    q = np.full((3, 2048), -128, np.int8)
    q[1, ::2] = 127
    x = np.full((2, 2048), -127, np.int8)
    x[1, 1::3] = 127
    got = exact.block_sums(exact.block_activations(x, 1024), exact.block_operand(q, 1024))
    want = np.stack([(x[:, a:a + 1024].astype(np.int64) @ q[:, a:a + 1024].T.astype(np.int64)) for a in (0, 1024)])
    assert np.array_equal(got.astype(np.int64), want) and got.max() == 128 * 127 * 1024
