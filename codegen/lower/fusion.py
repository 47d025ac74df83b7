"""Kernel fusions of the Cortex-M7 kernel set, decided in one place.

Lowering (lower/step.py), the weights blob (lower/blob.py) and its size
from shapes (plan/weights_size.py) all ask here, so they cannot disagree
about which values exist as float buffers and which matrices are fused. Fusions change where values live, never the arithmetic: the
reference needs to know nothing about them.

* norm + quantize: an RMSNorm whose output only linear layers read writes
  their int16 activation stream directly (tllm_rmsnorm_x16).
* gate/up in one pass: the FFN's gate and up projections become one tiled
  matrix whose 4-row tiles hold (gate 2t, gate 2t+1, up 2t, up 2t+1), so one
  matvec pass over the activations computes both; SiLU(gate) * up is then
  computed per pair and quantized straight into the down projection's
  stream (tllm_silu_mul_pairs_x16): neither gate, up nor their product is
  stored as a float vector.  A re-rounded pair becomes one q4x4 matrix; a
  pair whose llama.cpp blocks are kept, one tiled matrix of their common
  format (its rows interleaved the same way: the file's blocks, moved); a
  pair of one kept and one re-rounded matrix, or of two formats, is not fused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..quant.formats import GGUFMatrix, Q4Tensor


FUSED_SUFFIX = "+up"  # a fused gate/up matrix is named after its gate: "layers.3.w_gate+up"


def m7_fusions_apply(kernels: str, method: str) -> bool:
    return kernels == "cortex-m7" and method != "per-channel"


def _readers(graph) -> dict[str, list]:
    readers: dict[str, list] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(v, []).append(node)
    return readers


def fused_norm_outputs(graph, kernels: str, method: str) -> set[str]:
    if not m7_fusions_apply(kernels, method):
        return set()
    readers = _readers(graph)
    return {n.output for n in graph.nodes if n.op == "rmsnorm" and readers.get(n.output)
            and all(r.op == "linear" and r.inputs[0] == n.output for r in readers[n.output])}


@dataclass(frozen=True)
class GateUp:
    gate: str  # value names
    up: str
    act: str
    w_gate: str  # weight names
    w_up: str

    @property
    def combined(self) -> str:
        """Name of the interleaved matrix in the blob."""
        return self.w_gate + FUSED_SUFFIX


def fused_gate_up(g, kernels: str, method: str, kept: Mapping[str, str] | None = None) -> dict[str, GateUp]:
    """gate value -> GateUp, for every silu_mul(linear(x, w_gate), linear(x, w_up))
    whose three values nothing else reads (and the act only linears read).
    kept: weight name -> GGUF qtype of the matrices whose blocks are kept."""
    if not m7_fusions_apply(kernels, method):
        return {}
    kept = kept or {}
    readers = _readers(g)
    producer = {n.output: n for n in g.nodes}
    out: dict[str, GateUp] = {}
    for n in g.nodes:
        if n.op != "silu_mul":
            continue
        gate, up = (producer.get(v) for v in n.inputs)
        if not (gate and up and gate.op == "linear" and up.op == "linear" and len(gate.inputs) == 2
                and len(up.inputs) == 2 and gate.inputs[0] == up.inputs[0]):
            continue
        hidden = g.values[gate.output][0]
        if hidden % 2 or g.values[up.output][0] != hidden:
            continue
        if [r.op for r in readers[gate.output]] != ["silu_mul"] or [r.op for r in readers[up.output]] != ["silu_mul"]:
            continue
        if not readers.get(n.output) or any(r.op != "linear" or r.inputs[0] != n.output for r in readers[n.output]):
            continue
        if kept.get(gate.inputs[1]) != kept.get(up.inputs[1]):
            continue  # one kept and one re-rounded, or two formats: one layout cannot hold both
        out[gate.output] = GateUp(gate.output, up.output, n.output, gate.inputs[1], up.inputs[1])
    return out


def interleaved_rows(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Rows (gate 2t, gate 2t+1, up 2t, up 2t+1) for t = 0, 1, ...: one
    4-row tile per pair of outputs (the array's other dimensions as they are)."""
    out = np.empty((2 * gate.shape[0],) + gate.shape[1:], gate.dtype)
    for src, offset in ((gate, 0), (up, 2)):
        for j in (0, 1):
            out[offset + j::4] = src[j::2]
    return out


def interleave_gate_up(gate: Q4Tensor, up: Q4Tensor, name: str) -> Q4Tensor:
    return Q4Tensor(name=name, q=interleaved_rows(gate.q, up.q), scales=interleaved_rows(gate.scales, up.scales),
                    group_size=gate.group_size)


def interleave_gate_up_blocks(gate: GGUFMatrix, up: GGUFMatrix, name: str) -> GGUFMatrix:
    """The kept blocks' rows in the same order (a row's blocks move whole)."""
    return GGUFMatrix(name, gate.qtype, interleaved_rows(gate.data, up.data), gate.cols)
