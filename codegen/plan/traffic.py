"""What one token of a build reads from its weights and computes with
them, from the lowered step's own calls: the bytes by role (the layers'
matrices, the classifier, the embedding row, the float vectors) and by
layout, and the timing model's Workload priced with each layout's own
measured kernel rate (timing.KERNEL_RATES).  Pinned entries (copied to
SRAM at boot, lower/stream.py) cost compute but no flash bytes."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from ..abi import MAX_BATCH
from ..kernels import EmbedGGUF, EmbedQ4, StreamedEmbed, WeightRead
from ..kernels.refs import VectorRef, refs_of
from ..lower.records import KernelCall, LoweredStep, StreamPlan
from ..quant.kv import kv_bytes_per_token
from ..timing import MEASURED_OTHER_PER_MAC, KvRead, Workload, kernel_rate

ROLES = ("layers", "classifier", "embedding", "vectors")
EMBEDDINGS = (EmbedQ4, EmbedGGUF, StreamedEmbed)


@dataclass(frozen=True)
class Read:
    role: str
    weight: WeightRead
    pinned: bool


@dataclass(frozen=True)
class Traffic:
    reads: tuple[Read, ...]
    vector_bytes: int  # norm weights, biases and one RoPE row: read in place (or pinned)

    def flash_bytes(self, role: str | None = None) -> int:
        """Bytes one decoded token reads from the weights' storage (pinned entries excluded)."""
        if role == "vectors":
            return self.vector_bytes
        total = sum(r.weight.nbytes for r in self.reads if not r.pinned and role in (None, r.role))
        return total + (self.vector_bytes if role is None else 0)

    def macs(self, role: str | None = None) -> int:
        return sum(r.weight.macs for r in self.reads if role in (None, r.role))

    def workload(self, name: str = "this build") -> Workload:
        """The timing model's token: each matrix's MACs at its layout's rate."""
        mv = round(sum(r.weight.macs * kernel_rate(r.weight.layout) for r in self.reads))
        head = round(sum(r.weight.macs * kernel_rate(r.weight.layout) for r in self.reads if r.role == "classifier"))
        body = [r for r in self.reads if r.role == "layers"]
        batched = tuple((p, round(sum(r.weight.macs * kernel_rate(r.weight.layout, p) for r in body)))
                        for p in range(1, MAX_BATCH + 1))
        cls = [r for r in self.reads if r.role == "classifier"]
        batched_head = tuple((p, round(sum(r.weight.macs * kernel_rate(r.weight.layout, p) for r in cls)))
                             for p in range(1, MAX_BATCH + 1))
        streams = sum(1 for r in self.reads if not r.pinned and r.weight.macs)
        layouts = sorted({r.weight.layout for r in self.reads})
        return Workload(name, self.flash_bytes(), mv, round(self.macs() * MEASURED_OTHER_PER_MAC), streams,
                        f"the build's layouts ({', '.join(layouts)}) at their measured rates (timing.KERNEL_RATES)",
                        head_weight_bytes=self.flash_bytes("classifier"), head_matvec_instructions=head,
                        batched_body_matvec=batched, batched_head_matvec=batched_head)

    def json(self) -> dict:
        by_layout: dict[str, int] = defaultdict(int)
        for r in self.reads:
            if not r.pinned:
                by_layout[r.weight.layout] += r.weight.nbytes
        return {"flash_bytes_per_token": self.flash_bytes(), "macs_per_token": self.macs(),
                "bytes_by_role": {role: self.flash_bytes(role) for role in ROLES},
                "macs_by_role": {role: self.macs(role) for role in ROLES[:3]},
                "streams": sum(1 for r in self.reads if not r.pinned and r.weight.macs),
                "bytes_by_layout": dict(sorted(by_layout.items())),
                "pinned_bytes": sum(r.weight.nbytes for r in self.reads if r.pinned)}


def step_traffic(step: LoweredStep) -> Traffic:
    return traffic_of(step.calls, step.head_start, step.stream, step.config.head_dim)


def traffic_of(calls: Sequence[KernelCall], head_start: int, stream: StreamPlan | None, head_dim: int) -> Traffic:
    """A step's (or its bound Program's) calls: calls[head_start:] are the head."""
    pinned = {name for name, _ in stream.pinned} if stream is not None else set()
    reads, vectors = [], {}
    for i, call in enumerate(calls):
        a = call.args
        role = "embedding" if isinstance(a, EMBEDDINGS) else "classifier" if i >= head_start else "layers"
        for w in a.weight_reads():
            reads.append(Read(role, w, w.name in pinned))
        for v in refs_of(a, VectorRef):
            if v.name not in pinned:
                vectors[v.name] = 4 * v.count
    rope_row = 2 * 4 * (head_dim // 2)  # this position's cos and sin
    rope = 0 if {"rope.cos", "rope.sin"} <= pinned else rope_row
    return Traffic(tuple(reads), sum(vectors.values()) + rope)


def kv_read(plan, config) -> KvRead | None:
    """The KV cache attention reads at the last position, when the plan put it in external RAM (else None:
    SRAM reads are in the instruction counts' cycles already)."""
    if not plan.external_bytes:
        return None
    return KvRead(kv_bytes_per_token(config, plan.kv_bits), plan.max_seq, "sdram")
