"""Weight and KV-cache storage formats: the one place that states them.

Q4 weights (`Q4Tensor`), used for every matrix including the embedding:
* symmetric int4 in [-7, 7], one float32 scale per group of `group_size`
  consecutive inputs along each row (the last group of a row may be short
  when cols % group_size != 0);
* value = q * scale[row, group];
* packing ("q4_rowmajor_lo_first"): rows are stored one after another,
  ceil(cols/2) bytes each; byte j of a row holds element 2j in its low
  nibble and element 2j+1 in its high nibble, two's complement.  An odd
  row ends with a high nibble of 0;
* scales: float32 little-endian, [rows][n_groups] row-major, stored after
  the packed nibbles of the tensor.

GGUF blocks (`GGUFMatrix`, --weight-quant gguf): a GGUF file's Q4_0 / Q4_1 /
Q8_0 matrices kept byte for byte in llama.cpp's own layout; stated near the
end of this file, and after it the same blocks in 4-row tiles for the
Cortex-M7 kernels ("q40x4" / "q41x4" / "q80x4": the file's integers and fp16
scales, moved, and the float order every GGUF kernel keeps).

KV cache: int8 per (position, kv-head) with one float32 scale each, same
rounding as the activations (exact.quantize_rows_i8); int4 KV (group-wise
scales, low nibble first) is stated in quant/kv.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..ir import Graph
from ..abi import GROUP_SIZES, Q4X4_BLOCK, Q4X4_TILE  # noqa: F401 (GROUP_SIZES: stated with the C side, abi.py)
from .kv import KV8, KVBits, parse_kv_bits

Q4_MIN, Q4_MAX = -7, 7
KERNEL_SETS = ("portable", "cortex-m7")


def n_groups(cols: int, group_size: int) -> int:
    return -(-cols // group_size)


def q4_row_bytes(cols: int) -> int:
    return (cols + 1) // 2


@dataclass(frozen=True, eq=False)
class Q4Tensor:
    name: str
    q: np.ndarray  # int8 [rows, cols], values in [-7, 7]
    scales: np.ndarray  # float32 [rows, n_groups]
    group_size: int

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def cols(self) -> int:
        return self.q.shape[1]

    def packed(self) -> bytes:
        return pack_q4(self.q)

    def dequantized(self) -> np.ndarray:
        rep = np.repeat(self.scales, self.group_size, axis=1)[:, : self.cols]
        return self.q.astype(np.float32) * rep


def pack_q4(q: np.ndarray) -> bytes:
    rows, cols = q.shape
    if cols % 2:
        q = np.concatenate([q, np.zeros((rows, 1), q.dtype)], axis=1)
    nib = (q.astype(np.int16) & 0xF).astype(np.uint8)
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8).tobytes()


def unpack_q4(data: bytes, rows: int, cols: int) -> np.ndarray:
    b = np.frombuffer(data, np.uint8).reshape(rows, q4_row_bytes(cols))
    lo = (b & 0xF).astype(np.int8)
    hi = (b >> 4).astype(np.int8)
    both = np.stack([lo, hi], axis=2).reshape(rows, -1)[:, :cols]
    return np.where(both > 7, both - 16, both).astype(np.int8)


@dataclass(frozen=True, eq=False)
class QuantizedGraph:
    """A Graph whose matrices are Q4 tensors (or kept GGUF blocks, `gguf`);
    vectors (norms, biases) stay float32."""

    graph: Graph
    q4: Mapping[str, Q4Tensor]
    vectors: Mapping[str, np.ndarray]
    group_size: int
    kv_bits: KVBits = KV8  # quant/kv.py (an int or "8:4" given here is parsed)
    method: str = "rtn"
    # the int4 KV cache's rotation, resolved (quant/kv.kv_rotation): "hadamard" | "off"
    kv_rotate: str = "off"
    # the rotated int4 cache's centres (quant/kv_center.KVCenters), None: uncentred
    kv_centers: object = None
    # Kernel set the firmware uses ("portable" | "cortex-m7"); it decides
    # the weight layout in the blob (q4 / q4x4) and the activation scratch.
    kernels: str = "portable"
    # method "per-channel": value name of each linear's output -> its static
    # int8 parameters (quant/per_channel.StaticLinear)
    static: Mapping[str, object] = field(default_factory=dict)
    # --weight-quant gguf: matrices kept in their llama.cpp block format
    # (GGUFMatrix below), by weight name; these are not in q4
    gguf: Mapping[str, "GGUFMatrix"] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "kv_bits", parse_kv_bits(self.kv_bits))

    @property
    def config(self):
        return self.graph.config


# --- "q4x4": the Cortex-M7 layout (firmware/tllm_kernels_m7.c) ---------------
# Same values and scales as Q4Tensor; only the byte order changes, so the
# reference needs no change and both layouts give bit-identical results.
#
# Weights are stored offset-binary (u = q + 8 in [1, 15]) so that one
# AND with 0x000F000F isolates two nibbles as two int16 lanes ready for
# SMLAD; the kernel subtracts 8 * sum(x) per group to undo the offset.
# Rows are taken four at a time ("tile"; missing rows of the last tile are
# padded with u = 8 and scale 0). Per tile, per group:
#   for each block of 8 inputs k..k+7 (the group padded to a multiple of 8
#   with u = 8): one uint32 per row of the tile (4 words), where nibble j
#   (bits 4j..4j+3) holds u[k+2j] and nibble 4+j (bits 16+4j..) u[k+2j+1];
#   then the tile's 4 float32 scales of that group.
# Activations ("x16" stream), per group: the int8 values widened to int16,
# padded to a multiple of 8 with zeros, then int32 8*sum(q) and the float32
# scale. Interleaving scales with data keeps the kernel at two pointers.


def q4x4_group_blocks(cols: int, group_size: int) -> list[int]:
    return [-(-min(group_size, cols - g0) // Q4X4_BLOCK) for g0 in range(0, cols, group_size)]


def pack_q4x4(t: Q4Tensor) -> bytes:
    rows, cols, G = t.rows, t.cols, t.group_size
    tiles = -(-rows // Q4X4_TILE)
    blocks = q4x4_group_blocks(cols, G)
    padded_cols = [g * G + b * Q4X4_BLOCK for g, b in enumerate(blocks)]
    u = np.full((tiles * Q4X4_TILE, max(padded_cols[-1], cols)), 8, np.uint32)
    u[:rows, :cols] = t.q.astype(np.int32) + 8
    scales = np.zeros((tiles * Q4X4_TILE, len(blocks)), np.float32)
    scales[:rows] = t.scales
    shifts = np.array([0, 16, 4, 20, 8, 24, 12, 28], np.uint32)  # input k+i -> bit position
    out = bytearray()
    for tile in range(tiles):
        r = slice(tile * Q4X4_TILE, (tile + 1) * Q4X4_TILE)
        for g, nb in enumerate(blocks):
            for b in range(nb):
                k = g * G + b * Q4X4_BLOCK
                words = (u[r, k:k + Q4X4_BLOCK] << shifts).sum(axis=1, dtype=np.uint64).astype("<u4")
                out += words.tobytes()
            out += scales[r, g].astype("<f4").tobytes()
    return bytes(out)


def q4x4_bytes_of(rows: int, cols: int, group_size: int) -> int:
    """Size of pack_q4x4's output (the C side computes the same from the
    matrix descriptor: tile_bytes_of in tllm_kernels_m7.c)."""
    tiles = -(-rows // Q4X4_TILE)
    return tiles * sum(nb * Q4X4_TILE * 4 + Q4X4_TILE * 4 for nb in q4x4_group_blocks(cols, group_size))


def unpack_q4x4(data: bytes, rows: int, cols: int, group_size: int, name: str = "") -> Q4Tensor:
    """The inverse of pack_q4x4: the Q4Tensor whose q4x4 stream `data` is
    (tests/unit/test_formats.py checks unpack(pack(t)) == t for any shape)."""
    if len(data) != q4x4_bytes_of(rows, cols, group_size):
        raise ValueError(f"q4x4 stream of {len(data)} B for a {rows}x{cols} g{group_size} matrix "
                         f"(expected {q4x4_bytes_of(rows, cols, group_size)} B)")
    tiles = -(-rows // Q4X4_TILE)
    blocks = q4x4_group_blocks(cols, group_size)
    width = max(g * group_size + nb * Q4X4_BLOCK for g, nb in enumerate(blocks))
    u = np.zeros((tiles * Q4X4_TILE, max(width, cols)), np.int32)
    scales = np.zeros((tiles * Q4X4_TILE, len(blocks)), np.float32)
    shifts = np.array([0, 16, 4, 20, 8, 24, 12, 28], np.uint32)
    at = 0
    for tile in range(tiles):
        r = slice(tile * Q4X4_TILE, (tile + 1) * Q4X4_TILE)
        for g, nb in enumerate(blocks):
            for b in range(nb):
                k = g * group_size + b * Q4X4_BLOCK
                words = np.frombuffer(data, "<u4", Q4X4_TILE, at).astype(np.uint32)
                at += 4 * Q4X4_TILE
                u[r, k:k + Q4X4_BLOCK] = (words[:, None] >> shifts[None, :]) & 0xF
            scales[r, g] = np.frombuffer(data, "<f4", Q4X4_TILE, at)
            at += 4 * Q4X4_TILE
    return Q4Tensor(name, (u[:rows, :cols] - 8).astype(np.int8), scales[:rows].copy(), group_size)


def x16_stream_bytes(n: int, group_size: int) -> int:
    return sum(nb * Q4X4_BLOCK * 2 + 8 for nb in q4x4_group_blocks(n, group_size))


# "x16b": P x16 streams interleaved for the batched prefill kernel
# (tllm_matmat_q4x4; built by tllm_x16_batch from P x16 streams, or written
# token by token by tllm_rmsnorm_x16b / tllm_silu_mul_pairs_x16b /
# tllm_quantize_x16b).  For P = 1 it is the x16
# stream itself.  For P >= 2, per group: P int32 -8*sum(q_p) (negated: they
# start the accumulators), then per block of 8 inputs and per lane pair
# j = 0..3 the P words (x_p[k+2j], x_p[k+2j+1]) for p = 0..P-1 (one LDM
# loads them), then P float32 scales.  As long as P x16 streams.


def x16_batch_bytes(n: int, group_size: int, batch: int) -> int:
    return batch * x16_stream_bytes(n, group_size)


# --- llama.cpp's own block formats, kept as they are ("gguf" weights) --------
# A GGUF input's Q4_0 / Q4_1 / Q8_0 matrices go into the blob byte for byte:
# the firmware holds exactly the file's q, d and m, no re-rounding.  Facts
# from ggml-common.h (block structs) and ggml-quants.c (dequantize_row_*):
#
#   Q4_0  18 B / 32 weights: fp16 d, 16 B nibbles;        w = d * (q - 8), q in 0..15
#   Q4_1  20 B / 32 weights: fp16 d, fp16 m, 16 B nibbles; w = d * q + m,  q in 0..15
#   Q8_0  34 B / 32 weights: fp16 d, 32 int8 q;            w = d * q
#
# Nibble order (Q4_0/Q4_1): byte j of a block holds element j in its LOW
# nibble and element j + 16 in its HIGH nibble.  All little-endian.  Rows are
# stored one after another, cols / 32 blocks each, in Hugging Face row order
# (the frontend has undone llama.cpp's Q/K row permutation on whole rows).
# The C side (firmware/tllm_kernels_gguf.h) declares the same block structs
# with _Static_assert on their sizes; GGUF_BLOCK_BYTES is checked against
# them by the generated code (templates: TLLM_GGUF_*_BLOCK_BYTES).
GGUF_BLOCK = 32
GGUF_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}
GGUF_KEPT = tuple(GGUF_BLOCK_BYTES)
WEIGHT_QUANTS = ("gguf", "rtn", "clip", "awq", "gptq")  # --weight-quant; "gguf" keeps llama.cpp blocks


@dataclass(frozen=True, eq=False)
class GGUFMatrix:
    """One matrix in a llama.cpp block format, raw blocks [rows, row_bytes]."""

    name: str
    qtype: str  # "Q4_0" | "Q4_1" | "Q8_0"
    data: np.ndarray  # uint8 [rows, cols / 32 * block_bytes]
    cols: int

    def __post_init__(self):
        check_gguf_shape(self.qtype, self.data.shape, self.cols)

    @property
    def rows(self) -> int:
        return self.data.shape[0]

    @property
    def n_blocks(self) -> int:
        return self.cols // GGUF_BLOCK

    @property
    def group_size(self) -> int:
        return GGUF_BLOCK

    def packed(self) -> bytes:
        return pack_gguf(self)

    def fields(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(d float32 [rows, nb], m float32 [rows, nb] or None, q int8 [rows, cols]):
        q as stored (0..15 for Q4_0/Q4_1, -128..127 for Q8_0)."""
        return gguf_fields(self.qtype, self.data, self.cols)

    def dequantized(self) -> np.ndarray:
        return dequantize_gguf(self.qtype, self.data, self.cols)


