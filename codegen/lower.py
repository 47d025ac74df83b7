"""Lowering: QuantizedGraph -> LoweredStep -> (plan) -> Program.

Each graph node becomes one or two calls of the firmware's kernel interface
with typed argument records.  `lower_step` makes every decision once: which
calls, which buffers (declared with type, size and kind), which fusions.
The planner derives buffers and live ranges from those calls
(plan/lifetimes.py) and places them; `bind` writes the planned offsets and
the weights blob's offsets back.  The emitter only prints what is here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Union

import numpy as np

from .reference import exact
from .blob import WeightsBlob, build_blob, gguf_blob_kind
from .ir import ModelConfig, Node
from .plan import MemoryPlan
from .plan.lifetimes import GEN_STATE_BYTES, logits_rows, request_bytes
from .fusion import fused_gate_up, fused_norm_outputs
from .quant.formats import GGUF_BLOCK, QuantizedGraph, n_groups, x16_stream_bytes
from .quant.kv import kv_layout
from .reference.executor import head_start_node, rope_tables
from .errors import UserError
from .reference.sampler import top_k_of


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
class GGUFRef:
    """A matrix kept in one of llama.cpp's block formats (quant/formats.py
    GGUFMatrix): its blocks exactly as in the GGUF file, in the weights blob."""

    name: str
    qtype: str  # "Q4_0" | "Q4_1" | "Q8_0"
    rows: int
    cols: int
    offset: int

    @property
    def group(self) -> int:
        return GGUF_BLOCK

    @property
    def suffix(self) -> str:
        """The C kernels' name part: tllm_matvec_q41 etc."""
        return self.qtype.lower().replace("_", "")


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
class EmbedGGUF:
    """Embedding row lookup from a GGUF block table (tllm_embed_q40/q41/q80)."""

    table: GGUFRef
    out: BufferRef


@dataclass(frozen=True)
class RmsNorm:
    x: BufferRef
    weight: VectorRef
    n: int
    eps: np.float32
    out: BufferRef
    eps_name: str = ""  # the C constant holding eps (TLLM_NORM_EPS) when it is the model's, "" for a literal


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
    eps_name: str = ""  # as RmsNorm.eps_name


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
class MatvecGGUF:
    """W4A8 / W8A8 over a GGUF block matrix with the int8 activations of
    QuantizeI8 (group 32 = one block): tllm_matvec_q40/q41/q80."""

    matrix: GGUFRef
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

    matvec: Union[MatvecQ4, MatvecQ4x4, "MatvecGGUF"]
    chunk_rows: int

    @property
    def matrix(self) -> Union[Q4Ref, GGUFRef]:
        return self.matvec.matrix


@dataclass(frozen=True)
class TopKClassifier:
    """`--sampler topk:K` builds: the classifier's matvec run `chunk_rows`
    rows at a time into its output buffer, each chunk pushed into the running
    set of the K largest logits (tllm_topk_push: value descending, id
    ascending) held in `value` / `ids`; the sampler draws from the set
    (sampler.py's docstring), so no [vocab] logits vector exists."""

    matvec: Union[MatvecQ4, MatvecQ4x4, "MatvecGGUF"]
    chunk_rows: int
    k: int  # entries of the set (K <= vocab, lower_step checks)
    value: BufferRef  # float[k]
    ids: BufferRef  # uint16_t[k]

    @property
    def matrix(self) -> Union[Q4Ref, GGUFRef]:
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


KernelArgs = Union[EmbedQ4, EmbedGGUF, MatvecGGUF, RmsNorm, RmsNormX16, SiluMulPairsX16, QuantizeI8, QuantizeX16, QuantizeStaticS8, MatvecQ4, MatvecQ4x4,
                   ArgmaxClassifier, TopKClassifier, FcS4PerChannel, Rope, Attention, Add, SiluMul]


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
    stream: object = None  # stream.StreamPlan (the same the step carried), None: weights read in place
    head_start: int = -1  # calls[head_start:] are the head (LoweredStep.head_start); -1: not set
    top_k: int = 0  # --sampler topk:K: the classifier feeds a K-entry set (TopKClassifier), no logits vector
    prefill: object = None  # prefill.PrefillPlan (the same the step carried); None: token by token

    @property
    def prefill_batch(self) -> int:
        return self.prefill.batch if self.prefill is not None else 1

    @property
    def body_calls(self) -> tuple[KernelCall, ...]:
        assert self.head_start > 0, "bind sets head_start"
        return self.calls[:self.head_start]

    @property
    def head_calls(self) -> tuple[KernelCall, ...]:
        """The final norm and the classifier: what a step without logits (a
        prompt token before the last) skips."""
        assert self.head_start > 0, "bind sets head_start"
        return self.calls[self.head_start:]

    @property
    def max_seq(self) -> int:
        return self.plan.max_seq

    def buffers(self) -> list[BufferRef]:
        return [BufferRef(p.name, p.request.ctype, p.request.count, p.offset, p.region) for p in self.plan.buffers]


