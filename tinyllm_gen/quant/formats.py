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

KV cache: int8 per (position, kv-head) with one float32 scale each, same
rounding as the activations (exact.quantize_rows_i8).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..ir import Graph

Q4_MIN, Q4_MAX = -7, 7
Q4_PACKING = "q4_rowmajor_lo_first"
GROUP_SIZES = (32, 64, 128)
KV_BITS = (8,)


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
    """A Graph whose matrices are Q4 tensors; vectors (norms, biases) stay float32."""

    graph: Graph
    q4: Mapping[str, Q4Tensor]
    vectors: Mapping[str, np.ndarray]
    group_size: int
    kv_bits: int = 8
    method: str = "rtn"

    @property
    def config(self):
        return self.graph.config