def check_gguf_shape(qtype: str, shape: tuple[int, ...], cols: int) -> None:
    if qtype not in GGUF_BLOCK_BYTES:
        raise ValueError(f"{qtype} is not a kept GGUF format ({', '.join(GGUF_KEPT)})")
    if cols % GGUF_BLOCK or len(shape) != 2 or shape[1] != cols // GGUF_BLOCK * GGUF_BLOCK_BYTES[qtype]:
        raise ValueError(f"{qtype} rows of {cols} columns are {cols // GGUF_BLOCK} blocks of "
                         f"{GGUF_BLOCK_BYTES[qtype]} B, not {shape}")


def gguf_row_bytes(qtype: str, cols: int) -> int:
    return cols // GGUF_BLOCK * GGUF_BLOCK_BYTES[qtype]


def pack_gguf(t: GGUFMatrix) -> bytes:
    """The blob bytes of a GGUF matrix: its blocks exactly as in the file."""
    data = np.ascontiguousarray(t.data, np.uint8).tobytes()
    assert len(data) == t.rows * gguf_row_bytes(t.qtype, t.cols)
    return data


def unpack_gguf(name: str, qtype: str, data: bytes, rows: int, cols: int) -> GGUFMatrix:
    """pack_gguf's inverse (size checked)."""
    if len(data) != rows * gguf_row_bytes(qtype, cols):
        raise ValueError(f"{name}: {len(data)} B is not {rows} rows of {qtype} x {cols}")
    return GGUFMatrix(name, qtype, np.frombuffer(data, np.uint8).reshape(rows, -1).copy(), cols)


