"""The memory plan: placed buffers checked against a RAM budget."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..quant.formats import QuantizedGraph
from .lifetimes import BufferRequest, Lifetimes, find_lifetimes
from .placer import arena_bytes, overlapping_pairs, peak_live_bytes, place

CANARY_BYTES = 16  # guard words after the arena, checked after each generation
DEFAULT_STACK_BYTES = 4096
# .data/.bss of the runtime outside the arena (board driver state, newlib
# bits); the link itself enforces the real total, this keeps the plan honest.
RUNTIME_STATIC_BYTES = 1024
MIN_SEQ = 8


@dataclass(frozen=True)
class PlacedBuffer:
    request: BufferRequest
    offset: int

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def size(self) -> int:
        return self.request.size


@dataclass(frozen=True)
class MemoryPlan:
    buffers: tuple[PlacedBuffer, ...]
    lifetimes: Lifetimes
    max_seq: int
    arena_bytes: int  # planned buffers + canary
    lower_bound_bytes: int  # peak live bytes (+ canary): no placement can beat it
    peak_time: int
    stack_bytes: int
    runtime_static_bytes: int
    budget_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.arena_bytes + self.stack_bytes + self.runtime_static_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes

    @property
    def kv_cache_bytes(self) -> int:
        return sum(b.size for b in self.buffers if b.request.kind == "kv")

    def buffer(self, name: str) -> PlacedBuffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


def _plan(qg: QuantizedGraph, max_seq: int, budget: int, stack: int) -> MemoryPlan:
    lt = find_lifetimes(qg, max_seq)
    offsets = place(lt.buffers)
    bad = overlapping_pairs(lt.buffers, offsets)
    if bad:  # the placer's invariant; a failure here is a bug, not user error
        raise AssertionError(f"planner overlapped live buffers: {bad[:3]}")
    peak, at = peak_live_bytes(lt.buffers)
    placed = tuple(sorted((PlacedBuffer(b, offsets[b.name]) for b in lt.buffers), key=lambda p: (p.offset, p.name)))
    return MemoryPlan(
        buffers=placed, lifetimes=lt, max_seq=max_seq,
        arena_bytes=arena_bytes(lt.buffers, offsets) + CANARY_BYTES,
        lower_bound_bytes=peak + CANARY_BYTES, peak_time=at,
        stack_bytes=stack, runtime_static_bytes=RUNTIME_STATIC_BYTES, budget_bytes=budget,
    )


def largest_fitting_seq(qg: QuantizedGraph, budget: int, stack: int, upper: int) -> int | None:
    lo, hi = MIN_SEQ, upper
    if not _plan(qg, lo, budget, stack).fits:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _plan(qg, mid, budget, stack).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_memory(qg: QuantizedGraph, max_seq: int, budget_bytes: int,
                stack_bytes: int = DEFAULT_STACK_BYTES) -> MemoryPlan:
    """Plan, or raise UserError saying what is over and what would fit."""
    if max_seq < MIN_SEQ:
        raise UserError(f"--max-seq {max_seq} is too small: use at least {MIN_SEQ}")
    plan = _plan(qg, max_seq, budget_bytes, stack_bytes)
    if plan.fits:
        return plan
    over = plan.total_bytes - budget_bytes
    best = largest_fitting_seq(qg, budget_bytes, stack_bytes, max_seq)
    kv = f"KV cache int{qg.kv_bits} at {max_seq} tokens is {plan.kv_cache_bytes:,} B"
    fix = (f"fits with --max-seq {best}" if best else
           f"even --max-seq {MIN_SEQ} does not fit: raise --ram-budget or use a smaller model")
    raise UserError(
        f"memory plan needs {plan.total_bytes:,} B of RAM but the budget is {budget_bytes:,} B "
        f"(over by {over:,} B): {kv}, activations and scratch peak at "
        f"{plan.arena_bytes - plan.kv_cache_bytes - CANARY_BYTES:,} B, stack {stack_bytes:,} B; {fix}")
