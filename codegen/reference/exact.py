"""Bit-exact numpy twins of the firmware's C kernels (firmware/tllm_kernels.c).

Every function here performs the same float32 operations, in the same order,
with the same rounding, as its C twin; integer parts are exact by
construction.  Rules that make this work:

* every float op is an IEEE float32 op (numpy float32 arrays, float32
  constants; no float64 sneaks in);
* reductions run left to right (`np.cumsum(..., dtype=float32)` is
  sequential, unlike np.sum/np.dot which are pairwise/BLAS);
* the C side is built with -ffp-contract=off, so there is no FMA fusion;
* exp is our own polynomial (`expf`), never libm's.

Constants are kept as float32 bit patterns written as hex floats, and the
emitter prints them the same way into C (`c_float_literal`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = np.float32


def f32(x: float) -> np.float32:
    return np.float32(x)


def c_float_literal(x: float | np.floating) -> str:
    """A C float literal with exactly the bits of float32(x)."""
    v = float(np.float32(x))
    if v == 0.0:
        return "-0.0f" if np.signbit(np.float32(x)) else "0.0f"
    return float.hex(v) + "f"


# --- exp -------------------------------------------------------------------
# exp(x) = 2^n * e^r, n = round(x / ln2), r = x - n*ln2 (Cody-Waite split so
# the reduction is nearly exact), e^r by a degree-6 Taylor polynomial in
# Horner form (|r| <= 0.35: error < 1 ulp-ish; exactness vs. libm is not the
# point, identity between C and numpy is).
EXP_LOG2E = f32(1.4426950408889634)
EXP_LN2_HI = f32(0.693145751953125)  # 0x3f317200: exact in float32, n*hi exact for |n|<=128
EXP_LN2_LO = f32(1.4286067653302e-06)
EXP_POLY = tuple(f32(c) for c in (1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0))
EXP_MIN = f32(-86.0)  # below this the result is treated as 0 (keeps 2^n normal)
EXP_MAX = f32(88.0)  # above this the input is clamped (no inf in softmax)
# The smallest group maximum that quantizes (tllm_math.h TLLM_AMAX_MIN): below it 127/amax overflows
# float32, so such a group is zeros with scale 0, as an all-zero group.
AMAX_MIN = f32(2.0 ** -120)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero, exactly (C: lroundf, which is
    one VCVTA.S32.F32 on the M7): evaluated in float64, where |v| + 0.5 is
    exact for every float32 v.  trunc(v + copysign(0.5, v)) is
    sign(v) * floor(|v| + 0.5) (the same integer for every float32 bit
    pattern, checked exhaustively) in fewer passes."""
    v = np.asarray(v, dtype=F32).astype(np.float64)
    return np.trunc(v + np.copysign(0.5, v)).astype(np.int64)


def expf(x: np.ndarray) -> np.ndarray:
    x = np.minimum(np.asarray(x, dtype=F32), EXP_MAX)
    n = round_half_away(x * EXP_LOG2E)
    nf = n.astype(F32)
    r = x - nf * EXP_LN2_HI
    r = r - nf * EXP_LN2_LO
    p = EXP_POLY[0]
    for c in EXP_POLY[1:]:
        p = p * r + c  # two roundings: the C has no FMA (-ffp-contract=off)
    p = np.asarray(p, dtype=F32)
    n_c = np.clip(n, -126, 127)  # only matters where x < EXP_MIN, masked below
    scale = ((n_c + 127).astype(np.uint32) << np.uint32(23)).view(F32)
    return np.where(x < EXP_MIN, F32(0.0), p * scale).astype(F32)


def seq_sum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Left-to-right float32 sum, the C loop's order."""
    x = np.asarray(x, dtype=F32)
    if x.shape[axis] == 0:
        return np.zeros(np.delete(x.shape, axis), F32)
    return np.take(np.cumsum(x, axis=axis, dtype=F32), -1, axis=axis)


# --- int8 activation quantization ------------------------------------------
def group_bounds(n: int, group: int) -> list[tuple[int, int]]:
    """Groups run along the input dimension; the last one may be short."""
    return [(g, min(g + group, n)) for g in range(0, n, group)]


