"""Lowering: QuantizedGraph + MemoryPlan -> Program (ordered kernel calls).

Each graph node becomes one or two calls of the firmware's kernel interface
with typed argument records; buffers come from the plan, constants from the
weights blob.  The emitter only prints what is here: it makes no decisions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from . import exact
from .blob import WeightsBlob, build_blob
from .ir import ModelConfig, Node
from .plan import MemoryPlan
from .plan.lifetimes import logits_rows
from .fusion import fused_gate_up, fused_norm_outputs
from .quant.formats import QuantizedGraph
from .quant.kv import kv_layout
from .reference import rope_tables


@dataclass(frozen=True)
class BufferRef:
    """A planned arena buffer."""

    name: str
    ctype: str
    count: int
    offset: int
    region: str = "ram"  # the memory region whose arena holds it (plan/regions.py)


@dataclass(frozen=True)
class Q4Ref:
    """A Q4 matrix in the weights blob: packed nibbles + scales ("q4"), or
    one stream in the Cortex-M7 layout ("q4x4", scales_offset unused)."""

    name: str
    rows: int
    cols: int
    group: int
    packed_offset: int
    scales_offset: int
    layout: str = "q4"


@dataclass(frozen=True)
class VectorRef:
    """A float32 vector (norm weight, bias, RoPE table) in the weights blob."""

    name: str
    count: int
    offset: int


@dataclass(frozen=True)
class EmbedQ4:
    table: Q4Ref
    out: BufferRef


@dataclass(frozen=True)
class RmsNorm:
    x: BufferRef
    weight: VectorRef
    n: int
    eps: np.float32
    out: BufferRef


@dataclass(frozen=True)
class RmsNormX16:
    """RMSNorm fused with the int8 quantization of its output into the
    Cortex-M7 int16 stream (fusion.py)."""

    x: BufferRef
    weight: VectorRef
    n: int
    eps: np.float32
    group: int
    stream: BufferRef


@dataclass(frozen=True)
class SiluMulPairsX16:
    """SiLU(gate) * up from a fused gate/up matvec's (g, g, u, u) tiles,
    quantized straight into the next linear's int16 stream (fusion.py)."""

    gu: BufferRef
    n: int
    group: int
    stream: BufferRef


@dataclass(frozen=True)
class QuantizeI8:
    x: BufferRef
    n: int
    group: int
    q: BufferRef
    scales: BufferRef


@dataclass(frozen=True)
class MatvecQ4:
    matrix: Q4Ref
    xq: BufferRef
    xs: BufferRef
    bias: VectorRef | None
    out: BufferRef


@dataclass(frozen=True)
class QuantizeX16:
    """int8 quantization into the Cortex-M7 int16 activation stream."""

    x: BufferRef
    n: int
    group: int
    stream: BufferRef


@dataclass(frozen=True)
class MatvecQ4x4:
    matrix: Q4Ref
    x_stream: BufferRef
    bias: VectorRef | None
    out: BufferRef


@dataclass(frozen=True)
class ArgmaxClassifier:
    """Greedy-only builds: the classifier's matvec run `chunk_rows` rows at a
    time into its output buffer, keeping the first maximum (tllm_argmax's
    order): the token, without a [vocab] logits vector."""

    matvec: Union[MatvecQ4, MatvecQ4x4]
    chunk_rows: int

    @property
    def matrix(self) -> Q4Ref:
        return self.matvec.matrix


@dataclass(frozen=True)
class QuantizeStaticS8:
    """Per-channel scheme: int8 with a calibrated static scale."""

    x: BufferRef
    n: int
    inv_scale: np.float32
    q: BufferRef


@dataclass(frozen=True)
class FcS4PcRef:
    """One per-channel int4 layer's constants in the weights blob."""

    name: str  # the linear's output value
    weight: Q4Ref
    bias_offset: int
    multipliers_offset: int
    shifts_offset: int
    out_scale: np.float32


@dataclass(frozen=True)
class FcS4PerChannel:
    layer: FcS4PcRef
    xq: BufferRef
    q_out: BufferRef
    out: BufferRef


@dataclass(frozen=True)
class Rope:
    x: BufferRef
    n_heads: int
    head_dim: int