def gguf_fields(qtype: str, data: np.ndarray, cols: int):
    rows, nb = data.shape[0], cols // GGUF_BLOCK
    b = np.ascontiguousarray(data, np.uint8).reshape(rows, nb, GGUF_BLOCK_BYTES[qtype])
    d = b[:, :, 0:2].copy().view("<f2").reshape(rows, nb).astype(np.float32)
    m = None
    if qtype == "Q8_0":
        q = b[:, :, 2:].copy().view(np.int8).reshape(rows, cols)
        return d, m, q
    if qtype == "Q4_1":
        m = b[:, :, 2:4].copy().view("<f2").reshape(rows, nb).astype(np.float32)
    nib = b[:, :, -16:]
    q = np.concatenate([nib & 0xF, nib >> 4], axis=2).astype(np.int8).reshape(rows, cols)  # j low, j+16 high
    return d, m, q


def dequantize_gguf(qtype: str, data: np.ndarray, cols: int) -> np.ndarray:
    """float32 weights, the same float operations as ggml's dequantize_row_*
    and the firmware's tllm_embed_* (one rounding per multiply or add)."""
    d, m, q = gguf_fields(qtype, data, cols)
    dr = np.repeat(d, GGUF_BLOCK, axis=1)
    if qtype == "Q4_0":
        return dr * (q.astype(np.int32) - 8).astype(np.float32)
    if qtype == "Q4_1":
        return dr * q.astype(np.float32) + np.repeat(m, GGUF_BLOCK, axis=1)
    return dr * q.astype(np.float32)



