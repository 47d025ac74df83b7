"""Round-to-nearest INT4 quantization: Graph -> QuantizedGraph."""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..ir import Graph
from .formats import GROUP_SIZES, Q4_MAX, Q4Tensor, QuantizedGraph, n_groups
from .kv import KV8, KVBits, parse_kv_bits


def quantize_q4_rtn(name: str, w: np.ndarray, group_size: int) -> Q4Tensor:
    """Per group: scale = max|w| / 7, q = round(w / scale) (half away from 0).

    Done in float64 on the host; only the stored q and float32 scale matter
    to the firmware, and the reference reads exactly those."""
    rows, cols = w.shape
    ng = n_groups(cols, group_size)
    pad = ng * group_size - cols
    wp = np.pad(w.astype(np.float64), ((0, 0), (0, pad))).reshape(rows, ng, group_size)
    amax = np.abs(wp).max(axis=2)
    scales = (amax / Q4_MAX).astype(np.float32)
    s = scales.astype(np.float64)[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s > 0, np.sign(wp) * np.floor(np.abs(wp) / np.where(s > 0, s, 1) + 0.5), 0)
    q = np.clip(q, -Q4_MAX, Q4_MAX).astype(np.int8).reshape(rows, ng * group_size)[:, :cols]
    return Q4Tensor(name=name, q=np.ascontiguousarray(q), scales=scales, group_size=group_size)


def quantize_graph(graph: Graph, group_size: int = 32, kv_bits: KVBits = KV8,
                   kernels: str = "portable") -> QuantizedGraph:
    if group_size not in GROUP_SIZES:
        raise UserError(f"--group-size {group_size} is not supported: choose one of {', '.join(map(str, GROUP_SIZES))}")
    kv_bits = parse_kv_bits(kv_bits)
    q4, vectors = {}, {}
    for name in graph.weight_names():
        w = graph.weights[name]
        if w.ndim == 2:
            q4[name] = quantize_q4_rtn(name, w, group_size)
        else:
            vectors[name] = np.ascontiguousarray(w, dtype=np.float32)
    return QuantizedGraph(graph=graph, q4=q4, vectors=vectors, group_size=group_size, kv_bits=kv_bits,
                          kernels=kernels)
