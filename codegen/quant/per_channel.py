"""The "per-channel" scheme: arithmetic that CMSIS-NN reproduces exactly.

CMSIS-NN's int4 layers (arm_convolve_1x1_s4 on a 1x1 input is a
per-output-channel int4 fully connected layer) take int8 activations with
one static scale, accumulate exactly in int32, and requantize the result to
int8 with a fixed-point multiplier and shift per output channel
(TFLite-style double rounding). So this scheme

* quantizes weights to symmetric int4 with one scale per output row;
* calibrates one static scale for every linear input and output value by
  running the float model over sample text (max |x| / 127);
* turns s_in * s_w[r] / s_out into (multiplier, shift) per row, and biases
  into int32 at scale s_in * s_w[r].

exact.cmsis_fc_s4 mirrors CMSIS-NN's integer pipeline bit for bit, and the
firmware either calls CMSIS-NN (a checkout given to the build) or our C twin
of the same arithmetic (firmware/tllm_cmsis.c).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UserError
from ..resources import package_file
from ..ir import Graph
from .formats import QuantizedGraph
from .kv import KV8, KVBits
from .rtn import quantize_q4_rtn
from ..reference.sequence import SeqFloatKernels, run_sequence

DEFAULT_CALIBRATION_TEXT = package_file("quant/calibration.txt")
Q31 = 1 << 31


@dataclass(frozen=True, eq=False)
class StaticLinear:
    """Everything one linear node needs in the per-channel scheme."""

    weight: str  # the Q4 tensor (one group per row) in QuantizedGraph.q4
    in_value: str  # graph value feeding it (its int8 copy is shared)
    in_scale: np.float32
    out_scale: np.float32
    multipliers: np.ndarray  # int32 [rows]
    shifts: np.ndarray  # int32 [rows], > 0 shifts left (CMSIS-NN convention)
    bias: np.ndarray  # int32 [rows]


def quantize_multiplier(real: float) -> tuple[int, int]:
    """real = multiplier * 2^(shift - 31), multiplier in [2^30, 2^31)."""
    if real <= 0:
        return 0, 0
    mantissa, exponent = math.frexp(real)
    q = round(mantissa * Q31)
    if q == Q31:
        q //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return int(q), int(exponent)


def static_scale(max_abs: float) -> np.float32:
    return np.float32(max_abs / 127.0) if max_abs > 0 else np.float32(1.0 / 127.0)


def calibrate(graph: Graph, token_ids: Sequence[int]) -> dict[str, float]:
    """max |x| of every linear's input and output value over the tokens.

    The float model runs over the whole sequence in float64 (rounded to
    float32 between ops: reference/sequence.SeqFloatKernels), not the
    float32 BLAS of FloatKernels: a float32 product's last bit depends on the
    machine's BLAS kernel and thread count, and one ulp of a peak moves a
    static scale, so the build's bytes would differ between machines."""
    watched = {v for n in graph.nodes if n.op == "linear" for v in (n.inputs[0], n.output)}
    _, kept = run_sequence(graph, SeqFloatKernels(graph, len(token_ids)), token_ids, keep=watched,
                           need_logits=False)
    return {v: float(np.max(np.abs(kept[v]))) for v in watched}


def calibration_tokens(tokenizer, max_seq: int, text_file: Path | None = None) -> list[int]:
    path = Path(text_file) if text_file else DEFAULT_CALIBRATION_TEXT
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot read calibration text ({e.strerror}); pass --calibration FILE") from None
    ids = tokenizer.encode(text)[: max_seq]
    if len(ids) < 8:
        raise UserError(f"{path}: calibration text is only {len(ids)} tokens; give at least a few sentences")
    return ids


def quantize_per_channel(graph: Graph, token_ids: Sequence[int], kv_bits: KVBits = KV8) -> QuantizedGraph:
    peaks = calibrate(graph, token_ids)
    q4, vectors, static = {}, {}, {}
    for name in graph.weight_names():
        w = graph.weights[name]
        if w.ndim == 2:
            if w.shape[1] % 2:
                raise UserError(f"tensor {name} has {w.shape[1]} columns; the CMSIS-NN int4 layout needs an "
                                "even number: use --quant group")
            q4[name] = quantize_q4_rtn(name, w, w.shape[1])  # one group per row = per-channel
        else:
            vectors[name] = np.ascontiguousarray(w, dtype=np.float32)
    for node in graph.nodes:
        if node.op != "linear":
            continue
        t = q4[node.inputs[1]]
        s_in, s_out = static_scale(peaks[node.inputs[0]]), static_scale(peaks[node.output])
        mults, shifts = np.zeros(t.rows, np.int32), np.zeros(t.rows, np.int32)
        for r in range(t.rows):
            m, s = quantize_multiplier(float(s_in) * float(t.scales[r, 0]) / float(s_out))
            mults[r], shifts[r] = m, s
        _check_no_overflow(node.output, t.cols, shifts)
        bias = np.zeros(t.rows, np.int32)
        if len(node.inputs) > 2:
            b = graph.weights[node.inputs[2]].astype(np.float64)
            denom = float(s_in) * t.scales[:, 0].astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                bias = np.where(denom > 0, np.round(b / np.where(denom > 0, denom, 1)), 0)
            bias = np.clip(bias, -(2**30), 2**30).astype(np.int32)
        static[node.output] = StaticLinear(node.inputs[1], node.inputs[0], s_in, s_out, mults, shifts, bias)
    return QuantizedGraph(graph=graph, q4=q4, vectors=vectors, group_size=0, kv_bits=kv_bits,
                          method="per-channel", static=static)


def _check_no_overflow(name: str, cols: int, shifts: np.ndarray) -> None:
    """CMSIS-NN left-shifts the int32 accumulator without saturation: prove it cannot wrap."""
    bound = cols * 127 * 8 + 2**30
    worst = int(shifts.max(initial=0))
    if worst > 0 and bound << worst >= Q31:
        raise UserError(f"{name}: requantization needs a left shift of {worst}, which could overflow int32; "
                        "calibrate on text that reaches this layer's real range (--calibration FILE)")

