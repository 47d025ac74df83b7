"""Binding: LoweredStep + MemoryPlan + WeightsBlob -> Program.

The transform after analysis (plan/lifetimes.py) and algorithm
(plan/placer.py): every buffer reference gets its planned region and
offset and its element count at the planned context, every weight
reference its offset in the blob.  The emitter only prints what is here.
`verify_program` checks the result at this boundary."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .kernels.refs import BufferRef, FcS4PcRef, GGUFRef, Q4Ref, VectorRef, refs_of
from .ir import ModelConfig
from .lower.blob import WeightsBlob
from .lower.records import KernelCall, LoweredStep, PrefillPlan, SpeculatePlan, StreamPlan, planned_count
from .plan.memory import MemoryPlan
from .quant.formats import QuantizedGraph
from .quant.kv import KVBits
from .reference import exact
from .verify import GraphError


@dataclass(frozen=True)
class Program:
    """The bound decode step: what the emitter prints."""

    config: ModelConfig
    calls: tuple[KernelCall, ...]
    plan: MemoryPlan
    blob: WeightsBlob
    logits: BufferRef
    rope_cos: VectorRef
    rope_sin: VectorRef
    attention_scale: np.float32
    group_size: int
    kv_bits: KVBits  # quant/kv.py
    kernels: str
    sampler: str
    head_start: int  # calls[head_start:] are the head (LoweredStep.head_start)
    top_k: int = 0  # --sampler topk:K: the classifier feeds a K-entry set, no logits vector
    stream: StreamPlan | None = None  # the stream pass's decisions; None: weights read in place
    prefill: PrefillPlan | None = None  # the prefill pass's decisions
    speculate: SpeculatePlan | None = None  # the verification pass (speculative decoding); None: plain decoding

    @property
    def greedy(self) -> bool:
        return self.sampler == "greedy"

    @property
    def prefill_batch(self) -> int:
        return self.prefill.batch if self.prefill is not None else 1

    @property
    def body_calls(self) -> tuple[KernelCall, ...]:
        return self.calls[:self.head_start]

    @property
    def head_calls(self) -> tuple[KernelCall, ...]:
        """The final norm and the classifier: what a step without logits (a
        prompt token before the last) skips."""
        return self.calls[self.head_start:]

    @property
    def max_seq(self) -> int:
        return self.plan.max_seq

    def planned_count(self, name: str, count: int) -> int:
        return planned_count(self.prefill, self.speculate, name, count)

    def buffers(self) -> list[BufferRef]:
        return [BufferRef(p.name, p.request.ctype, p.request.count, p.offset, p.region) for p in self.plan.buffers]


def bind(step: LoweredStep, plan: MemoryPlan, blob: WeightsBlob, qg: QuantizedGraph) -> Program:
    """Write the plan's offsets and the blob's offsets into the step's calls."""
    planned = {p.name: p for p in plan.buffers}
    missing = sorted(set(d.name for d in step.decls) ^ set(planned))
    if missing:
        raise AssertionError(f"the plan and the lowered step disagree on buffers: {missing[:5]}")
    at_seq = {d.name: d.elements(plan.max_seq) for d in step.decls if d.per_seq}  # grows with the context

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
            count = at_seq.get(obj.name, obj.count)
            assert (p.request.ctype, p.request.count) == (obj.ctype, step.planned_count(obj.name, count)), \
                obj.name  # a P-token buffer holds P times the one-token count
            return BufferRef(obj.name, obj.ctype, count, p.offset, p.region)
        if isinstance(obj, Q4Ref):
            return q4ref(obj)
        if isinstance(obj, GGUFRef):
            return dataclasses.replace(obj, offset=blob.entry(obj.name, obj.blob_kind).offset)
        if isinstance(obj, VectorRef):
            e = blob.entry(obj.name, "f32")
            return VectorRef(obj.name, e.nbytes // 4, e.offset)
        if isinstance(obj, FcS4PcRef):
            return FcS4PcRef(obj.name, q4ref(obj.weight), blob.entry(obj.name, "s4pc.bias").offset,
                             blob.entry(obj.name, "s4pc.multipliers").offset,
                             blob.entry(obj.name, "s4pc.shifts").offset, obj.out_scale)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.replace(obj, **{f.name: transform(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        return obj

    calls = tuple(KernelCall(transform(call.args), call.layer, call.label) for call in step.calls)
    cos, sin = blob.entry("rope.cos", "f32"), blob.entry("rope.sin", "f32")
    c = step.config
    return Program(
        config=c, calls=calls, plan=plan, blob=blob, logits=transform(step.logits),
        rope_cos=VectorRef("rope.cos", cos.nbytes // 4, cos.offset), rope_sin=VectorRef("rope.sin", sin.nbytes // 4, sin.offset),
        attention_scale=exact.attention_scale(c.head_dim), group_size=step.group_size, kv_bits=step.kv_bits,
        kernels=step.kernels, sampler=step.sampler, head_start=step.head_start, top_k=step.top_k,
        stream=step.stream, prefill=step.prefill, speculate=step.speculate,
    )


def verify_program(program: Program) -> Program:
    """A Program's invariants, after binding: every buffer a call names is a
    planned buffer of that type and size inside its region's arena, and every
    constant lies inside the weights blob."""
    planned = {p.name: p for p in program.plan.buffers}
    arena = {r.name: r.arena_bytes for r in program.plan.regions}
    blob_bytes = len(program.blob.data)
    for i, call in enumerate(program.calls):
        for ref in refs_of(call.args, BufferRef):
            p = planned.get(ref.name)
            if p is None or (p.offset, p.region, p.request.ctype, p.request.count) != \
                    (ref.offset, ref.region, ref.ctype, program.planned_count(ref.name, ref.count)):
                raise GraphError(f"call {i} ({call.label}): buffer {ref.name} is not the planned one")
            if p.offset + p.size > arena.get(p.region, 0):
                raise GraphError(f"call {i} ({call.label}): buffer {ref.name} ends past its arena")
        for w in refs_of(call.args, (Q4Ref, VectorRef, GGUFRef)):
            start = w.packed_offset if isinstance(w, Q4Ref) else w.offset
            if not 0 < start < blob_bytes:
                raise GraphError(f"call {i} ({call.label}): {w.name} at {start} is outside the weights blob")
    return program
