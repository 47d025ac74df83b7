"""Lowering: StepSource -> LoweredStep, once per compile.

Each graph node becomes one or two calls of the firmware's kernels (the
records of kernels/), and every buffer they use is declared here with its
type, one-token count (plus its growth with the context) and kind.  Every
decision about which buffers exist is made here, once: the passes, the
planner and the emitted C all follow it.

The kernel conventions lowering follows:
* a linear reads its input as int8 groups: "<value>.q8" (+ ".qs" scales),
  made once before the first linear that reads <value> and shared by all
  of them (q/k/v share one, gate/up share one); with the Cortex-M7 kernels
  one "<value>.x16" stream instead, written by the RMSNorm itself when only
  linears read its output, and gate/up computed in one pass into
  "<gate>.gu" with SiLU x up written as a stream (lower/fusion.py);
* rope, add and silu_mul work in place on their first input when that input
  is not read afterwards: the output value shares its buffer;
* attention needs scratch "<layer>.att.query_i8" and "<layer>.att.scores";
* the full sampler reads "logits" and needs "sample_idx" [vocab] uint16; a
  greedy build runs the classifier in chunks into a "logits" buffer of one
  chunk and keeps the running argmax; a "topk:K" build keeps "topk.value"
  [K] float and "topk.id" [K] uint16 (kind "topk") and has no "sample_idx";
* a request arriving over the UART lands in "request" before the first step;
* a top-K draft model (`draft_guesses` > 0, compile_draft.py) keeps each
  guess's q, its set's K candidates: "guess_q.value" [guesses x K] float and
  "guess_q.id" [guesses x K] uint16 for the whole generation (the engine
  reads them at the target's verification, after the draft's steps).

Weights are named, not read: shapes come from the values a node maps
between, so a graph built from a config alone (no weights) lowers too."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..abi import GEN_STATE_BYTES, REQUEST_HEADER_BYTES
from ..errors import UserError
from ..ir import ModelConfig, Node
from ..kernels import (Add, ArgmaxClassifier, Attention, EmbedGGUF, EmbedQ4, FcS4PerChannel, Kernel, MatvecGGUF,
                       MatvecGGUFx4, MatvecQ4, MatvecQ4x4, QuantizeI8, QuantizeStaticS8, QuantizeX16, RmsNorm, RmsNormX16, Rope,
                       SiluMul, SiluMulPairsX16, TopKClassifier)
from ..kernels.classifier import chunk_rows_for
from ..kernels.refs import BufferRef, FcS4PcRef, GGUFRef, Q4Ref, VectorRef
from ..quant.formats import n_groups, x16_stream_bytes
from ..quant.kv import KVBits, kv_layout, kv_layouts, parse_kv_bits
from ..quant.kv_center import K_CENTER, V_CENTER, center_name
from ..reference import exact
from ..reference.executor import head_start_node
from ..reference.sampler import top_k_of
from .fusion import fused_gate_up, fused_norm_outputs
from .records import BufferDecl, KernelCall, LoweredStep, StepSource

REQUEST_BYTES_PER_TOKEN = 2  # a uint16 prompt id (tllm_request.h)
GUESS_VALUES, GUESS_IDS = "guess_q.value", "guess_q.id"  # a top-K draft model's q per guess


def logits_rows(c: ModelConfig, sampler: str) -> int:
    """Rows of the logits buffer: the vocabulary, or one classifier chunk
    (greedy and topk:K builds)."""
    chunked = sampler == "greedy" or top_k_of(sampler) > 0
    return chunk_rows_for(c.vocab_size) if chunked else c.vocab_size


def lower_step(src: StepSource, sampler: str = "full", draft_guesses: int = 0) -> LoweredStep:
    """StepSource -> LoweredStep (see the module docstring).  draft_guesses: the guesses per pass a
    top-K draft model keeps its q for (0: none, and always for other samplers)."""
    top_k = top_k_of(sampler)
    if top_k > src.config.vocab_size:
        raise UserError(f"--sampler {sampler}: K is larger than the vocabulary ({src.config.vocab_size} tokens); "
                        f"use topk:{src.config.vocab_size} or fewer")
    return _Lowering(src, sampler, draft_guesses).run()


class _Lowering:
    """The state of one lowering: the declared buffers, which buffer holds
    each graph value, which values already have their int8 copy."""

    def __init__(self, src: StepSource, sampler: str, draft_guesses: int = 0):
        self.src, self.g, self.c, self.sampler = src, src.graph, src.config, sampler
        self.draft_guesses = draft_guesses
        self.m7 = src.kernels == "cortex-m7"
        self.per_channel = src.method == "per-channel"
        self.kept = src.kept_types  # weight name -> GGUF qtype: llama.cpp blocks kept (quant/gguf_keep.py)
        assert not (self.kept and self.per_channel), "GGUF block formats run with group-wise int8 activations"
        self.decls: dict[str, BufferDecl] = {}
        self.value_buf: dict[str, BufferRef] = {}
        self.last_read = {v: i for i, node in enumerate(self.g.nodes) for v in node.inputs}
        self.calls: list[KernelCall] = []
        self.quantized: set[str] = set()
        self.fused_norms = fused_norm_outputs(self.g, src.kernels, src.method)
        self.gate_up = fused_gate_up(self.g, src.kernels, src.method, self.kept)
        self.fused_up = {f.up for f in self.gate_up.values()}
        self.fused_act = {f.act for f in self.gate_up.values()}

    # --- buffers ---------------------------------------------------------
    def new(self, name: str, ctype: str, count: int, kind: str, span: str | None = None,
            per_seq: int = 0) -> BufferRef:
        assert name not in self.decls, f"buffer {name} declared twice"
        self.decls[name] = BufferDecl(name, ctype, count, kind, span, per_seq=per_seq)
        return BufferRef(name, ctype, count)

    def buf(self, name: str) -> BufferRef:
        d = self.decls[name]
        return BufferRef(d.name, d.ctype, d.count)

    def val(self, value: str) -> BufferRef:
        return self.value_buf[value]

    def width(self, value: str) -> int:
        return self.g.values[value][0]

    def out_value(self, node: Node, rows: int | None = None, kind: str = "activation") -> BufferRef:
        r = self.new(node.output, "float", rows if rows is not None else self.width(node.output), kind)
        self.value_buf[node.output] = r
        return r

    def in_place(self, node: Node, i: int) -> BufferRef:
        """rope, add and silu_mul overwrite their first input: the output
        value is that buffer (the C kernels work in place)."""
        src_v = node.inputs[0]
        if self.last_read[src_v] != i:
            raise AssertionError(f"{node.op} -> {node.output}: its input {src_v} is read later, "
                                 "but the kernel works in place")
        self.value_buf[node.output] = self.value_buf[src_v]
        return self.value_buf[src_v]

    def x16(self, value: str) -> BufferRef:
        """A value that exists only as an int16 stream."""
        return self.new(value + ".x16", "uint8_t", x16_stream_bytes(self.width(value), self.src.group_size),
                        "scratch")

    # --- weights ---------------------------------------------------------
    def q4(self, node: Node) -> Q4Ref:
        rows, cols = ((self.c.vocab_size, self.c.dim) if node.op == "embedding" else
                      (self.width(node.output), self.width(node.inputs[0])))
        layout = "q4x4" if self.m7 and not self.per_channel else "q4"
        return Q4Ref(node.inputs[1], rows, cols, self.src.group_size, layout=layout)

    def gguf(self, node: Node) -> GGUFRef | None:
        qtype = self.kept.get(node.inputs[1])
        if qtype is None:
            return None
        rows, cols = ((self.c.vocab_size, self.c.dim) if node.op == "embedding" else
                      (self.width(node.output), self.width(node.inputs[0])))
        return GGUFRef(node.inputs[1], qtype, rows, cols, layout="tiled" if self.m7 else "blocks")  # M7: 4-row tiles

    def eps_name(self, node: Node) -> str:
        """Every norm of a model shares its eps: one named constant in the C (bit-equal, or a literal)."""
        return "TLLM_NORM_EPS" if np.float32(node.attrs["eps"]) == np.float32(self.c.norm_eps) else ""

    def emit(self, args: Kernel, node: Node, label: str | None = None) -> None:
        self.calls.append(KernelCall(args, node.layer, label or node.label))

    # --- nodes -----------------------------------------------------------
    def run(self) -> LoweredStep:
        head_node, head_start = head_start_node(self.g), -1
        for i, node in enumerate(self.g.nodes):
            if i == head_node:
                head_start = len(self.calls)
            self.node(node, i)
        c = self.c
        self.new("tokens", "uint16_t", 0, "tokens", "always", per_seq=1)
        self.new("gen_state", "uint8_t", GEN_STATE_BYTES, "state", "always")
        if self.sampler == "full":  # the full sampler's top-p scratch
            self.new("sample_idx", "uint16_t", c.vocab_size, "sampler", "sampler")
        if self.draft_guesses and top_k_of(self.sampler):  # a top-K draft's q per guess: its set's K entries
            kept = self.draft_guesses * top_k_of(self.sampler)  # K <= the vocabulary (lower_step checks it)
            self.new(GUESS_VALUES, "float", kept, "state", "always")
            self.new(GUESS_IDS, "uint16_t", kept, "state", "always")
        self.new("request", "uint8_t", REQUEST_HEADER_BYTES, "request", "start", per_seq=REQUEST_BYTES_PER_TOKEN)
        assert 0 < head_start < len(self.calls), "the step has a body and a head (final norm, classifier)"
        return LoweredStep(c, tuple(self.calls), tuple(self.decls.values()), self.val(self.g.output),
                           self.src.group_size, self.src.kv_bits, self.src.kernels, self.sampler,
                           head_start=head_start, top_k=top_k_of(self.sampler))

    def node(self, node: Node, i: int) -> None:
        op, out = node.op, node.output
        if op == "embedding":
            self.embedding(node)
        elif op == "rmsnorm":
            self.rmsnorm(node)
        elif op == "linear" and out in self.fused_up:
            return  # computed by the gate's combined matvec
        elif op == "linear" and out in self.gate_up:
            self.gate_up_linear(node)
        elif op == "linear" and self.per_channel:
            self.per_channel_linear(node)
        elif op == "linear":
            self.linear(node)
        elif op == "silu_mul" and out in self.fused_act:
            self.quantized.add(out)
            self.emit(SiluMulPairsX16(self.val(node.inputs[0]), self.width(out), self.src.group_size, self.x16(out)),
                      node)
        elif op == "silu_mul":
            self.emit(SiluMul(self.in_place(node, i), self.val(node.inputs[1]), self.width(out)), node)
        elif op == "rope":
            self.emit(Rope(self.in_place(node, i), int(node.attrs["n_heads"]), int(node.attrs["head_dim"])), node)
        elif op == "attention":
            self.attention(node)
        elif op == "add":
            self.emit(Add(self.in_place(node, i), self.val(node.inputs[1]), self.width(out)), node)
        else:
            raise AssertionError(f"no lowering for op {op}")

    def embedding(self, node: Node) -> None:
        table = self.gguf(node)
        self.emit(EmbedGGUF(table, self.out_value(node)) if table else EmbedQ4(self.q4(node), self.out_value(node)),
                  node)

    def rmsnorm(self, node: Node) -> None:
        x, w, eps = self.val(node.inputs[0]), VectorRef(node.inputs[1], self.c.dim), np.float32(node.attrs["eps"])
        if node.output in self.fused_norms:
            self.quantized.add(node.output)
            self.emit(RmsNormX16(x, w, self.c.dim, eps, self.src.group_size, self.x16(node.output),
                                 self.eps_name(node)), node)
        else:
            self.emit(RmsNorm(x, w, self.c.dim, eps, self.out_value(node), self.eps_name(node)), node)

    def gate_up_linear(self, node: Node) -> None:
        pair, src_v = self.gate_up[node.output], node.inputs[0]
        if src_v not in self.quantized:
            self.quantized.add(src_v)
            self.emit(QuantizeX16(self.val(src_v), self.width(src_v), self.src.group_size, self.x16(src_v)),
                      node, label=f"quantize {src_v}")
        hidden, cols = self.width(pair.gate), self.width(src_v)
        gu = self.new(pair.gate + ".gu", "float", 2 * hidden, "activation")
        self.value_buf[node.output] = gu
        qtype = self.kept.get(pair.w_gate)
        x16 = self.buf(src_v + ".x16")
        if qtype:  # the kept blocks of both, interleaved and tiled (lower/fusion.py)
            mv = MatvecGGUFx4(GGUFRef(pair.combined, qtype, 2 * hidden, cols, layout="tiled"), x16, None, gu)
        else:
            mv = MatvecQ4x4(Q4Ref(pair.combined, 2 * hidden, cols, self.src.group_size, layout="q4x4"), x16, None, gu)
        self.emit(mv, node, label="ffn.w_gate+w_up")

    def per_channel_linear(self, node: Node) -> None:
        src_v, st = node.inputs[0], self.src.static.get(node.output)
        if src_v not in self.quantized:
            self.quantized.add(src_v)
            inv = exact.inverse_scale(st.in_scale) if st is not None else np.float32(1)  # plan only: no scales
            self.emit(QuantizeStaticS8(self.val(src_v), self.width(src_v), inv,
                                       self.new(src_v + ".s8", "int8_t", self.width(src_v), "scratch")),
                      node, label=f"quantize {src_v}")
        fc = FcS4PcRef(node.output, self.q4(node), out_scale=st.out_scale if st is not None else np.float32(1))
        s8out = self.new(node.output + ".s8out", "int8_t", self.width(node.output), "scratch")
        self.emit(FcS4PerChannel(fc, self.buf(src_v + ".s8"), s8out, self.linear_out(node)), node)

    def linear_out(self, node: Node) -> BufferRef:
        """A linear's output; the classifier's is the logits (read by the
        sampler after the step, or one argmax chunk in a greedy build)."""
        if node.output == self.g.output:
            return self.out_value(node, logits_rows(self.c, self.sampler), "logits")
        return self.out_value(node)

    def linear(self, node: Node) -> None:
        src_v, group = node.inputs[0], self.src.group_size
        n = self.width(src_v)
        if src_v not in self.quantized:  # one int8 copy shared by every linear reading src
            self.quantized.add(src_v)
            q = (QuantizeX16(self.val(src_v), n, group, self.x16(src_v)) if self.m7 else
                 QuantizeI8(self.val(src_v), n, group, self.new(src_v + ".q8", "int8_t", n, "scratch"),
                            self.new(src_v + ".qs", "float", n_groups(n, group), "scratch")))
            self.emit(q, node, label=f"quantize {src_v}")
        bias = VectorRef(node.inputs[2], self.width(node.output)) if len(node.inputs) > 2 else None
        out = self.linear_out(node)
        kept_w = self.gguf(node)
        if self.m7:
            x16 = self.buf(src_v + ".x16")
            mv = MatvecGGUFx4(kept_w, x16, bias, out) if kept_w else MatvecQ4x4(self.q4(node), x16, bias, out)
        elif kept_w:
            mv = MatvecGGUF(kept_w, self.buf(src_v + ".q8"), self.buf(src_v + ".qs"), bias, out)
        else:
            mv = MatvecQ4(self.q4(node), self.buf(src_v + ".q8"), self.buf(src_v + ".qs"), bias, out)
        if node.output == self.g.output and self.sampler == "greedy":
            mv = ArgmaxClassifier(mv, logits_rows(self.c, self.sampler))
        elif node.output == self.g.output and top_k_of(self.sampler):
            k = top_k_of(self.sampler)
            mv = TopKClassifier(mv, logits_rows(self.c, self.sampler), k, self.new("topk.value", "float", k, "topk"),
                                self.new("topk.id", "uint16_t", k, "topk"))
        self.emit(mv, node)

    def attention(self, node: Node) -> None:
        layer, ins = int(node.attrs["layer"]), node.inputs
        lay, bits = f"l{layer}", self.src.kv_bits
        halves = dict(zip(("k", "v"), kv_layouts(self.c, bits)))  # K and V laid out apart (8:4 differs)
        caches = [self.new(f"{lay}.{part}_cache", kv.ctype, 0, "kv", "always", per_seq=kv.bytes_per_pos)
                  for part, kv in halves.items()]
        scales = [self.new(f"{lay}.{part}_scale", "float", 0, "kv", "always", per_seq=kv.scales_per_pos)
                  for part, kv in halves.items()]
        # not ".att.q8": the output value "l<i>.att" has that quantized copy
        q8 = self.new(lay + ".att.query_i8", "int8_t", self.c.head_dim, "scratch")
        scores = self.new(lay + ".att.scores", "float", 0, "scratch", per_seq=1)
        self.emit(Attention(layer, self.val(ins[0]), self.val(ins[1]), self.val(ins[2]), caches[0], caches[1],
                            scales[0], scales[1], q8, scores, self.out_value(node), kv_bits=bits,
                            group=kv4_group_of(self.c, bits), rotate=bits == 4 and self.src.kv_rotate == "hadamard",
                            **self.kv_centers(layer)), node)

    def kv_centers(self, layer: int) -> dict:
        """A centred cache's centre vectors (quant/kv_center.py), read by the kernel through the KV table."""
        if not (self.src.kv_center and self.src.kv_bits == 4):
            return {}
        dim = self.c.n_kv_heads * self.c.head_dim
        return {"k_center": VectorRef(center_name(layer, K_CENTER), dim),
                "v_center": VectorRef(center_name(layer, V_CENTER), dim)}


