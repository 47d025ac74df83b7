"""Buffers and live ranges of one lowered decode step plus the generation
loop, derived from its kernel calls (lower/step.py declares every buffer;
nothing here re-decides what lowering decided).

Time is the index of a kernel call (0..N-1); the sampler runs at time N.
Persistent buffers (KV cache, token ids, generation state) live over the
whole range [0, N].  A call's inputs and outputs are live at once, so only
a kernel's own in-place contract (the same buffer passed twice) ever shares
memory within a call.  Declared spans add what the calls do not show: the
whole generation, the sampler after the last call, or the request parsed
before the first.

Sizes grow with the context for some buffers (BufferDecl.per_seq): the live
ranges do not, so `lifetimes_of` runs once per step and `Lifetimes.at`
gives the concrete requests at each context the searches try."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from ..kernels.refs import BufferRef, refs_of
from ..lower.records import LoweredStep

ALIGN = 16  # also lets the 4-row M7 matvec write whole tiles: float outputs round up to 4
CTYPE_BYTES = {"float": 4, "int8_t": 1, "uint16_t": 2, "uint8_t": 1, "int32_t": 4}


def align_up(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def placement_of(kind: str) -> str:
    """Where a buffer wants to live.  Touched every layer, small: "hot" (the
    TCM first).  Big and long-lived, streamed once per token: "bulk" (the
    large AXI SRAM first).  "dma": buffers the weight stream's copy engine
    fills (lower/stream.py declares them so)."""
    return "bulk" if kind in ("kv", "tokens") else "hot"


@dataclass(frozen=True)
class BufferRequest:
    name: str
    ctype: str  # element type in C
    count: int  # elements (plus per_seq x max_seq until `at` fixes the context)
    first: int  # first time step it is live
    last: int  # last time step it is live (inclusive)
    kind: str  # activation | scratch | kv | state | tokens | logits | sampler | topk | verify | request | stream | pinned
    align: int = ALIGN
    placement: str = ""  # hot | bulk | dma; "" = by kind (placement_of)
    per_seq: int = 0  # elements per token of context

    @functools.cached_property  # asked for in every placement search: computed once per request
    def size(self) -> int:
        assert self.per_seq == 0, f"{self.name}: size asked before the context is fixed"
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

    def at(self, max_seq: int) -> "Lifetimes":
        """The requests at this context: every count fixed."""
        return Lifetimes(tuple(dataclasses.replace(b, count=b.count + b.per_seq * max_seq, per_seq=0)
                               for b in self.buffers), self.n_steps)


def lifetimes_of(step: LoweredStep) -> Lifetimes:
    """Buffers and live ranges of a lowered step (see the module docstring)."""
    end = len(step.calls)
    spans: dict[str, list[int]] = {}
    for i, call in enumerate(step.calls):
        for ref in refs_of(call.args, BufferRef):
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
            if d.kind in ("logits", "topk", "verify"):
                last = end  # read by the sampler (a verification pass's per-position results: by the engine)
        requests.append(BufferRequest(d.name, d.ctype, d.count, first, last, d.kind, d.align, d.placement,
                                      d.per_seq))
    return Lifetimes(buffers=tuple(requests), n_steps=end)
