"""--weight-quant gguf: keep a GGUF file's own 4- and 8-bit blocks.

Graph (+ the GGUFModel's raw blocks) -> QuantizedGraph whose Q4_0 / Q4_1 /
Q8_0 matrices are `GGUFMatrix`es holding the file's bytes (q, d, m exactly
as llama.cpp wrote them; layouts in formats.py).  Everything else falls back:
1-D tensors (F32/F16 norms, biases) stay float32 vectors; matrices stored as
F32/F16/BF16 or as K-quants are re-rounded with RTN Q4 (group 32).

The kernel set decides the layouts: on the Cortex-M7 ("cortex-m7") the
kept blocks move into 4-row tiles (q40x4 / q41x4 / q80x4, the M7 assembly
of firmware/tllm_kernels_gguf_m7.c) and the fallback matrices are q4x4,
all reading the x16 activation stream; with the portable kernels the
blocks stay in the file's row order (firmware/tllm_kernels_gguf.c) and the
fallbacks are packed Q4.  The arithmetic, and so the reference, is the
same for both."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import UserError
from ..ir import Graph
from .formats import GGUF_BLOCK, GGUF_KEPT, GGUFMatrix, QuantizedGraph
from .kv import KV8, KVBits, parse_kv_bits
from .rtn import quantize_q4_rtn


def kept_formats(blocks: Mapping[str, object]) -> dict[str, str]:
    """weight name -> qtype, for the matrices whose blocks are kept."""
    return {n: b.qtype for n, b in blocks.items() if b.qtype in GGUF_KEPT and len(b.shape) == 2
            and b.shape[1] % GGUF_BLOCK == 0}


def quantize_gguf(graph: Graph, blocks: Mapping[str, object], group_size: int = 32,
                  kv_bits: KVBits = KV8, kernels: str = "portable") -> QuantizedGraph:
    if group_size != GGUF_BLOCK:
        raise UserError(f"--weight-quant gguf keeps llama.cpp's {GGUF_BLOCK}-weight blocks: "
                        f"use --group-size {GGUF_BLOCK} (the activations are quantized per block)")
    kv_bits = parse_kv_bits(kv_bits)
    kept = kept_formats(blocks)
    q4, vectors, gg = {}, {}, {}
    for name in graph.weight_names():
        w = graph.weights[name]
        if w.ndim != 2:
            vectors[name] = np.ascontiguousarray(w, dtype=np.float32)
        elif name in kept:
            b = blocks[name]
            gg[name] = GGUFMatrix(name, b.qtype, np.ascontiguousarray(b.data, np.uint8), int(b.shape[1]))
        else:
            q4[name] = quantize_q4_rtn(name, w, group_size)
    return QuantizedGraph(graph=graph, q4=q4, vectors=vectors, group_size=group_size, kv_bits=kv_bits,
                          method="gguf", kernels=kernels, gguf=gg)