def kv4_group_of(config, bits: KVBits) -> int:
    """The int4 elements per scale of a cache with an int4 half (its V, or both), else 0."""
    return kv_layout(config, 4).group if bits.v == 4 else 0


def with_kv_bits(step: LoweredStep, bits) -> LoweredStep:
    """The same step with another KV cache precision (the attention calls and
    the caches' declarations): what `--max-seq auto`'s note and the fixes of
    an over-budget plan compare, without lowering the graph again."""
    bits = parse_kv_bits(bits)
    if bits == step.kv_bits:
        return step
    halves = dict(zip(("k", "v"), kv_layouts(step.config, bits)))
    decls = []
    for d in step.decls:
        # "l3.k_cache" -> ("k", "cache")
        half, part = d.name.rsplit(".", 1)[-1].split("_", 1) if d.kind == "kv" else ("", "")
        if part:
            kv = halves[half]
            d = dataclasses.replace(d, ctype=kv.ctype if part == "cache" else "float",
                                    per_seq=kv.bytes_per_pos if part == "cache" else kv.scales_per_pos)
        decls.append(d)
    calls = []
    for call in step.calls:
        a = call.args
        if isinstance(a, Attention):
            caches = {f"{h}_cache": dataclasses.replace(getattr(a, f"{h}_cache"), ctype=halves[h].ctype)
                      for h in ("k", "v")}
            a = dataclasses.replace(a, kv_bits=bits, group=kv4_group_of(step.config, bits),
                                    rotate=a.rotate and bits == 4, **caches)
        calls.append(dataclasses.replace(call, args=a))
    return dataclasses.replace(step, calls=tuple(calls), decls=tuple(decls), kv_bits=bits)
