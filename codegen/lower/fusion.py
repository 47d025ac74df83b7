"""Kernel fusions of the Cortex-M7 kernel set, decided in one place.

Lowering (lower/step.py), the weights blob (lower/blob.py) and its size
from shapes (plan/weights_size.py) all ask here, so they cannot disagree
about which values exist as float buffers and which matrices are fused. Fusions change where values live, never the arithmetic: the
reference needs to know nothing about them.

* norm + quantize: an RMSNorm whose output only linear layers read writes
  their int16 activation stream directly (tllm_rmsnorm_x16).
* gate/up in one pass: the FFN's gate and up projections become one q4x4
  matrix whose 4-row tiles hold (gate 2t, gate 2t+1, up 2t, up 2t+1), so one
  matvec pass over the activations computes both; SiLU(gate) * up is then
  computed per pair and quantized straight into the down projection's
  stream (tllm_silu_mul_pairs_x16): neither gate, up nor their product is
  stored as a float vector.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..quant.formats import Q4Tensor


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
        return self.w_gate + "+up"


def fused_gate_up(g, kernels: str, method: str) -> dict[str, GateUp]:
    """gate value -> GateUp, for every silu_mul(linear(x, w_gate), linear(x, w_up))
    whose three values nothing else reads (and the act only linears read)."""
    if not m7_fusions_apply(kernels, method):
        return {}
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
        out[gate.output] = GateUp(gate.output, up.output, n.output, gate.inputs[1], up.inputs[1])
    return out


def interleave_gate_up(gate: Q4Tensor, up: Q4Tensor, name: str) -> Q4Tensor:
    """Rows (gate 2t, gate 2t+1, up 2t, up 2t+1) for t = 0, 1, ...: one q4x4
    tile per pair of outputs."""
    rows = gate.rows
    order_q = np.empty((2 * rows, gate.cols), gate.q.dtype)
    order_s = np.empty((2 * rows, gate.scales.shape[1]), gate.scales.dtype)
    for src, offset in ((gate, 0), (up, 2)):
        for j in (0, 1):
            order_q[offset + j::4] = src.q[j::2]
            order_s[offset + j::4] = src.scales[j::2]
    return Q4Tensor(name=name, q=order_q, scales=order_s, group_size=gate.group_size)