@dataclass(frozen=True)
class BufferDecl:
    """A run-time buffer a lowered step needs, before planning: what the
    planner places.  `span` pins a live range the calls do not show:
    "always" (KV cache, tokens, generation state: the whole generation),
    "sampler" (after the last call), "start" (before the first call: a
    UART request is parsed before the first step); None = the calls that
    use it, plus the sampler for the logits."""

    name: str
    ctype: str
    count: int
    kind: str  # activation | scratch | kv | state | tokens | logits | sampler | request | stream | pinned
    span: str | None = None
    placement: str = ""  # hot | bulk | dma; "" = by kind (plan/lifetimes.placement_of)
    align: int = 16  # stream buffers: 32 (whole D-cache lines for the H750's MDMA)


@dataclass(frozen=True)
class LoweredStep:
    """The decode step as kernel calls whose buffers are symbolic
    (BufferRef offset -1, region "") and whose weights are named but not yet
    in a blob (offsets -1).  The planner derives every buffer and live range
    from it (plan/lifetimes.lifetimes_of); `bind` then writes the planned
    offsets and the blob's offsets back (analysis -> algorithm -> transform)."""

    config: ModelConfig
    calls: tuple[KernelCall, ...]
    decls: tuple[BufferDecl, ...]  # every buffer, in order of first use
    logits: BufferRef
    max_seq: int
    group_size: int
    kv_bits: int
    kernels: str
    greedy: bool
    stream: object = None  # stream.StreamPlan when weights are streamed or pinned (codegen/stream.py)
    # calls[head_start:] are the head: the final norm and the classifier, the
    # calls of the graph's nodes after the last layer (reference.head_start_node).
    # Only the last prompt token's logits are read, so the firmware's step
    # skips them for the others (tllm_model_step's need_logits).
    head_start: int = -1
    top_k: int = 0  # --sampler topk:K (TopKClassifier); 0: full or greedy
    prefill: object = None  # prefill.PrefillPlan: prompt tokens per weight pass, the P-token buffers

    @property
    def body_calls(self) -> tuple[KernelCall, ...]:
        assert self.head_start > 0, "lower_step sets head_start"
        return self.calls[:self.head_start]

    def decl(self, name: str) -> BufferDecl:
        for d in self.decls:
            if d.name == name:
                return d
        raise KeyError(name)