@dataclass(frozen=True)
class Attention:
    """Attention over the KV cache: int8 (tllm_attention_i8) or group-wise
    int4 (tllm_attention_kv4, quant/kv.py); the scratch is the same."""

    layer: int
    q: BufferRef
    k: BufferRef
    v: BufferRef
    k_cache: BufferRef
    v_cache: BufferRef
    k_scale: BufferRef
    v_scale: BufferRef
    q8: BufferRef
    scores: BufferRef
    out: BufferRef
    kv_bits: int = 8
    group: int = 0  # int4 elements per scale along head_dim (kv_bits 4)


@dataclass(frozen=True)
class Add:
    a: BufferRef
    b: BufferRef
    n: int


@dataclass(frozen=True)
class SiluMul:
    gate: BufferRef
    up: BufferRef
    n: int


KernelArgs = Union[EmbedQ4, RmsNorm, RmsNormX16, SiluMulPairsX16, QuantizeI8, QuantizeX16, QuantizeStaticS8, MatvecQ4, MatvecQ4x4,
                   ArgmaxClassifier, FcS4PerChannel, Rope, Attention, Add, SiluMul]


@dataclass(frozen=True)
class KernelCall:
    args: KernelArgs
    layer: int | None
    label: str  # e.g. "attn.wq"


@dataclass(frozen=True)
class Program:
    config: ModelConfig
    calls: tuple[KernelCall, ...]
    plan: MemoryPlan
    blob: WeightsBlob
    logits: BufferRef
    rope_cos: VectorRef
    rope_sin: VectorRef
    attention_scale: np.float32
    group_size: int
    kv_bits: int
    kernels: str = "portable"
    greedy: bool = False  # the classifier ends in an argmax (ArgmaxClassifier): no logits vector, no sampler

    @property
    def max_seq(self) -> int:
        return self.plan.max_seq

    def buffers(self) -> list[BufferRef]:
        return [BufferRef(p.name, p.request.ctype, p.request.count, p.offset, p.region) for p in self.plan.buffers]


