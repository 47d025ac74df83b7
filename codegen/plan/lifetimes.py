"""Buffers and live ranges of one decode step plus the generation loop,
derived from the lowered step's kernel calls (lower.lower_step declares
every buffer; nothing here re-decides what lowering decided).

Time is the index of a kernel call (0..N-1); the sampler runs at time N.
Persistent buffers (KV cache, token ids, generation state) live over the
whole range [0, N].  The kernel conventions lowering follows:

* `linear` reads its input as int8 groups: buffer "<value>.q8" (+ ".qs"
  scales), made once before the first linear that reads <value> and shared
  by all of them (q/k/v share one, gate/up share one); with the Cortex-M7
  kernels one "<value>.x16" stream instead, written by the RMSNorm itself
  when only linears read its output, and gate/up computed in one pass
  into "<gate>.gu" with SiLU x up written as a stream (fusion.py);
* `rope`, `add` and `silu_mul` work in place on their first input when that
  input is not read afterwards: the output value shares its buffer;
* `attention` needs scratch "<layer>.att.query_i8" and "<layer>.att.scores";
* the sampler reads "logits" and needs "sample_idx" [vocab] uint16; a
  greedy-only build (sampler "greedy") has neither: the classifier runs
  ARGMAX_CHUNK_ROWS rows at a time into a "logits" buffer of that size and
  keeps the running argmax (tllm_argmax_q4 / tllm_argmax_q4x4); a
  "topk:K" build runs the same chunks into a running K-entry set,
  "topk.value" [K] float and "topk.id" [K] uint16 (kind "topk", live from
  the classifier to the sampler), and has no "sample_idx" either;
* a request arriving over the UART lands in "request" before the first step.
"""
from __future__ import annotations

from dataclasses import dataclass


ALIGN = 16  # also lets the 4-row M7 matvec write whole tiles: float outputs round up to 4
GEN_STATE_BYTES = 64  # sizeof(tllm_gen_state), asserted in the generated C
CTYPE_BYTES = {"float": 4, "int8_t": 1, "uint16_t": 2, "uint8_t": 1}


ARGMAX_CHUNK_ROWS = 64  # classifier rows per chunk in a greedy-only build (a multiple of the q4x4 tile)


def logits_rows(c, sampler: str) -> int:
    """Rows of the logits buffer: the vocabulary, or one classifier chunk
    (greedy and topk:K builds)."""
    from ..reference.sampler import top_k_of

    chunked = sampler == "greedy" or top_k_of(sampler) > 0
    return min(c.vocab_size, ARGMAX_CHUNK_ROWS) if chunked else c.vocab_size


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
    kind: str  # activation | scratch | kv | state | tokens | logits | sampler | topk
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
    n_steps: int  # kernel calls of one step; the sampler runs at time n_steps

    def by_name(self, name: str) -> BufferRequest:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


def lifetimes_of(step) -> Lifetimes:
    """Buffers and live ranges of a lowered step (lower.LoweredStep): time is
    the index of a kernel call, so a buffer is live from the first call that
    names it to the last; a call's inputs and outputs are live at once, so
    only a kernel's own in-place contract (the same buffer passed twice) ever
    shares memory within a call.  Declared spans add what the calls do not
    show: the whole generation, the sampler after the last call, or the
    request parsed before the first."""
    from ..lower import buffers_of  # lowering is the analysis the plan starts from

    end = len(step.calls)
    spans: dict[str, list[int]] = {}
    for i, call in enumerate(step.calls):
        for ref in buffers_of(call):
            span = spans.setdefault(ref.name, [i, i])
            span[1] = i
    fixed = {"always": (0, end), "sampler": (end, end), "start": (0, 0)}
    requests = []
    for d in step.decls:
        if d.span is not None:
            first, last = fixed[d.span]
        else:
            if d.name not in spans:
                raise AssertionError(f"buffer {d.name} is declared but no call uses it")
            first, last = spans[d.name]
            if d.kind in ("logits", "topk"):
                last = end  # read by the sampler
        requests.append(BufferRequest(d.name, d.ctype, d.count, first, last, d.kind,
                                      getattr(d, "align", ALIGN), getattr(d, "placement", "")))
    return Lifetimes(buffers=tuple(requests), n_steps=end)


def find_lifetimes(shape, max_seq: int) -> Lifetimes:
    """shape: plan.memory.GraphShape (the graph and the options that decide
    the buffers; no weights need be quantized for `tinyllm-gen plan`)."""
    from ..lower import lowered_step

    return lifetimes_of(lowered_step(shape, max_seq, shape.sampler, shape.stream, shape.prefill_batch))