# --- "q40x4" / "q41x4" / "q80x4": llama.cpp's blocks in 4-row tiles ---------
# The Cortex-M7 layout of a kept GGUF matrix (firmware/tllm_kernels_gguf_m7.h):
# the file's integers q, its fp16 d (and Q4_1's fp16 m) bit for bit, only
# moved, so that one activation load serves the 4 rows of a tile (as q4x4).
#
# Rows are taken four at a time (tile t = rows 4t .. 4t+3).  A last tile with
# fewer rows is padded with rows whose bytes are all 0 (q = 0, d = m = +0.0):
# the kernels compute them and never store them.  A tile is cols / 32
# tile-blocks, one per block b of 32 inputs, each holding the 4 rows' blocks
# b (4 x the file's block, so a matrix of whole tiles has the file's size):
#
#   Q4_0 (72 B) / Q4_1 (80 B): for each quarter k = 0..3 of the block (inputs
#     8k .. 8k+7), one little-endian uint32 per row s = 0..3, at byte 16k + 4s,
#     whose nibble j (bits 4j .. 4j+3) holds q[8k + 2j] and nibble 4 + j (bits
#     16 + 4j ..) q[8k + 2j + 1], j = 0..3 (q4x4's order: `w >> 4j & 0x000F000F`
#     is the lane pair (q[8k+2j], q[8k+2j+1]) for one SMLAD with the x16 word
#     (x[8k+2j], x[8k+2j+1])).  Then at byte 64 the scales: Q4_0 the 4 rows'
#     fp16 d (row s at 64 + 2s); Q4_1 per row s the pair (fp16 d, fp16 m) at
#     64 + 4s.
#   Q8_0 (136 B): for each quarter k, per row s, 8 bytes at 32k + 8s: the
#     int8 q[8k + i] for i = 0, 2, 1, 3, 4, 6, 5, 7 (so SXTB16 of the first
#     word gives the lanes (q[8k], q[8k+1]), of its ROR #8 (q[8k+2], q[8k+3]),
#     and so on).  Then at byte 128 the 4 rows' fp16 d (row s at 128 + 2s).
#
# Every tile-block is a multiple of 4 bytes and the kernels load words and
# doublewords, so a tile stream starts 4-byte aligned.  A row range of whole
# tiles is one contiguous byte range (a stream chunk, a classifier chunk).
#
# Activations: the x16 stream of group 32 (per block: 32 int16 x, int32
# 8 * sum(x), float32 scale sx; tllm_quantize_x16 and its fused producers
# write it with exactly tllm_quantize_i8's integers and scales), and for P >= 2
# tokens its x16b form.  The float part, the kept build's (exact.matvec_gguf,
# tllm_kernels_gguf.c), per row r and token: for the blocks b = 0 .. cols/32 - 1
# in order, with isum = sum(q * x) and xsum = sum(x) exact int32 and d, m the
# fp16 fields converted exactly to float32,
#   Q4_0: t = (d * sx) * (float)(isum - 8 * xsum)
#   Q4_1: t = (d * sx) * (float)isum;  t = t + (m * sx) * (float)xsum
#   Q8_0: t = (d * sx) * (float)isum
#   acc = acc + t   (acc starts at +0.0);   out[r] = acc, then out[r] + bias[r].
# xsum comes once per vector and block from the stream (8 * sum: exact in
# float32, 1/8 of it exactly xsum) and serves every row; the integer sums
# may be formed in any order (they are exact), the float operations may not.
GGUF_TILE = 4
GGUF_TILED = {"Q4_0": "q40x4", "Q4_1": "q41x4", "Q8_0": "q80x4"}  # layout name (and C suffix) per kept format
GGUF_TILE_BLOCK_BYTES = {q: GGUF_TILE * b for q, b in GGUF_BLOCK_BYTES.items()}  # 72, 80, 136 (C: _Static_assert)
_Q8_LANE_ORDER = np.array([0, 2, 1, 3, 4, 6, 5, 7])  # byte i of a row's 8 bytes holds q[8k + _Q8_LANE_ORDER[i]]
_Q4_SHIFTS = (4 * np.arange(4)[:, None] + 16 * np.arange(2)[None, :]).astype(np.uint32)  # [j, e]: q[8k+2j+e]'s bit


