"""Buffers and live ranges of one decode step plus the generation loop.

Time is the index of a graph node (0..N-1); the sampler runs at time N.
Persistent buffers (KV cache, token ids, generation state) live over the
whole range [0, N].  Kernel conventions that create buffers are stated here,
and lower.py follows the same names:

* `linear` reads its input as int8 groups: buffer "<value>.q8" (+ ".qs"
  scales), made once before the first linear that reads <value> and shared
  by all of them (q/k/v share one, gate/up share one); with the Cortex-M7
  kernels one "<value>.x16" stream instead, written by the RMSNorm itself
  when only linears read its output, and gate/up computed in one pass
  into "<gate>.gu" with SiLU x up written as a stream (fusion.py);
* `rope`, `add` and `silu_mul` work in place on their first input when that
  input is not read afterwards: the output value shares its buffer;
* `attention` needs scratch "<layer>.att.q8" and "<layer>.att.scores";
* the sampler reads "logits" and needs "sample_idx" [vocab] uint16; a
  greedy-only build (sampler "greedy") has neither: the classifier runs
  ARGMAX_CHUNK_ROWS rows at a time into a "logits" buffer of that size and
  keeps the running argmax (tllm_argmax_q4 / tllm_argmax_q4x4);
* a request arriving over the UART lands in "request" before the first step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..ir import STEP_INPUTS
from ..fusion import fused_gate_up, fused_norm_outputs
from ..quant.formats import QuantizedGraph, n_groups, x16_stream_bytes
from ..quant.kv import kv_layout

ALIGN = 16  # also lets the 4-row M7 matvec write whole tiles: float outputs round up to 4
GEN_STATE_BYTES = 64  # sizeof(tllm_gen_state), asserted in the generated C
INPLACE_OPS = ("rope", "add", "silu_mul")
CTYPE_BYTES = {"float": 4, "int8_t": 1, "uint16_t": 2, "uint8_t": 1}


def activation_scratch(kernels: str) -> tuple[str, ...]:
    """Buffers a linear's input is quantized into, by kernel set: int8
    values + float scales (portable), or one int16 stream (cortex-m7)."""
    return (".x16",) if kernels == "cortex-m7" else (".q8", ".qs")


ARGMAX_CHUNK_ROWS = 64  # classifier rows per chunk in a greedy-only build (a multiple of the q4x4 tile)


def logits_rows(c, sampler: str) -> int:
    """Rows of the logits buffer: the vocabulary, or one argmax chunk."""
    return min(c.vocab_size, ARGMAX_CHUNK_ROWS) if sampler == "greedy" else c.vocab_size


def request_bytes(max_seq: int) -> int:
    """firmware/tllm_request.h: a 40-byte head and up to max_seq uint16 ids."""
    return 40 + 2 * max_seq


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def placement_of(kind: str) -> str:
    """Where a buffer wants to live.  Touched every layer, small: "hot" (the
    TCM first).  Big and long-lived, streamed once per token: "bulk" (the
    large AXI SRAM first).  "dma" is for buffers a DMA controller fills or
    drains (none in today's graph; the planner honours it when asked)."""
    return "bulk" if kind in ("kv", "tokens") else "hot"


@dataclass(frozen=True)
class BufferRequest:
    name: str
    ctype: str  # element type in C
    count: int  # elements
    first: int  # first time step it is live
    last: int  # last time step it is live (inclusive)
    kind: str  # activation | scratch | kv | state | tokens | logits | sampler
    align: int = ALIGN
    placement: str = ""  # hot | bulk | dma; "" = by kind (placement_of)

    @property
    def size(self) -> int:
        return align_up(self.count * CTYPE_BYTES[self.ctype], self.align)

    @property
    def place_class(self) -> str:
        return self.placement or placement_of(self.kind)

    def overlaps_in_time(self, other: "BufferRequest") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Lifetimes:
    buffers: tuple[BufferRequest, ...]
    value_buffer: Mapping[str, str]  # graph value -> buffer holding it
    n_steps: int  # graph nodes; the sampler runs at time n_steps

    def by_name(self, name: str) -> BufferRequest:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


def find_lifetimes(qg: QuantizedGraph, max_seq: int) -> Lifetimes:
    """qg needs only .graph, .config, .group_size and .kv_bits: a
    QuantizedGraph, or plan.memory.GraphShape when no weights are quantized."""
    sampler = getattr(qg, "sampler", "full")
    g, c = qg.graph, qg.config
    nodes = g.nodes
    end = len(nodes)  # sampler time
    last_read: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for v in node.inputs:
            last_read[v] = i
    last_read[g.output] = end

    value_buffer: dict[str, str] = {}
    spans: dict[str, list[int]] = {}  # buffer -> [first, last]
    counts: dict[str, tuple[str, int, str]] = {}  # buffer -> (ctype, count, kind)

    def live(buf: str, t: int) -> None:
        span = spans.setdefault(buf, [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)

    quantized_inputs: dict[str, str] = {}
    fused = fused_norm_outputs(qg)
    gate_up = fused_gate_up(qg)
    fused_acts = {f.act for f in gate_up.values()}
    up_of = {f.up: f for f in gate_up.values()}

    def stream(value: str, t: int) -> None:  # a value that exists only as an int16 stream
        counts[value + ".x16"] = ("uint8_t", x16_stream_bytes(g.values[value][0], qg.group_size), "scratch")
        quantized_inputs[value] = value
        live(value + ".x16", t)

    for i, node in enumerate(nodes):
        for v in node.inputs:
            if v in value_buffer:
                live(value_buffer[v], i)
        if node.output in fused or node.output in fused_acts:  # RMSNorm / SiLU x up writing the stream
            stream(node.output, i)
            continue
        if node.output in gate_up or node.output in up_of:  # one matvec pass fills both halves
            src = node.inputs[0]
            if src not in quantized_inputs:
                stream(src, i)
            live(src + ".x16", i)
            pair = gate_up.get(node.output) or up_of[node.output]
            buf = pair.gate + ".gu"
            counts[buf] = ("float", 2 * g.values[pair.gate][0], "activation")
            value_buffer[node.output] = buf
            live(buf, i)
            continue
        if node.op == "linear":
            src = node.inputs[0]
            per_channel = getattr(qg, "method", "rtn") == "per-channel"
            suffixes = (".s8",) if per_channel else activation_scratch(getattr(qg, "kernels", "portable"))
            if src not in quantized_inputs:
                quantized_inputs[src] = src
                n = g.values[src][0]
                if per_channel:  # static-scale int8 copy (quant/per_channel.py)
                    counts[src + ".s8"] = ("int8_t", n, "scratch")
                elif suffixes == (".x16",):  # one interleaved int16 stream (quant/formats.py "q4x4")
                    counts[src + ".x16"] = ("uint8_t", x16_stream_bytes(n, qg.group_size), "scratch")
                else:
                    counts[src + ".q8"] = ("int8_t", n, "scratch")
                    counts[src + ".qs"] = ("float", n_groups(n, qg.group_size), "scratch")
            for suffix in suffixes:
                live(src + suffix, i)
            if per_channel:  # the requantized int8 result, dequantized right away
                counts[node.output + ".s8out"] = ("int8_t", g.values[node.output][0], "scratch")
                live(node.output + ".s8out", i)
        if node.op == "attention":
            lay = f"l{node.attrs['layer']}"
            counts[lay + ".att.q8"] = ("int8_t", c.head_dim, "scratch")
            counts[lay + ".att.scores"] = ("float", max_seq, "scratch")
            live(lay + ".att.q8", i)
            live(lay + ".att.scores", i)
        src = node.inputs[0]
        if node.op in INPLACE_OPS and src in value_buffer and last_read[src] == i:
            buf = value_buffer[src]
        else:
            buf = node.output
            kind = "logits" if node.output == g.output else "activation"
            rows = logits_rows(c, sampler) if node.output == g.output else g.values[node.output][0]
            counts[buf] = ("float", rows, kind)
        value_buffer[node.output] = buf
        live(buf, i)
        if node.output == g.output:
            live(buf, end)

    requests = [BufferRequest(name, counts[name][0], counts[name][1], s[0], s[1], counts[name][2])
                for name, s in spans.items()]
    kv = kv_layout(c, qg.kv_bits)
    for layer in range(c.n_layers):
        for part in ("k", "v"):
            requests.append(BufferRequest(f"l{layer}.{part}_cache", kv.ctype, max_seq * kv.bytes_per_pos, 0, end, "kv"))
            requests.append(BufferRequest(f"l{layer}.{part}_scale", "float", max_seq * kv.scales_per_pos, 0, end, "kv"))
    requests.append(BufferRequest("tokens", "uint16_t", max_seq, 0, end, "tokens"))
    requests.append(BufferRequest("gen_state", "uint8_t", GEN_STATE_BYTES, 0, end, "state"))
    if sampler != "greedy":
        requests.append(BufferRequest("sample_idx", "uint16_t", c.vocab_size, end, end, "sampler"))
    # A request received over the UART is parsed (prompt ids copied into
    # "tokens") before the first step writes anything: live at time 0 only.
    requests.append(BufferRequest("request", "uint8_t", request_bytes(max_seq), 0, 0, "request"))
    for v in STEP_INPUTS:
        value_buffer.pop(v, None)
    return Lifetimes(buffers=tuple(requests), value_buffer=value_buffer, n_steps=end)