def lower(qg: QuantizedGraph, plan: MemoryPlan, sampler: str = "full", vocab=None) -> Program:
    c = qg.config
    greedy = sampler == "greedy"
    cos, sin = rope_tables(c.head_dim, c.rope_theta, plan.max_seq)
    # vocab: a vocab.Vocabulary to keep in the weights blob (external flash), or None
    blob = build_blob(qg, cos, sin, vocab.text if vocab else None, vocab.offsets if vocab else None)

    def buf(name: str) -> BufferRef:
        p = plan.buffer(name)
        return BufferRef(name, p.request.ctype, p.request.count, p.offset, p.region)

    def val(value: str) -> BufferRef:
        return buf(plan.lifetimes.value_buffer[value])

    def q4(name: str) -> Q4Ref:
        t = qg.q4[name]
        if qg.kernels == "cortex-m7" and qg.method != "per-channel":
            return Q4Ref(name, t.rows, t.cols, t.group_size, blob.entry(name, "q4x4").offset, 0, "q4x4")
        return Q4Ref(name, t.rows, t.cols, t.group_size,
                     blob.entry(name, "q4.packed").offset, blob.entry(name, "q4.scales").offset)

    def vec(name: str) -> VectorRef:
        e = blob.entry(name, "f32")
        return VectorRef(name, e.nbytes // 4, e.offset)

    calls: list[KernelCall] = []
    quantized: set[str] = set()
    fused = fused_norm_outputs(qg)
    gate_up = fused_gate_up(qg)
    fused_up = {f.up for f in gate_up.values()}
    fused_act = {f.act: f for f in gate_up.values()}

    def emit(args: KernelArgs, node: Node, label: str | None = None) -> None:
        calls.append(KernelCall(args, node.layer, label or node.label))

    for node in qg.graph.nodes:
        ins = node.inputs
        if node.op == "embedding":
            emit(EmbedQ4(q4(ins[1]), val(node.output)), node)
        elif node.op == "rmsnorm" and node.output in fused:
            quantized.add(node.output)
            emit(RmsNormX16(val(ins[0]), vec(ins[1]), c.dim, np.float32(node.attrs["eps"]), qg.group_size,
                            buf(node.output + ".x16")), node)
        elif node.op == "rmsnorm":
            emit(RmsNorm(val(ins[0]), vec(ins[1]), c.dim, np.float32(node.attrs["eps"]), val(node.output)), node)
        elif node.op == "linear" and node.output in fused_up:
            continue  # computed by the gate's combined matvec
        elif node.op == "linear" and node.output in gate_up:
            pair = gate_up[node.output]
            if ins[0] not in quantized:
                quantized.add(ins[0])
                emit(QuantizeX16(val(ins[0]), qg.graph.values[ins[0]][0], qg.group_size, buf(ins[0] + ".x16")),
                     node, label=f"quantize {ins[0]}")
            t = qg.q4[pair.w_gate]
            combined = Q4Ref(pair.combined, 2 * t.rows, t.cols, t.group_size, blob.entry(pair.combined, "q4x4").offset,
                             0, "q4x4")
            emit(MatvecQ4x4(combined, buf(ins[0] + ".x16"), None, val(node.output)), node, label="ffn.w_gate+w_up")
        elif node.op == "silu_mul" and node.output in fused_act:
            quantized.add(node.output)
            emit(SiluMulPairsX16(val(ins[0]), qg.graph.values[node.output][0], qg.group_size,
                                 buf(node.output + ".x16")), node)
        elif node.op == "linear" and qg.method == "per-channel":
            src, st = ins[0], qg.static[node.output]
            if src not in quantized:
                quantized.add(src)
                emit(QuantizeStaticS8(val(src), qg.graph.values[src][0], exact.inverse_scale(st.in_scale),
                                      buf(src + ".s8")), node, label=f"quantize {src}")
            fc = FcS4PcRef(node.output, q4(ins[1]), blob.entry(node.output, "s4pc.bias").offset,
                           blob.entry(node.output, "s4pc.multipliers").offset,
                           blob.entry(node.output, "s4pc.shifts").offset, st.out_scale)
            emit(FcS4PerChannel(fc, buf(src + ".s8"), buf(node.output + ".s8out"), val(node.output)), node)
        elif node.op == "linear":
            src = ins[0]
            n, m7 = qg.graph.values[src][0], qg.kernels == "cortex-m7"
            if src not in quantized:  # one int8 copy shared by every linear reading src
                quantized.add(src)
                q = (QuantizeX16(val(src), n, qg.group_size, buf(src + ".x16")) if m7 else
                     QuantizeI8(val(src), n, qg.group_size, buf(src + ".q8"), buf(src + ".qs")))
                emit(q, node, label=f"quantize {src}")
            bias = vec(ins[2]) if len(ins) > 2 else None
            mv = (MatvecQ4x4(q4(ins[1]), buf(src + ".x16"), bias, val(node.output)) if m7 else
                  MatvecQ4(q4(ins[1]), buf(src + ".q8"), buf(src + ".qs"), bias, val(node.output)))
            if greedy and node.output == qg.graph.output:
                mv = ArgmaxClassifier(mv, logits_rows(c, sampler))
            emit(mv, node)
        elif node.op == "rope":
            _require_inplace(plan, node)
            emit(Rope(val(ins[0]), int(node.attrs["n_heads"]), int(node.attrs["head_dim"])), node)
        elif node.op == "attention":
            lay = f"l{node.attrs['layer']}"
            refs = (int(node.attrs["layer"]), val(ins[0]), val(ins[1]), val(ins[2]),
                    buf(lay + ".k_cache"), buf(lay + ".v_cache"), buf(lay + ".k_scale"), buf(lay + ".v_scale"),
                    buf(lay + ".att.q8"), buf(lay + ".att.scores"), val(node.output))
            group = kv_layout(c, 4).group if qg.kv_bits == 4 else 0
            emit(Attention(*refs, kv_bits=qg.kv_bits, group=group), node)
        elif node.op == "add":
            _require_inplace(plan, node)
            emit(Add(val(ins[0]), val(ins[1]), qg.graph.values[node.output][0]), node)
        elif node.op == "silu_mul":
            _require_inplace(plan, node)
            emit(SiluMul(val(ins[0]), val(ins[1]), qg.graph.values[node.output][0]), node)
        else:
            raise AssertionError(f"no lowering for op {node.op}")
    return Program(
        config=c, calls=tuple(calls), plan=plan, blob=blob, logits=val(qg.graph.output),
        rope_cos=vec("rope.cos"), rope_sin=vec("rope.sin"), attention_scale=exact.attention_scale(c.head_dim),
        group_size=qg.group_size, kv_bits=qg.kv_bits, kernels=qg.kernels, greedy=greedy,
    )


def _require_inplace(plan: MemoryPlan, node: Node) -> None:
    """The C kernels for these ops work in place; the planner must have
    given the output the input's buffer."""
    vb = plan.lifetimes.value_buffer
    if vb[node.output] != vb[node.inputs[0]]:
        raise AssertionError(f"{node.op} -> {node.output} is not in place; the planner must alias it")