def quantize_groups_i8(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: amax = max|x|, scale = amax/127, q = round(x * (127/amax)).

    Returns (q int8 [..., n], scale float32 [..., n_groups]) for x [..., n]
    (one vector, or a row per token: every row is quantized on its own). An
    all-zero group has scale 0 and q 0.  Vectorised over the groups: every
    element sees the same float32 operations as the C's loop over them."""
    x = np.asarray(x, dtype=F32)
    n = x.shape[-1]
    ng = -(-n // group)
    pad = ng * group - n  # a short last group: padded with zeros, which change no max|x|
    xg = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), F32)], axis=-1) if pad else x
    xg = xg.reshape(x.shape[:-1] + (ng, group))
    amax = np.max(np.abs(xg), axis=-1)
    ok = amax >= AMAX_MIN
    scales = np.where(ok, amax / F32(127.0), F32(0.0)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(ok, F32(127.0) / np.where(ok, amax, F32(1.0)), F32(0.0)).astype(F32)
        q = np.clip(round_half_away(xg * inv[..., None]), -127, 127)
    q = np.where(ok[..., None], q, 0).astype(np.int8).reshape(x.shape[:-1] + (ng * group,))
    return (q[..., :n] if pad else q), scales


def quantize_rows_i8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise int8 (one scale per row): KV-cache heads, attention queries."""
    x = np.asarray(x, dtype=F32)
    amax = np.max(np.abs(x), axis=-1)
    ok = amax >= AMAX_MIN
    scales = np.where(ok, amax / F32(127.0), F32(0.0)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(ok, F32(127.0) / np.where(ok, amax, F32(1.0)), F32(0.0)).astype(F32)
    q = np.clip(round_half_away(x * inv[..., None]), -127, 127).astype(np.int8)
    return q, scales


# --- kernels ---------------------------------------------------------------
# The integer block sums as one float32 matrix product.  A weight of at most
# 128 in magnitude (int4, Q4 nibbles, int8) times an int8 activation, summed
# over one block of at most 1024 inputs, stays below 2^24 in every partial
# sum: float32 holds each one exactly, so BLAS computes the C's int32 sums
# whatever order it adds in.  The float epilogue then runs over whole-row
# vectors, one block at a time in ascending order: each element sees the C
# loop's float32 operations, in its order.
MAX_EXACT_BLOCK = 1024
BLOCK_CHUNK_ELEMENTS = 1 << 18  # (blocks x vectors x rows) per pass of the epilogue: its scratch stays in cache


def block_operand(q: np.ndarray, block: int) -> np.ndarray:
    """Integer weights q [rows, cols] as the right operand of `block_sums`:
    float32 [n_blocks, block, rows] (exact: small integers); a short last
    block is padded with zero weights (exact zero products)."""
    if block > MAX_EXACT_BLOCK:
        raise ValueError(f"blocks of {block} inputs can exceed 2^24 in their sums (at most {MAX_EXACT_BLOCK})")
    rows, cols = q.shape
    nb = -(-cols // block)
    out = np.zeros((nb, block, rows), F32)
    out.reshape(nb * block, rows)[:cols] = q.T
    return out


def block_activations(x_q: np.ndarray, block: int) -> np.ndarray:
    """int8 activations x_q [P, cols] as the left operand of `block_sums`:
    float32 [n_blocks, P, block], a short last block padded with zeros."""
    P, cols = x_q.shape
    nb = -(-cols // block)
    x = np.zeros((P, nb * block), F32)
    x[:, :cols] = x_q
    return np.ascontiguousarray(x.reshape(P, nb, block).transpose(1, 0, 2))


def block_sums(xb: np.ndarray, qb: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """isum[b, p, r] = sum_j x[p, block b][j] * q[r, block b][j] from
    block_activations [nb, P, block] and block_operand [nb, block, rows]:
    float32 [nb, P, rows], exact integers (see MAX_EXACT_BLOCK)."""
    return np.matmul(xb, qb, out=out)


def row_chunks(rows: int, n_blocks: int, P: int, chunk: int | None = None) -> list[tuple[int, int]]:
    """Row ranges of one epilogue pass: BLOCK_CHUNK_ELEMENTS of scratch, or `chunk` rows."""
    step = chunk or max(16, BLOCK_CHUNK_ELEMENTS // max(1, n_blocks * P))
    return [(r, min(rows, r + step)) for r in range(0, rows, step)]


def accumulate_blocks(terms: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = ((0 + terms[0]) + terms[1]) + ...: the C's float32 accumulator
    over the blocks, left to right, for every element of out [P, rows] at once
    (summed in a contiguous array: 3x faster than into a column slice)."""
    acc = np.zeros(terms.shape[1:], F32)
    for t in terms:
        np.add(acc, t, out=acc)
    out[...] = acc
    return out


def matvec_q4(w_q: np.ndarray, w_scales: np.ndarray, group: int, x_q: np.ndarray, x_scales: np.ndarray,
              bias: np.ndarray | None = None) -> np.ndarray:
    """y[r] = sum_g ((float)isum[r,g] * ws[r,g]) * xs[g]  (+ bias[r]).

    isum is the exact int32 dot product of int4 weights and int8 activations
    over one group; groups are accumulated in float32 left to right."""
    return matmat_q4(w_q, w_scales, group, np.asarray(x_q)[None], np.asarray(x_scales)[None], bias)[0]


def matmat_q4(w_q: np.ndarray, w_scales: np.ndarray, group: int, x_q: np.ndarray, x_scales: np.ndarray,
              bias: np.ndarray | None = None) -> np.ndarray:
    """Batched prefill: P activation vectors x_q [P, cols], x_scales [P, n_groups]
    through one matrix -> [P, rows].  The contract of the batched kernels
    (tllm_matmat_q4x4, tllm_matmat_q4) is that row p equals matvec_q4 of
    vector p bit for bit: every vector's float operations are the matvec's."""
    return matmat_q4_operand(block_operand(w_q, group), np.ascontiguousarray(np.asarray(w_scales, F32).T),
                             x_q, x_scales, bias)


def matmat_q4_operand(qb: np.ndarray, scales_t: np.ndarray, x_q: np.ndarray, x_scales: np.ndarray,
                      bias: np.ndarray | None = None, chunk: int | None = None) -> np.ndarray:
    """matmat_q4 from a prepared matrix: qb = block_operand(w_q, group),
    scales_t = its scales transposed, float32 [n_groups, rows]."""
    nb, group, rows = qb.shape
    P = x_q.shape[0]
    xb = block_activations(np.asarray(x_q), group)
    xs_t = np.asarray(x_scales, F32).T[:, :, None]  # [nb, P, 1]
    out = np.empty((P, rows), F32)
    chunks = row_chunks(rows, nb, P, chunk)
    scratch = np.empty((nb, P, chunks[0][1] - chunks[0][0] if chunks else 0), F32)
    for r0, r1 in chunks:
        t = scratch[:, :, : r1 - r0]
        block_sums(xb, qb[:, :, r0:r1], t)  # (float)isum, exact
        np.multiply(t, scales_t[:, None, r0:r1], out=t)  # * ws
        np.multiply(t, xs_t, out=t)  # * xs
        accumulate_blocks(t, out[:, r0:r1])
    if bias is not None:
        np.add(out, np.asarray(bias, F32), out=out)
    return out


matmat_q4x4 = matmat_q4  # the M7 layout computes the same numbers (quant/formats.py)


def dequant_row_q4(w_q: np.ndarray, w_scales: np.ndarray, group: int) -> np.ndarray:
    """Embedding lookup: x[i] = (float)q[i] * scale[group(i)]."""
    out = np.empty(w_q.shape[-1], F32)
    for gi, (a, b) in enumerate(group_bounds(w_q.shape[-1], group)):
        out[a:b] = w_q[a:b].astype(F32) * w_scales[gi]
    return out


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    ss = seq_sum(x * x)
    ss = ss / F32(x.shape[-1])
    ss = ss + F32(eps)
    r = F32(1.0) / np.sqrt(F32(ss))
    return (x * r) * weight.astype(F32)


def rope(x: np.ndarray, n_heads: int, head_dim: int, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    h = np.asarray(x, dtype=F32).reshape(n_heads, head_dim)
    half = head_dim // 2
    a, b = h[:, :half], h[:, half:]
    out = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)
    return out.reshape(-1).astype(F32)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise: m = max, e = expf(s - m), sum left to right, p = e / sum."""
    s = np.asarray(scores, dtype=F32)
    m = np.max(s, axis=-1, keepdims=True)
    e = expf(s - m)
    total = seq_sum(e, axis=-1)[..., None]
    return (e / total).astype(F32)


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = np.asarray(gate, dtype=F32)
    return (g / (F32(1.0) + expf(-g))) * up.astype(F32)


def attention_scale(head_dim: int) -> np.float32:
    """1/sqrt(head_dim), rounded once on the host and emitted as a constant."""
    return F32(1.0 / np.sqrt(head_dim))


# --- exp2 for softmax weights ----------------------------------------------
# 2^y for y <= 0, cheaper than expf: the attention weights it feeds are
# rounded to 15-bit integers anyway (attention_i8), so a relative error of
# 2.9e-6 is plenty.  y = n + r, n = round-to-nearest-even(y) by the 1.5*2^23
# trick (t = y + MAGIC; its low mantissa bits are n), r in [-0.5, 0.5],
# 2^r by a degree-4 polynomial with constant term exactly 1 (least-squares
# fit for minimax relative error, then rounded to float32), 2^n by adding
# n << 23 to the exponent field: bits(t) << 23 is exactly n << 23 (mod 2^32)
# because bits(MAGIC) << 23 vanishes.  Below -64 the input is clamped: W *
# 2^-64 rounds to 0 for any weight limit W.  exp2_nonpos(0) == 1 exactly and
# exp2_nonpos(y) <= 1 for y <= 0 (tests/unit/test_twin_properties.py).
EXP2_MAGIC = f32(12582912.0)  # 1.5 * 2^23
EXP2_FLOOR = f32(-64.0)
EXP2_POLY = tuple(f32(float.fromhex(c)) for c in (
    "0x1.3a0282p-7", "0x1.c9fc28p-5", "0x1.ec0378p-3", "0x1.62e12cp-1", "0x1p+0"))


def exp2_nonpos(y: np.ndarray) -> np.ndarray:
    """C twin: exp2_nonpos in firmware/tllm_math.h."""
    y = np.maximum(np.asarray(y, dtype=F32), EXP2_FLOOR)
    t = (y + EXP2_MAGIC).astype(F32)
    r = (y - (t - EXP2_MAGIC)).astype(F32)
    p = EXP2_POLY[0]
    for c in EXP2_POLY[1:]:
        p = p * r + c
    p = np.asarray(p, dtype=F32)
    bits = p.view(np.uint32) + (t.view(np.uint32) << np.uint32(23))
    return bits.astype(np.uint32).view(F32)


# --- attention over the int8 KV cache ----------------------------------------
ATTENTION_VS_MIN = f32(2.0 ** -100)  # below: the heads' values are all ~0, output 0


def attention_weight_limit(n_keys: int) -> int:
    """Largest integer softmax weight: 32767 (15 bits), or less when n_keys *
    W * 127 would overflow the int32 value sums (n_keys > 516)."""
    return min(32767, (2 ** 31 - 1) // (127 * n_keys))


def attention_i8(q: np.ndarray, k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray,
                 scale: np.float32) -> np.ndarray:
    """Attention of one query over an int8 KV cache (grouped-query aware).

    q [heads, hd] float32; k_q/v_q [T, kv_heads, hd] int8; k_s/v_s [T, kv_heads].
    C order per head h (kv head kh = h / (heads/kv_heads)):
      q8, qs = quantize(q[h]);  r[t] = (float)dot(q8, k8[t]) * ks[t];  m = max r
      e[t] = exp2_nonpos((r[t] - m) * ((qs * scale) * log2(e)));  total = sum e (t ascending)
      W = attention_weight_limit(T);  inv = W / max vs  (0 if max vs < 2^-100)
      w[t] = round((e[t] * vs[t]) * inv)      integers in [0, W]
      out[i] = (float)(sum_t w[t] * v8[t][i]) * (1 / (inv * total))   (exact int32 sum)
    The softmax with the value scales folded in becomes integer weights, so
    the value sum is exact integer arithmetic (SMLABB on the M7)."""
    nh, hd = q.shape
    T, nkv, _ = k_q.shape
    kv_of = np.arange(nh) // (nh // nkv)
    q8, qs = quantize_rows_i8(q)
    dots = np.einsum("hd,thd->ht", q8.astype(np.int64), k_q[:, kv_of].astype(np.int64))
    r = dots.astype(np.int32).astype(F32) * k_s[:, kv_of].T  # [heads, T]
    m = np.max(r, axis=1, keepdims=True)
    cl = ((qs * scale) * EXP_LOG2E).astype(F32)
    e = exp2_nonpos((r - m) * cl[:, None])
    total = seq_sum(e, axis=1)
    vs = v_s[:, kv_of].T.astype(F32)  # [heads, T]
    w, out_k = attention_weights(e, vs, np.max(vs, axis=1), total, T)
    acc = np.einsum("ht,thd->hd", w, v_q[:, kv_of].astype(np.int64))
    out = acc.astype(np.int32).astype(F32) * out_k[:, None]
    return out.astype(F32).reshape(-1)


def attention_weights(e: np.ndarray, vs: np.ndarray, vsmax: np.ndarray, total: np.ndarray,
                      n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer weights w = round((e * vs) * inv) and the output factor
    1 / (inv * total), inv = W / vsmax; e/vs [..., T], vsmax/total [...]."""
    W = F32(attention_weight_limit(n_keys))
    live = vsmax >= ATTENTION_VS_MIN
    inv = np.where(live, W / np.where(live, vsmax, F32(1.0)), F32(0.0)).astype(F32)
    w = round_half_away((e * vs) * inv[..., None])
    out_k = np.where(live, F32(1.0) / np.where(live, inv * total, F32(1.0)), F32(0.0)).astype(F32)
    return w, out_k


# --- int4 KV cache (quant/kv.py states the layout) ---------------------------
def quantize_rows_i4(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group of `group` along the last axis: amax = max|x|, scale = amax/7,
    q = round(x * (7/amax)) in [-7, 7]; an all-zero group has scale 0, q 0.

    Returns (q int8 [..., n] unpacked, scales float32 [..., n/group]).
    C twin: tllm_quantize_i4 (which also packs the nibbles)."""
    x = np.asarray(x, dtype=F32)
    n = x.shape[-1]
    xg = x.reshape(*x.shape[:-1], n // group, group)
    amax = np.max(np.abs(xg), axis=-1)
    ok = amax >= AMAX_MIN
    scales = np.where(ok, amax / F32(7.0), F32(0.0)).astype(F32)
    inv = np.where(ok, F32(7.0) / np.where(ok, amax, F32(1.0)), F32(0.0)).astype(F32)
    q = np.clip(round_half_away(xg * inv[..., None]), -7, 7).astype(np.int8)
    return q.reshape(x.shape), scales


KV4_K_CLIPS = tuple(F32(r) for r in (1.0, 0.95, 0.9, 0.85, 0.8))  # C: TLLM_KV4_K_CLIPS


def quantize_rows_i4_clip(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """The rotated int4 keys' quantizer (--kv-rotate hadamard): per group,
    quantize_rows_i4 with max|x| clipped to each ratio of KV4_K_CLIPS in
    turn (a = amax * r, scale = a/7,
    q = clamp(round(x * (7/a)), -7, 7)), keeping the ratio of least squared
    error sum_i ((float)q[i] * scale - x[i])^2, summed in float32 with i
    ascending (C's loop); the first on a tie, so ratio 1 (quantize_rows_i4's
    own scale) wins unless a clip is strictly better.
    C twin: tllm_quantize_i4_clip."""
    x = np.asarray(x, dtype=F32)
    n = x.shape[-1]
    xg = x.reshape(*x.shape[:-1], n // group, group)
    amax = np.max(np.abs(xg), axis=-1)
    best = None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing error is inf in C too
        for r in KV4_K_CLIPS:
            a = (amax * r).astype(F32)
            ok = a >= AMAX_MIN
            scale = np.where(ok, a / F32(7.0), F32(0.0)).astype(F32)
            inv = np.where(ok, F32(7.0) / np.where(ok, a, F32(1.0)), F32(0.0)).astype(F32)
            q = np.clip(round_half_away(xg * inv[..., None]), -7, 7).astype(np.int8)
            d = (q.astype(F32) * scale[..., None] - xg).astype(F32)
            err = seq_sum(d * d, axis=-1)
            if best is None:
                best = [q, scale, err]
                continue
            better = err < best[2]
            best = [np.where(better[..., None], q, best[0]), np.where(better, scale, best[1]),
                    np.where(better, err, best[2])]
    return best[0].reshape(x.shape), best[1].astype(F32)


def hadamard_heads(x: np.ndarray, n_heads: int, head_dim: int) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform of each head (the last axis
    holds n_heads * head_dim floats; head_dim a power of two).

    Stages at distances 1, 2, .. head_dim/2 turn each pair (a, b) into
    (a + b, a - b), one float32 add or subtract per element per stage: the C
    loop's order, so the bits are C's.  H is symmetric and H @ H = head_dim *
    I: the transform is its own inverse up to the factor head_dim (a KV
    shift can undo a rotation, dividing by head_dim, a power of two, and
    redo it), and (Hq).(Hk) = head_dim * q.k, so attention over rotated
    queries and keys divides its scale by head_dim (rotated_attention_scale).
    C twin: tllm_hadamard_heads (tllm_attention_kv4_hadamard uses it)."""
    x = np.asarray(x, dtype=F32)
    assert head_dim > 0 and head_dim & (head_dim - 1) == 0, "the Walsh-Hadamard transform needs a power of two"
    lead = x.shape[:-1]
    y = x.reshape(-1, n_heads, head_dim)
    length = 1
    while length < head_dim:
        b = y.reshape(y.shape[0], n_heads, head_dim // (2 * length), 2, length)
        a, c = b[..., 0, :], b[..., 1, :]
        y = np.stack([a + c, a - c], axis=-2).astype(F32).reshape(y.shape)
        length *= 2
    return y.reshape(*lead, n_heads * head_dim)


def rotated_attention_scale(scale: np.float32, head_dim: int) -> np.float32:
    """The scale over Hadamard-rotated q and k: scale / head_dim, exact (a
    power of two), as tllm_attention_kv4_hadamard computes it."""
    return F32(F32(scale) / F32(head_dim))


def attention_kv4(q: np.ndarray, k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray,
                  scale: np.float32, group: int) -> np.ndarray:
    """Attention of one query over an int4 KV cache (grouped-query aware).

    q [heads, hd] float32; k_q/v_q [T, kv_heads, hd] int4 values held in int8;
    k_s/v_s [T, kv_heads, hd/group].  C order per head h (kv head kh), as
    attention_i8 with a scale per group instead of per row:
      q8, qs = quantize_i8(q[h])
      r[t] = sum_g (float)dot_g(q8, k4[t]) * ks[t][g]      (g ascending, from the first term)
      e[t] = exp2_nonpos((r[t] - m) * ((qs * scale) * log2(e))), total = sum e
      per value group g: inv_g = W / max_t vs[t][g], w[t][g] = round((e[t] * vs[t][g]) * inv_g)
      out[i] = (float)(sum_t w[t][g(i)] * v4[t][i]) * (1 / (inv_g * total))   (exact int32 sum)"""
    nh, hd = q.shape
    T, nkv, _ = k_q.shape
    ng = hd // group
    kv_of = np.arange(nh) // (nh // nkv)
    q8, qs = quantize_rows_i8(q)
    kg = k_q[:, kv_of].astype(np.int64).reshape(T, nh, ng, group)
    dots = np.einsum("hgd,thgd->htg", q8.astype(np.int64).reshape(nh, ng, group), kg)
    terms = dots.astype(np.int32).astype(F32) * k_s[:, kv_of].transpose(1, 0, 2)  # [heads, T, ng]
    r = terms[:, :, 0]
    for g in range(1, ng):
        r = r + terms[:, :, g]
    return _attend_values_kv4(r, qs, scale, v_q, v_s, kv_of, group)


def _attend_values_kv4(r: np.ndarray, qs: np.ndarray, scale: np.float32, v_q: np.ndarray, v_s: np.ndarray,
                       kv_of: np.ndarray, group: int) -> np.ndarray:
    """attention_kv4 from the scores r [heads, T] on: the softmax as integer
    weights per value group over int4 values (v_q [T, kv_heads, hd], v_s
    [T, kv_heads, hd/group]); attention_k8v4 shares it."""
    nh, T = r.shape
    ng = v_q.shape[-1] // group
    m = np.max(r, axis=1, keepdims=True)
    cl = ((qs * scale) * EXP_LOG2E).astype(F32)
    e = exp2_nonpos((r - m) * cl[:, None])
    total = seq_sum(e, axis=1)
    vs = v_s[:, kv_of].transpose(1, 2, 0).astype(F32)  # [heads, ng, T]
    w, out_k = attention_weights(e[:, None, :], vs, np.max(vs, axis=2), total[:, None], T)  # [heads, ng, T], [heads, ng]
    vg = v_q[:, kv_of].astype(np.int64).reshape(T, nh, ng, group)
    acc = np.einsum("hgt,thgd->hgd", w, vg)
    out = acc.astype(np.int32).astype(F32) * out_k[:, :, None]
    return out.astype(F32).reshape(-1)


def attention_k8v4(q: np.ndarray, k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray,
                   scale: np.float32, group: int) -> np.ndarray:
    """Attention of one query over the 8:4 cache (--kv-bits 8:4): int8 keys
    as attention_i8 scores them (k_q [T, kv_heads, hd] int8, k_s [T, kv_heads]),
    int4 values as attention_kv4 weighs them (v_q [T, kv_heads, hd] int4 held
    in int8, v_s [T, kv_heads, hd/group]):
      r[t] = (float)dot(q8, k8[t]) * ks[t]
      then e, total, per value group inv_g, w[t][g] and out as attention_kv4.
    C twin: tllm_attention_k8v4."""
    nh, hd = q.shape
    nkv = k_q.shape[1]
    kv_of = np.arange(nh) // (nh // nkv)
    q8, qs = quantize_rows_i8(q)
    dots = np.einsum("hd,thd->ht", q8.astype(np.int64), k_q[:, kv_of].astype(np.int64))
    r = dots.astype(np.int32).astype(F32) * k_s[:, kv_of].T  # [heads, T]
    return _attend_values_kv4(r, qs, scale, v_q, v_s, kv_of, group)


# --- CMSIS-NN integer pipeline (quant/per_channel.py) -----------------------
def cmsis_requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """arm_nn_requantize, default (double rounding) variant:
    divide_by_power_of_two(doubling_high_mult_no_sat(acc << max(shift, 0), m), max(-shift, 0))."""
    acc = np.asarray(acc, np.int64)
    m = np.asarray(multiplier, np.int64)
    sh = np.asarray(shift, np.int64)
    left, right = np.maximum(sh, 0), np.maximum(-sh, 0)
    v = acc << left  # the compiler proves this fits int32 (per_channel._check_no_overflow)
    high = (v * m + (1 << 30)) >> 31  # round-half-up high word of 2*v*m
    mask = (np.int64(1) << right) - 1
    rem = high & mask
    res = high >> right
    threshold = (mask >> 1) + (res < 0)
    return res + (rem > threshold)


def inverse_scale(scale: np.float32) -> np.float32:
    """1/s in float32, computed once on the host and emitted as a constant."""
    return F32(1.0) / F32(scale)


def quantize_static_s8(x: np.ndarray, inv_scale: np.float32) -> np.ndarray:
    """q = round(clamp(x * (1/s), -127, 127)), the multiply in float32 (clamped
    first, as tllm_cmsis.c does, so no value overflows the conversion)."""
    t = np.clip(np.asarray(x, F32) * F32(inv_scale), F32(-127.0), F32(127.0))
    return round_half_away(t).astype(np.int8)


def cmsis_fc_s4(x_q: np.ndarray, w_q: np.ndarray, bias: np.ndarray, multipliers: np.ndarray,
                shifts: np.ndarray) -> np.ndarray:
    """int8 input x int4 weights (per row) -> int32 (+bias) -> requantized int8
    (output offset 0, activation range [-128, 127]), as arm_convolve_1x1_s4.
    The integer sums as a float64 BLAS product: exact, every partial sum is
    below 2^53 (|w| <= 8, |x| <= 128)."""
    acc = (np.asarray(w_q, np.float64) @ np.asarray(x_q, np.float64)).astype(np.int64) + bias.astype(np.int64)
    return np.clip(cmsis_requantize(acc, multipliers, shifts), -128, 127).astype(np.int8)


def dequantize_s8(q: np.ndarray, scale: np.float32) -> np.ndarray:
    return q.astype(F32) * F32(scale)


# --- llama.cpp block formats kept as they are (quant/formats.py GGUFMatrix) --
# Twins of firmware/tllm_kernels_gguf.c.  Per block b of 32 inputs, with the
# activation group's int8 xq and float32 scale sx (quantize_groups_i8, group 32):
#   isum = sum(q * xq) (int32, exact), xsum = sum(xq) (int32, exact)
#   Q8_0: t = (d * sx) * (float)isum
#   Q4_0: t = (d * sx) * (float)(isum - 8 * xsum)
#   Q4_1: t = (d * sx) * (float)isum + (m * sx) * (float)xsum
# and acc = acc + t over the blocks left to right, then + bias.  d and m
# are the fp16 fields converted exactly to float32.
def gguf_block_terms(qtype: str, d: np.ndarray, m: np.ndarray | None, isum: np.ndarray, xsum, sx) -> np.ndarray:
    """One block's float32 term; arrays broadcast (rows, or tokens x rows)."""
    sx = np.asarray(sx, F32)
    if qtype == "Q4_0":
        return (d * sx) * (isum - 8 * xsum).astype(F32)
    t = (d * sx) * isum.astype(F32)
    if qtype == "Q4_1":
        t = t + (m * sx) * np.asarray(xsum).astype(F32)
    return t


def matvec_gguf(qtype: str, d: np.ndarray, m: np.ndarray | None, q: np.ndarray, x_q: np.ndarray,
                x_scales: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y = W x for a GGUF matrix given as its fields (GGUFMatrix.fields())."""
    return matmat_gguf(GGUFOperand.of(qtype, d, m, q), np.asarray(x_q)[None], np.asarray(x_scales)[None], bias)[0]


@dataclass(frozen=True)
class GGUFOperand:
    """A GGUF matrix prepared for `matmat_gguf`: the fields transposed so a
    block's scales are one row vector, q as block_operand (float32
    [n_blocks, 32, rows]).  4 bytes per weight: build once per matrix."""

    qtype: str
    d: np.ndarray  # float32 [n_blocks, rows]
    m: np.ndarray | None  # float32 [n_blocks, rows] (Q4_1)
    q: np.ndarray  # float32 [n_blocks, 32, rows]

    @classmethod
    def of(cls, qtype: str, d: np.ndarray, m: np.ndarray | None, q: np.ndarray) -> "GGUFOperand":
        t = lambda a: np.ascontiguousarray(np.asarray(a, F32).T)  # noqa: E731
        return cls(qtype, t(d), None if m is None else t(m), block_operand(q, 32))


def matmat_gguf(op: GGUFOperand, x_q: np.ndarray, x_scales: np.ndarray, bias: np.ndarray | None = None,
                chunk: int | None = None) -> np.ndarray:
    """P activation vectors x_q [P, cols] (int8 groups of 32, x_scales [P, n_blocks])
    through one GGUF matrix -> float32 [P, rows]: each row matvec_gguf of its
    vector, i.e. gguf_block_terms per block, accumulated from 0.0f over the
    blocks left to right, then + bias.  `chunk`: rows per pass (default: a
    cache-sized scratch)."""
    nb, _, rows = op.q.shape
    x_q = np.asarray(x_q)
    P = x_q.shape[0]
    xb = block_activations(x_q, 32)
    sx = np.asarray(x_scales, F32).T[:, :, None]  # [nb, P, 1]
    if op.qtype != "Q8_0":
        xsum = x_q.astype(np.int32).reshape(P, nb, 32).sum(axis=2).T[:, :, None]  # [nb, P, 1], exact
        xsum8, xsum = (8 * xsum).astype(F32), xsum.astype(F32)  # exact integers
    out = np.empty((P, rows), F32)
    chunks = row_chunks(rows, nb, P, chunk)
    scratch = np.empty((3, nb, P, chunks[0][1] - chunks[0][0] if chunks else 0), F32)
    for r0, r1 in chunks:
        isum, t, mt = scratch[:, :, :, : r1 - r0]
        block_sums(xb, op.q[:, :, r0:r1], isum)  # (float)isum, exact
        np.multiply(op.d[:, None, r0:r1], sx, out=t)  # d * sx
        if op.qtype == "Q4_0":  # (float)(isum - 8 * xsum): both exact integers below 2^24, so is the difference
            np.subtract(isum, xsum8, out=isum)
        np.multiply(t, isum, out=t)
        if op.qtype == "Q4_1":  # + (m * sx) * (float)xsum
            np.multiply(op.m[:, None, r0:r1], sx, out=mt)
            np.multiply(mt, xsum, out=mt)
            np.add(t, mt, out=t)
        accumulate_blocks(t, out[:, r0:r1])
    if bias is not None:
        np.add(out, np.asarray(bias, F32), out=out)
    return out


def dequant_row_gguf(qtype: str, d: np.ndarray, m: np.ndarray | None, q: np.ndarray) -> np.ndarray:
    """Embedding lookup of one row (d, m [n_blocks], q [cols]): ggml's
    dequantize_row_* arithmetic, = gguf.quants.dequantize bit for bit."""
    dr = np.repeat(d.astype(F32), 32)
    if qtype == "Q4_0":
        return dr * (q.astype(np.int32) - 8).astype(F32)
    if qtype == "Q4_1":
        return dr * q.astype(F32) + np.repeat(m.astype(F32), 32)
    return dr * q.astype(F32)


# --- context shift (compile --context-policy roll, docs/rolling-context.md) --
def rope_back(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE by minus the angle whose cos/sin are given, on rows [..., hd]
    (rotate-half pairs (i, i + hd/2)): a' = a*c + b*s, b' = b*c - a*s, each
    product rounded to float32, then the sum or difference (C: tllm_kv_shift_*,
    built with -ffp-contract=off).  cos/sin: the RoPE tables' row `delta`, so
    the result is the key RoPE'd `delta` positions earlier, to float rounding."""
    x = np.asarray(x, dtype=F32)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = np.asarray(cos, F32), np.asarray(sin, F32)
    return np.concatenate([a * c + b * s, b * c - a * s], axis=-1).astype(F32)


def kv_shift_i8(k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray, to: int, delta: int,
                n_rows: int, cos: np.ndarray, sin: np.ndarray) -> None:
    """One layer's int8 cache, in place: rows to + delta .. to + delta + n_rows - 1
    move to rows to .. to + n_rows - 1 (k_q/v_q [T, kv_heads, hd], k_s/v_s
    [T, kv_heads]).  V moves as it is (values and scales).  Each key head:
      x[i] = (float)k8[i] * ks               (one float32 product)
      x = rope_back(x, cos, sin)             (cos/sin: the RoPE tables' row delta)
      k8, ks = quantize_rows_i8(x)           (tllm_quantize_i8, one group per head)
    C twin: tllm_kv_shift_i8 (rows ascending: a row is read before it is overwritten)."""
    src = slice(to + delta, to + delta + n_rows)
    dst = slice(to, to + n_rows)
    x = k_q[src].astype(F32) * k_s[src][..., None]
    k_q[dst], k_s[dst] = quantize_rows_i8(rope_back(x, cos, sin))
    v_q[dst], v_s[dst] = v_q[src].copy(), v_s[src].copy()


def kv_shift_kv4(k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray, to: int, delta: int,
                 n_rows: int, cos: np.ndarray, sin: np.ndarray, group: int, rotated: bool = False,
                 k_center: np.ndarray | None = None) -> None:
    """kv_shift_i8 over an int4 cache (k_q/v_q [T, kv_heads, hd] int4 values
    held in int8, k_s/v_s [T, kv_heads, hd/group]).  Each key head:
      x[i] = (float)k4[i] * ks[i / group]    (one float32 product)
      centred (the cache holds H k - c, quant/kv_center.py; c: k_center [kv_heads * hd]):
        x[i] = x[i] + c[i]
      rotated (the cache holds H k, --kv-rotate hadamard): x = hadamard_heads(x) then
        x[i] *= 1/hd (exact: hd a power of two), RoPE's frame again
      x = rope_back(x, cos, sin)
      rotated: x = hadamard_heads(x)
      centred: x[i] = x[i] - c[i]
      k4, ks = quantize_rows_i4_clip(x, group) if rotated, else quantize_rows_i4(x, group)
    The values move as they are: their centre is the same at every position.
    C twins: tllm_kv_shift_kv4, tllm_kv_shift_kv4_hadamard (the centre: tllm_kv4_layer.k_center)."""
    src = slice(to + delta, to + delta + n_rows)
    dst = slice(to, to + n_rows)
    hd = k_q.shape[-1]
    x = k_q[src].astype(F32) * np.repeat(k_s[src], group, axis=-1)
    c = None if k_center is None else np.asarray(k_center, F32).reshape(x.shape[1:])
    if c is not None:
        x = (x + c).astype(F32)
    if rotated:
        x = (hadamard_heads(x, 1, hd) * F32(1.0 / hd)).astype(F32)
    x = rope_back(x, cos, sin)
    if rotated:
        x = hadamard_heads(x, 1, hd)
    if c is not None:
        x = centered(x, c)
    k_q[dst], k_s[dst] = (quantize_rows_i4_clip if rotated else quantize_rows_i4)(x, group)
    v_q[dst], v_s[dst] = v_q[src].copy(), v_s[src].copy()


def centered(x: np.ndarray, center: np.ndarray) -> np.ndarray:
    """x - center, one float32 subtraction per element (center's shape is x's
    trailing axes, broadcast over the leading ones): what a centred cache stores (quant/kv_center.py).
    C: the loops of attention_kv4 and kv_shift_kv4 over tllm_kv4_layer's centres."""
    return (np.asarray(x, F32) - np.asarray(center, F32)).astype(F32)


def uncentered_output(out: np.ndarray, v_center: np.ndarray, n_heads: int, n_kv: int, hd: int) -> np.ndarray:
    """A centred cache's attention output [.., n_heads * hd] plus each head's
    kv head's value centre: sum_t p_t (v_t - c) + c, one float32 add per element."""
    kv_of = np.arange(n_heads) // (n_heads // n_kv)
    c = np.asarray(v_center, F32).reshape(n_kv, hd)[kv_of].reshape(-1)
    return (np.asarray(out, F32) + c).astype(F32)


def kv_shift_k8v4(k_q: np.ndarray, k_s: np.ndarray, v_q: np.ndarray, v_s: np.ndarray, to: int, delta: int,
                  n_rows: int, cos: np.ndarray, sin: np.ndarray) -> None:
    """The 8:4 cache's shift, in place: the int8 keys (k_q [T, kv_heads, hd],
    k_s [T, kv_heads]) exactly as kv_shift_i8 turns them; the int4 values
    (v_q [T, kv_heads, hd], v_s [T, kv_heads, hd/group]) moved as they are,
    which kv_shift_i8 does for values of any layout.  C twin: tllm_kv_shift_k8v4."""
    kv_shift_i8(k_q, k_s, v_q, v_s, to, delta, n_rows, cos, sin)
