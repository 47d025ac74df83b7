"""Input generators shared by the registry's entries.  Every case draws from
its own fixed seed (spec.Case.seed), so a failing case reproduces by label.

The edge cases the kernels' contracts name: short last groups (sizes that
are not a multiple of the group), all-zero groups (scale 0, q 0), extreme
magnitudes, exp's clamp and underflow edges, odd sizes, partial 4-row tiles."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import Q4Tensor
from tinyllm_gen.quant.rtn import quantize_q4_rtn

F32 = np.float32

# (rows, cols, group) of matrices: partial 4-row tiles, short last groups,
# odd column counts, one row, every group size.
MATRIX_SHAPES = [(8, 64, 32), (6, 40, 32), (13, 172, 64), (5, 171, 128), (4, 8, 32), (7, 256, 128), (1, 20, 32),
                 (9, 96, 64), (3, 5, 32), (21, 200, 64)]
# (n, group) of activation vectors
VECTOR_SHAPES = [(64, 32), (100, 32), (172, 64), (5, 128), (96, 128), (40, 32), (37, 32), (101, 64), (1, 32)]


def normal(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(F32)


def with_zero_groups(x: np.ndarray, group: int) -> np.ndarray:
    """A partly zero first group and, when there are two groups, an all-zero second one."""
    x = np.array(x, F32)
    x[..., : group // 2] = 0.0
    if x.shape[-1] > group:
        x[..., group: 2 * group] = 0.0
    return x


def extreme_vector(rng: np.random.Generator, n: int, decades: int = 30) -> np.ndarray:
    """Magnitudes from 1e-decades to 1e+decades in one vector (every group's scale differs wildly)."""
    return (normal(rng, n) * (F32(10.0) ** rng.integers(-decades, decades + 1, n).astype(F32))).astype(F32)


def activation(rng: np.random.Generator, n: int, group: int, zero_groups: bool = True, scale: float = 2.0):
    """(x, xq, xs): a float vector and its int8 group quantization."""
    x = normal(rng, n, scale)
    if zero_groups:
        x = with_zero_groups(x, group)
    xq, xs = exact.quantize_groups_i8(x, group)
    return x, xq, xs


def q4_matrix(rng: np.random.Generator, rows: int, cols: int, group: int, zero_group: bool = True) -> Q4Tensor:
    """Round-to-nearest int4 of random weights (each group's extreme hits +-7);
    row 0's first group all zero (scale 0) when asked."""
    w = normal(rng, (rows, cols)) * rng.uniform(0.05, 3.0, (rows, 1)).astype(F32)
    if zero_group:
        w[0, :group] = 0.0
    return quantize_q4_rtn("w", w.astype(F32), group)


def with_tied_rows(t: Q4Tensor, dst: int, src: int) -> Q4Tensor:
    """Row dst equal to row src: equal logits, so an argmax must keep the first."""
    q, s = t.q.copy(), t.scales.copy()
    q[dst], s[dst] = q[src], s[src]
    return Q4Tensor(t.name, q, s, t.group_size)


def tiny_group(n: int, group: int, amax: float) -> np.ndarray:
    """The first group's peak is amax, the rest of the vector is of size 1."""
    x = np.ones(n, F32)
    x[:group] = F32(amax) * np.linspace(-1, 1, group, dtype=F32)
    return x


def tie_bias(rng: np.random.Generator, rows: int, a: int, b: int) -> np.ndarray:
    """A bias that makes rows a and b (equal rows, with_tied_rows) the two
    largest outputs, exactly equal: the argmax must return the first."""
    bias = normal(rng, rows)
    bias[[a, b]] = F32(1e4)
    return bias


def exp_edges() -> np.ndarray:
    """exp's clamp (88), underflow (-86), the polynomial's reduction edges (+-ln2/2), signed zeros."""
    return F32([0.0, -0.0, -86.0, -86.00001, -85.99999, 88.0, 88.5, 1e-30, -1e-30, 0.34657359, -0.34657359,
                -87.3, 87.9, 1000.0, -1000.0])


def fp16_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite fp16 bit patterns: normals of moderate size, subnormals, zeros, the extremes."""
    mags = rng.uniform(-12, 4, n).astype(np.float32)
    v = (np.sign(rng.standard_normal(n)) * np.exp2(mags)).astype(np.float16).view(np.uint16)
    special = np.uint16([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF])  # +-0, subnormal extremes, +-65504
    v[: min(n, 6)] = special[: min(n, 6)]
    return v