def lower_step(src, max_seq: int, sampler: str = "full") -> LoweredStep:
    """QuantizedGraph (or plan.memory.GraphShape: no weights quantized, for
    `tinyllm-gen plan`) -> LoweredStep.  Every decision about which buffers
    exist is made here, once: the plan and the emitted C both follow it."""
    g, c = src.graph, src.config
    greedy = sampler == "greedy"
    top_k = top_k_of(sampler)
    if top_k > c.vocab_size:
        raise UserError(f"--sampler {sampler}: K is larger than the vocabulary ({c.vocab_size} tokens); "
                        f"use topk:{c.vocab_size} or fewer")
    m7 = src.kernels == "cortex-m7"
    per_channel = src.method == "per-channel"
    static = src.static if isinstance(src, QuantizedGraph) else {}
    kept = getattr(src, "gguf", {})  # weight name -> GGUFMatrix: llama.cpp blocks kept (quant/gguf_keep.py)
    assert not (kept and (m7 or per_channel)), "GGUF block formats run the portable kernels with group-wise int8"
    decls: dict[str, BufferDecl] = {}
    value_buf: dict[str, BufferRef] = {}
    last_read: dict[str, int] = {}
    for i, node in enumerate(g.nodes):
        for v in node.inputs:
            last_read[v] = i

    def new(name: str, ctype: str, count: int, kind: str, span: str | None = None) -> BufferRef:
        assert name not in decls, f"buffer {name} declared twice"
        decls[name] = BufferDecl(name, ctype, count, kind, span)
        return BufferRef(name, ctype, count, -1, "")

    def buf(name: str) -> BufferRef:
        d = decls[name]
        return BufferRef(d.name, d.ctype, d.count, -1, "")

    def val(value: str) -> BufferRef:
        return value_buf[value]

    def out_value(node: Node, rows: int | None = None, kind: str = "activation") -> BufferRef:
        r = new(node.output, "float", rows if rows is not None else g.values[node.output][0], kind)
        value_buf[node.output] = r
        return r

    def eps_name(node: Node) -> str:
        """Every norm of a model shares its eps: one named constant in the C (bit-equal, or a literal)."""
        return "TLLM_NORM_EPS" if np.float32(node.attrs["eps"]) == np.float32(c.norm_eps) else ""

    def linear_out(node: Node) -> BufferRef:
        """A linear's output; the classifier's is the logits (read by the
        sampler after the step, or one argmax chunk in a greedy build)."""
        if node.output == g.output:
            return out_value(node, logits_rows(c, sampler), "logits")
        return out_value(node)

    def in_place(node: Node, i: int) -> BufferRef:
        """rope, add and silu_mul overwrite their first input: the output
        value is that buffer (the C kernels work in place)."""
        src_v = node.inputs[0]
        if last_read[src_v] != i:
            raise AssertionError(f"{node.op} -> {node.output}: its input {src_v} is read later, "
                                 "but the kernel works in place")
        value_buf[node.output] = value_buf[src_v]
        return value_buf[src_v]

    # Weights are named, not read: shapes come from the values a node maps
    # between, so a graph built from a config alone (no weights) lowers too.
    def q4(node: Node) -> Q4Ref:
        rows, cols = ((c.vocab_size, c.dim) if node.op == "embedding" else
                      (g.values[node.output][0], g.values[node.inputs[0]][0]))
        layout = "q4x4" if m7 and not per_channel else "q4"
        return Q4Ref(node.inputs[1], rows, cols, src.group_size, -1, -1, layout)

    def gguf(node: Node) -> GGUFRef | None:
        t = kept.get(node.inputs[1])
        return None if t is None else GGUFRef(t.name, t.qtype, t.rows, t.cols, -1)

    def vec(name: str, count: int) -> VectorRef:
        return VectorRef(name, count, -1)

    def stream(value: str) -> BufferRef:  # a value that exists only as an int16 stream
        return new(value + ".x16", "uint8_t", x16_stream_bytes(g.values[value][0], src.group_size), "scratch")

    calls: list[KernelCall] = []
    quantized: set[str] = set()
    fused = fused_norm_outputs(src)
    gate_up = fused_gate_up(src)
    fused_up = {f.up for f in gate_up.values()}
    fused_act = {f.act: f for f in gate_up.values()}
    head_node, head_start = head_start_node(g), -1

    def emit(args: KernelArgs, node: Node, label: str | None = None) -> None:
        calls.append(KernelCall(args, node.layer, label or node.label))

    for i, node in enumerate(g.nodes):
        ins = node.inputs
        if i == head_node:
            head_start = len(calls)
        if node.op == "embedding":
            table = gguf(node)
            emit(EmbedGGUF(table, out_value(node)) if table else EmbedQ4(q4(node), out_value(node)), node)
        elif node.op == "rmsnorm" and node.output in fused:
            quantized.add(node.output)
            emit(RmsNormX16(val(ins[0]), vec(ins[1], c.dim), c.dim, np.float32(node.attrs["eps"]), src.group_size,
                            stream(node.output), eps_name(node)), node)
        elif node.op == "rmsnorm":
            emit(RmsNorm(val(ins[0]), vec(ins[1], c.dim), c.dim, np.float32(node.attrs["eps"]), out_value(node),
                         eps_name(node)), node)
        elif node.op == "linear" and node.output in fused_up:
            continue  # computed by the gate's combined matvec
        elif node.op == "linear" and node.output in gate_up:
            pair = gate_up[node.output]
            if ins[0] not in quantized:
                quantized.add(ins[0])
                emit(QuantizeX16(val(ins[0]), g.values[ins[0]][0], src.group_size, stream(ins[0])),
                     node, label=f"quantize {ins[0]}")
            gu = new(pair.gate + ".gu", "float", 2 * g.values[pair.gate][0], "activation")
            value_buf[node.output] = gu
            combined = Q4Ref(pair.combined, 2 * g.values[pair.gate][0], g.values[ins[0]][0], src.group_size, -1, -1,
                             "q4x4")
            emit(MatvecQ4x4(combined, buf(ins[0] + ".x16"), None, gu), node, label="ffn.w_gate+w_up")
        elif node.op == "silu_mul" and node.output in fused_act:
            quantized.add(node.output)
            emit(SiluMulPairsX16(val(ins[0]), g.values[node.output][0], src.group_size, stream(node.output)), node)
        elif node.op == "linear" and per_channel:
            src_v, st = ins[0], static.get(node.output)
            if src_v not in quantized:
                quantized.add(src_v)
                inv = exact.inverse_scale(st.in_scale) if st is not None else np.float32(1)  # GraphShape: no scales
                emit(QuantizeStaticS8(val(src_v), g.values[src_v][0], inv,
                                      new(src_v + ".s8", "int8_t", g.values[src_v][0], "scratch")),
                     node, label=f"quantize {src_v}")
            fc = FcS4PcRef(node.output, q4(node), -1, -1, -1, st.out_scale if st is not None else np.float32(1))
            s8out = new(node.output + ".s8out", "int8_t", g.values[node.output][0], "scratch")
            emit(FcS4PerChannel(fc, buf(src_v + ".s8"), s8out, linear_out(node)), node)
        elif node.op == "linear":
            src_v = ins[0]
            n = g.values[src_v][0]
            if src_v not in quantized:  # one int8 copy shared by every linear reading src
                quantized.add(src_v)
                q = (QuantizeX16(val(src_v), n, src.group_size, stream(src_v)) if m7 else
                     QuantizeI8(val(src_v), n, src.group_size, new(src_v + ".q8", "int8_t", n, "scratch"),
                                new(src_v + ".qs", "float", n_groups(n, src.group_size), "scratch")))
                emit(q, node, label=f"quantize {src_v}")
            bias = vec(ins[2], g.values[node.output][0]) if len(ins) > 2 else None
            out = linear_out(node)
            kept_w = gguf(node)
            mv = (MatvecQ4x4(q4(node), buf(src_v + ".x16"), bias, out) if m7 else
                  MatvecGGUF(kept_w, buf(src_v + ".q8"), buf(src_v + ".qs"), bias, out) if kept_w else
                  MatvecQ4(q4(node), buf(src_v + ".q8"), buf(src_v + ".qs"), bias, out))
            if greedy and node.output == g.output:
                mv = ArgmaxClassifier(mv, logits_rows(c, sampler))
            elif top_k and node.output == g.output:
                mv = TopKClassifier(mv, logits_rows(c, sampler), top_k, new("topk.value", "float", top_k, "topk"),
                                    new("topk.id", "uint16_t", top_k, "topk"))
            emit(mv, node)
        elif node.op == "rope":
            emit(Rope(in_place(node, i), int(node.attrs["n_heads"]), int(node.attrs["head_dim"])), node)
        elif node.op == "attention":
            layer = int(node.attrs["layer"])
            lay, kv = f"l{layer}", kv_layout(c, src.kv_bits)
            caches = [new(f"{lay}.{part}_cache", kv.ctype, max_seq * kv.bytes_per_pos, "kv", "always")
                      for part in ("k", "v")]
            scales = [new(f"{lay}.{part}_scale", "float", max_seq * kv.scales_per_pos, "kv", "always")
                      for part in ("k", "v")]
            q8 = new(lay + ".att.query_i8", "int8_t", c.head_dim, "scratch")  # not ".att.q8": the output value "l<i>.att" has that quantized copy
            scores = new(lay + ".att.scores", "float", max_seq, "scratch")
            group = kv_layout(c, 4).group if src.kv_bits == 4 else 0
            emit(Attention(layer, val(ins[0]), val(ins[1]), val(ins[2]), caches[0], caches[1], scales[0], scales[1],
                           q8, scores, out_value(node), kv_bits=src.kv_bits, group=group), node)
        elif node.op == "add":
            emit(Add(in_place(node, i), val(ins[1]), g.values[node.output][0]), node)
        elif node.op == "silu_mul":
            emit(SiluMul(in_place(node, i), val(ins[1]), g.values[node.output][0]), node)
        else:
            raise AssertionError(f"no lowering for op {node.op}")
    new("tokens", "uint16_t", max_seq, "tokens", "always")
    new("gen_state", "uint8_t", GEN_STATE_BYTES, "state", "always")
    if not greedy and not top_k:  # the full sampler's top-p scratch
        new("sample_idx", "uint16_t", c.vocab_size, "sampler", "sampler")
    new("request", "uint8_t", request_bytes(max_seq), "request", "start")
    assert 0 < head_start < len(calls), "the step has a body and a head (final norm, classifier)"
    return LoweredStep(c, tuple(calls), tuple(decls.values()), val(g.output), max_seq, src.group_size, src.kv_bits,
                       src.kernels, greedy, head_start=head_start, top_k=top_k)