def gguf_tiles(rows: int) -> int:
    return -(-rows // GGUF_TILE)


def gguf_tile_bytes(qtype: str, cols: int) -> int:
    """Bytes of one 4-row tile (C: tllm_<layout>_tile_bytes)."""
    return cols // GGUF_BLOCK * GGUF_TILE_BLOCK_BYTES[qtype]


def gguf_tiled_bytes_of(qtype: str, rows: int, cols: int) -> int:
    """Size of pack_gguf_tiled's output: whole tiles, the last one padded."""
    return gguf_tiles(rows) * gguf_tile_bytes(qtype, cols)


def pack_gguf_tiled(t: GGUFMatrix) -> bytes:
    """The tiled layout above of a GGUF matrix (unpack_gguf_tiled is its inverse)."""
    qtype, rows, nb = t.qtype, t.rows, t.n_blocks
    rows4 = gguf_tiles(rows) * GGUF_TILE
    raw = np.zeros((rows4, nb, GGUF_BLOCK_BYTES[qtype]), np.uint8)
    raw[:rows] = np.ascontiguousarray(t.data, np.uint8).reshape(rows, nb, -1)
    tiles = rows4 // GGUF_TILE
    scale_bytes = 4 if qtype == "Q4_1" else 2  # per row: fp16 d (and m), as in the file's block header
    scales = raw[:, :, :scale_bytes].reshape(tiles, GGUF_TILE, nb, scale_bytes).transpose(0, 2, 1, 3)
    if qtype == "Q8_0":
        q = raw[:, :, 2:].reshape(tiles, GGUF_TILE, nb, 4, 8)[..., _Q8_LANE_ORDER]  # [t, s, b, k, i]
        body = q.transpose(0, 2, 3, 1, 4).reshape(tiles, nb, 128)
    else:
        nib = raw[:, :, -16:]
        q = np.concatenate([nib & 0xF, nib >> 4], axis=2).astype(np.uint32)  # [row, b, 32]: j low, j + 16 high
        q = q.reshape(tiles, GGUF_TILE, nb, 4, 4, 2)  # [t, s, b, k, j, e]: input 8k + 2j + e
        words = (q << _Q4_SHIFTS).sum(axis=(4, 5), dtype=np.uint64).astype("<u4")  # [t, s, b, k]
        body = words.transpose(0, 2, 3, 1).copy().view(np.uint8).reshape(tiles, nb, 64)
    out = np.concatenate([body, scales.reshape(tiles, nb, -1)], axis=2)
    assert out.shape[2] == GGUF_TILE_BLOCK_BYTES[qtype]
    return out.tobytes()


def unpack_gguf_tiled(name: str, qtype: str, data: bytes, rows: int, cols: int) -> GGUFMatrix:
    """pack_gguf_tiled's inverse: the file's blocks back (size checked, the
    padding rows checked to be zero)."""
    if qtype not in GGUF_TILED or cols % GGUF_BLOCK or cols <= 0 or rows <= 0:
        raise ValueError(f"{name}: a tiled {qtype} matrix of {rows}x{cols} does not exist "
                         f"(formats {', '.join(GGUF_TILED)}, columns a positive multiple of {GGUF_BLOCK})")
    want = gguf_tiled_bytes_of(qtype, rows, cols)
    if len(data) != want:
        raise ValueError(f"{name}: {len(data)} B is not the {want} B of a tiled {qtype} {rows}x{cols} matrix")
    nb, tiles = cols // GGUF_BLOCK, gguf_tiles(rows)
    tb = np.frombuffer(data, np.uint8).reshape(tiles, nb, GGUF_TILE_BLOCK_BYTES[qtype])
    scale_bytes = 4 if qtype == "Q4_1" else 2
    body_bytes = GGUF_TILE_BLOCK_BYTES[qtype] - GGUF_TILE * scale_bytes
    scales = tb[:, :, body_bytes:].reshape(tiles, nb, GGUF_TILE, scale_bytes).transpose(0, 2, 1, 3)
    if qtype == "Q8_0":
        q = np.empty((tiles, GGUF_TILE, nb, 4, 8), np.uint8)
        q[..., _Q8_LANE_ORDER] = tb[:, :, :body_bytes].reshape(tiles, nb, 4, GGUF_TILE, 8).transpose(0, 3, 1, 2, 4)
        body = q.reshape(tiles * GGUF_TILE, nb, 32)
    else:
        words = tb[:, :, :body_bytes].copy().view("<u4").reshape(tiles, nb, 4, GGUF_TILE).astype(np.uint32)
        q = (words.transpose(0, 3, 1, 2)[..., None, None] >> _Q4_SHIFTS) & 0xF  # [t, s, b, k, j, e]
        q = q.reshape(tiles * GGUF_TILE, nb, 32).astype(np.uint8)
        body = (q[:, :, :16] | (q[:, :, 16:] << 4)).astype(np.uint8)  # byte j: element j low, j + 16 high
    raw = np.concatenate([scales.reshape(tiles * GGUF_TILE, nb, scale_bytes), body], axis=2)
    if raw[rows:].any():
        raise ValueError(f"{name}: the padding rows of the last tile ({rows} rows) are not zero")
    return GGUFMatrix(name, qtype, raw[:rows].reshape(rows, -1).copy(), cols)


def dequantize_gguf_tiled(qtype: str, data: bytes, rows: int, cols: int) -> np.ndarray:
    """float32 weights of a tiled matrix: dequantize_gguf of the blocks it holds."""
    return unpack_gguf_tiled("w", qtype, data, rows, cols).dequantized()