def refs_of(obj, kind: type):
    """Every `kind` record (BufferRef, VectorRef ...) inside a call's argument record, nested records too."""
    if isinstance(obj, kind):
        yield obj
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from refs_of(getattr(obj, f.name), kind)


def buffers_of(call: KernelCall) -> list[BufferRef]:
    return list(refs_of(call.args, BufferRef))


def bind(step: LoweredStep, plan: MemoryPlan, blob: WeightsBlob, qg: QuantizedGraph) -> Program:
    """Write the plan's offsets and the blob's offsets into the step's calls."""
    from .prefill import planned_count

    planned = {p.name: p for p in plan.buffers}
    missing = sorted(set(d.name for d in step.decls) ^ set(planned))
    if missing:
        raise AssertionError(f"the plan and the lowered step disagree on buffers: {missing[:5]}")

    def q4ref(r: Q4Ref) -> Q4Ref:
        if r.layout == "q4x4":
            rows, cols, group = (r.rows, r.cols, r.group) if r.name not in qg.q4 else \
                (qg.q4[r.name].rows, qg.q4[r.name].cols, qg.q4[r.name].group_size)
            return Q4Ref(r.name, rows, cols, group, blob.entry(r.name, "q4x4").offset, 0, "q4x4")
        t = qg.q4[r.name]
        return Q4Ref(r.name, t.rows, t.cols, t.group_size, blob.entry(r.name, "q4.packed").offset,
                     blob.entry(r.name, "q4.scales").offset)

    def transform(obj):
        if isinstance(obj, BufferRef):
            p = planned[obj.name]
            assert (p.request.ctype, p.request.count) == (obj.ctype, planned_count(step.prefill, obj.name, obj.count)), \
                obj.name  # a P-token buffer (prefill.py) holds P times the one-token count
            return BufferRef(obj.name, obj.ctype, obj.count, p.offset, p.region)
        if isinstance(obj, Q4Ref):
            return q4ref(obj)
        if isinstance(obj, GGUFRef):
            return dataclasses.replace(obj, offset=blob.entry(obj.name, gguf_blob_kind(obj.qtype)).offset)
        if isinstance(obj, VectorRef):
            e = blob.entry(obj.name, "f32")
            return VectorRef(obj.name, e.nbytes // 4, e.offset)
        if isinstance(obj, FcS4PcRef):
            return FcS4PcRef(obj.name, q4ref(obj.weight), blob.entry(obj.name, "s4pc.bias").offset,
                             blob.entry(obj.name, "s4pc.multipliers").offset,
                             blob.entry(obj.name, "s4pc.shifts").offset, obj.out_scale)
        if dataclasses.is_dataclass(obj):
            return dataclasses.replace(obj, **{f.name: transform(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        return obj

    calls = tuple(KernelCall(transform(call.args), call.layer, call.label) for call in step.calls)
    cos, sin = blob.entry("rope.cos", "f32"), blob.entry("rope.sin", "f32")
    c = step.config
    return Program(
        config=c, calls=calls, plan=plan, blob=blob, logits=transform(step.logits),
        rope_cos=VectorRef("rope.cos", cos.nbytes // 4, cos.offset), rope_sin=VectorRef("rope.sin", sin.nbytes // 4, sin.offset),
        attention_scale=exact.attention_scale(c.head_dim), group_size=step.group_size, kv_bits=step.kv_bits,
        kernels=step.kernels, greedy=step.greedy, stream=step.stream, head_start=step.head_start, top_k=step.top_k,
        prefill=step.prefill,
    )


def lower(qg: QuantizedGraph, plan: MemoryPlan, sampler: str = "full", vocab=None, stream=None,
          prefill_batch: int = 1) -> Program:
    """QuantizedGraph + its MemoryPlan -> Program.  The plan was made from
    lower_step on the same graph and options (plan/lifetimes.py); bind checks
    that both name the same buffers.  vocab: a vocab.Vocabulary to keep in
    the weights blob (external flash), or None.  stream: the
    stream.StreamOptions the plan was made with (None: weights in place);
    prefill_batch: the P it was made with (prefill.py)."""
    c = qg.config
    cos, sin = rope_tables(c.head_dim, c.rope_theta, plan.max_seq)
    blob = build_blob(qg, cos, sin, vocab.text if vocab else None, vocab.offsets if vocab else None)
    return bind(lowered_step(qg, plan.max_seq, sampler, stream, prefill_batch), plan, blob, qg)


def lowered_step(src, max_seq: int, sampler: str, stream=None, prefill_batch: int = 1) -> LoweredStep:
    """lower_step, then the passes between lowering and planning: the weight
    stream (stream.py) and the prefill batch (prefill.py).  The planner and
    `lower` both call this, so they see the same buffers."""
    from .prefill import batch_step
    from .stream import stream_step

    return batch_step(stream_step(lower_step(src, max_seq, sampler), stream), prefill_batch)
