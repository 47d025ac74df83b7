"""The memory plan: placed buffers, per board memory region, checked against
the regions' sizes and one total RAM budget.

Budget = arenas of every region (each ends with CANARY_BYTES of guard words)
+ stack + a reserve for the runtime's own .data/.bss.  Stack and reserve
live in the board's stack_region (DTCM on the STM32H750), so they come off
that region's capacity too."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UserError
from ..ir import Graph
from ..quant.formats import QuantizedGraph
from .lifetimes import BufferRequest, Lifetimes, find_lifetimes
from .placer import overlapping_pairs_regions, peak_live_bytes, place_regions
from .regions import BoardMemory, board_memory

CANARY_BYTES = 16  # guard words after each region's arena, checked after each generation
DEFAULT_STACK_BYTES = 4096
# .data/.bss of the runtime outside the arena (board driver state, newlib
# bits); the link itself enforces the real total, this keeps the plan honest.
RUNTIME_STATIC_BYTES = 1024
MIN_SEQ = 8


@dataclass(frozen=True)
class GraphShape:
    """What planning needs from a model: its graph and the precisions.  Lets
    `tinyllm-gen plan` skip weight quantization entirely."""

    graph: Graph
    group_size: int
    kv_bits: int
    kernels: str = "portable"  # decides the activation scratch and the fusions (lower.lower_step)
    method: str = "rtn"  # "per-channel" adds static int8 scratch instead
    sampler: str = "full"  # "greedy": no logits vector, no sampler scratch (lifetimes.ARGMAX_CHUNK_ROWS)
    stream: object = None  # stream.StreamOptions: stream buffers and pinned weights join the plan
    # what sizes the weights blob and the code flash beyond the shapes (plan/flash.py, plan/codesize.py):
    kept: tuple[tuple[str, str], ...] = ()  # (weight, GGUF qtype) of matrices whose blocks are kept (method gguf)
    vocab: tuple[int, int] | None = None  # (tokens, text bytes) of the vocabulary the board prints; None: unknown
    unroll_layers: bool = False  # compile --unroll-layers: each layer's calls printed (code flash, plan/codesize.py)
    prefill_batch: int = 1  # prompt tokens per weight pass (prefill.py): the layers' buffers hold that many tokens

    @property
    def config(self):
        return self.graph.config


def shape_of(qg, sampler: str = "full", vocab: tuple[int, int] | None = None, unroll_layers: bool = False) -> GraphShape:
    kept = tuple(sorted((n, t.qtype) for n, t in getattr(qg, "gguf", {}).items()))
    return GraphShape(qg.graph, qg.group_size, qg.kv_bits, getattr(qg, "kernels", "portable"),
                      getattr(qg, "method", "rtn"), sampler, kept=kept, vocab=vocab, unroll_layers=unroll_layers)


@dataclass(frozen=True)
class PlacedBuffer:
    request: BufferRequest
    offset: int  # from the start of its region's arena
    region: str = "ram"

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def size(self) -> int:
        return self.request.size


@dataclass(frozen=True)
class RegionPlan:
    name: str
    address: int
    size: int  # the whole region
    arena_bytes: int  # planned buffers + canary (0 when the region holds none)
    lower_bound_bytes: int  # peak live bytes of this region's buffers + canary
    reserved_bytes: int  # stack + runtime statics when this is the stack region
    speed: str

    @property
    def used_bytes(self) -> int:
        return self.arena_bytes + self.reserved_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.size

    @property
    def ratio(self) -> float:
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0


@dataclass(frozen=True)
class MemoryPlan:
    buffers: tuple[PlacedBuffer, ...]
    lifetimes: Lifetimes
    max_seq: int
    arena_bytes: int  # all regions' arenas (canaries included)
    lower_bound_bytes: int  # sum of per-region lower bounds: no placement in these regions beats it
    peak_time: int
    stack_bytes: int
    runtime_static_bytes: int
    budget_bytes: int
    regions: tuple[RegionPlan, ...] = ()  # regions holding buffers, board order
    board: str = "host"
    kv_bits: int = 8
    sram_bytes: int = 0  # the board's plannable RAM (ceiling for --ram-budget)
    stack_region: str = "ram"

    @property
    def total_bytes(self) -> int:
        return self.arena_bytes + self.stack_bytes + self.runtime_static_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes and all(r.fits for r in self.regions)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(b.size for b in self.buffers if b.request.kind == "kv")

    def buffer(self, name: str) -> PlacedBuffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def region(self, name: str) -> RegionPlan:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)


def _plan(qg, max_seq: int, budget: int, stack: int, mem: BoardMemory) -> MemoryPlan:
    lt = find_lifetimes(qg if isinstance(qg, GraphShape) else shape_of(qg), max_seq)
    reserve = stack + RUNTIME_STATIC_BYTES
    capacity = {r.name: r.size - CANARY_BYTES - (reserve if r.name == mem.stack_region else 0)
                for r in mem.arena_regions}
    where = place_regions(lt.buffers, capacity, mem.placement)
    bad = overlapping_pairs_regions(lt.buffers, where)
    if bad:  # the placer's invariant; a failure here is a bug, not user error
        raise AssertionError(f"planner overlapped live buffers: {bad[:3]}")
    placed = tuple(sorted((PlacedBuffer(b, where[b.name][1], where[b.name][0]) for b in lt.buffers),
                          key=lambda p: (p.region, p.offset, p.name)))
    regions = []
    for r in mem.arena_regions:
        mine = [p for p in placed if p.region == r.name]
        if not mine and r.name != mem.stack_region:
            continue
        top = max((p.offset + p.size for p in mine), default=0)
        peak, _ = peak_live_bytes([p.request for p in mine])
        regions.append(RegionPlan(r.name, r.address, r.size, top + CANARY_BYTES if mine else 0,
                                  peak + CANARY_BYTES if mine else 0,
                                  reserve if r.name == mem.stack_region else 0, r.speed))
    _, at = peak_live_bytes(lt.buffers)
    return MemoryPlan(
        buffers=placed, lifetimes=lt, max_seq=max_seq,
        arena_bytes=sum(r.arena_bytes for r in regions),
        lower_bound_bytes=sum(r.lower_bound_bytes for r in regions), peak_time=at,
        stack_bytes=stack, runtime_static_bytes=RUNTIME_STATIC_BYTES, budget_bytes=budget,
        regions=tuple(regions), board=mem.board, kv_bits=qg.kv_bits, sram_bytes=mem.sram_bytes,
        stack_region=mem.stack_region,
    )


INTERPOLATION_ROUNDS = 4  # then plain bisection: the plan's bytes need not be linear in the context


def _over_bytes(plan: MemoryPlan) -> int:
    """Bytes over the budget (negative: under): what the context's KV cache
    uses up, linearly.  A region that is full first only makes the
    interpolation's guess wrong, which the neighbour check and bisection
    then correct."""
    return plan.total_bytes - plan.budget_bytes


def largest_fitting_seq(qg, budget: int, stack: int, upper: int, mem: BoardMemory | None = None) -> int | None:
    """The largest context in [MIN_SEQ, upper] whose plan fits (fitting is
    monotone in the context).  Each plan places every buffer, so the search
    interpolates on the bytes over (the KV cache is linear in the context:
    the first guess is usually right, checked with its neighbour) and falls
    back to bisection; the answer is bisection's."""
    mem = mem or board_memory(None)
    lo, hi = MIN_SEQ, upper
    if hi < lo:
        return None
    p_lo = _plan(qg, lo, budget, stack, mem)
    if not p_lo.fits:
        return None
    p_hi = _plan(qg, hi, budget, stack, mem)
    if p_hi.fits:
        return hi
    o_lo, o_hi = _over_bytes(p_lo), _over_bytes(p_hi)  # fits(lo), not fits(hi)
    for _ in range(INTERPOLATION_ROUNDS):
        if hi - lo <= 1:
            return lo
        guess = lo + (hi - lo) * -o_lo // max(1, o_hi - o_lo) if o_hi > o_lo else (lo + hi) // 2
        guess = min(max(guess, lo + 1), hi - 1)
        p = _plan(qg, guess, budget, stack, mem)
        if p.fits:
            lo, o_lo = guess, _over_bytes(p)
            nxt = guess + 1
        else:
            hi, o_hi = guess, _over_bytes(p)
            nxt = guess - 1
        if lo < nxt < hi:  # the neighbour on the other side settles it
            q = _plan(qg, nxt, budget, stack, mem)
            if q.fits:
                lo, o_lo = nxt, _over_bytes(q)
            else:
                hi, o_hi = nxt, _over_bytes(q)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _plan(qg, mid, budget, stack, mem).fits:
            lo = mid
        else:
            hi = mid
    return lo


def _kib_up(n: int) -> str:
    return f"{-(-n // 1024)}K"


def _what_is_over(plan: MemoryPlan) -> str:
    if plan.total_bytes > plan.budget_bytes:
        return (f"memory plan needs {plan.total_bytes:,} B of RAM but the budget is {plan.budget_bytes:,} B "
                f"(over by {plan.total_bytes - plan.budget_bytes:,} B)")
    r = next(r for r in plan.regions if not r.fits)
    return (f"region {r.name} needs {r.used_bytes:,} B but holds {r.size:,} B "
            f"(over by {r.used_bytes - r.size:,} B)")


def fixes(qg, plan: MemoryPlan, mem: BoardMemory, stack: int) -> list[str]:
    """Options that would make this plan fit, cheapest change first; the
    --max-seq option (if any) comes last so the sentence ends on a number.
    Every alternative is planned with the same shape (sampler, kernels,
    method) as the failed plan, changing only the option it suggests."""
    out = []
    shape = qg if isinstance(qg, GraphShape) else shape_of(qg)
    need = max(plan.total_bytes, plan.budget_bytes)
    if plan.total_bytes > plan.budget_bytes and need <= mem.sram_bytes:
        bigger = int(_kib_up(need)[:-1]) * 1024
        if _plan(shape, plan.max_seq, bigger, stack, mem).fits:
            out.append(f"--ram-budget {_kib_up(need)}")
    if qg.kv_bits == 8:
        q4 = replace(shape, kv_bits=4)
        if _plan(q4, plan.max_seq, plan.budget_bytes, stack, mem).fits:
            out.append("--kv-bits 4")
        else:
            best4 = largest_fitting_seq(q4, plan.budget_bytes, stack, plan.max_seq, mem)
            if best4:
                out.append(f"--kv-bits 4 --max-seq {best4}")
    best = largest_fitting_seq(shape, plan.budget_bytes, stack, plan.max_seq, mem)
    if best:
        out.append(f"--max-seq {best}")
    return out


def explain_over(qg, plan: MemoryPlan, mem: BoardMemory, stack: int) -> str:
    kv = f"KV cache int{plan.kv_bits} at {plan.max_seq} tokens is {plan.kv_cache_bytes:,} B"
    act = plan.arena_bytes - plan.kv_cache_bytes - CANARY_BYTES * len(plan.regions)
    opts = fixes(qg, plan, mem, stack)
    fix = ("fits with " + (", ".join(opts[:-1]) + " or " + opts[-1] if len(opts) > 1 else opts[0]) if opts else
           f"even --max-seq {MIN_SEQ} does not fit: raise --ram-budget or use a smaller model")
    return (f"{_what_is_over(plan)}: {kv}, activations and scratch peak at {act:,} B, "
            f"stack {stack:,} B; {fix}")


def plan_memory(qg: QuantizedGraph | GraphShape, max_seq: int, budget_bytes: int,
                stack_bytes: int = DEFAULT_STACK_BYTES, board=None) -> MemoryPlan:
    """Plan, or raise UserError saying what is over and what would fit."""
    mem = board_memory(board)
    if max_seq < MIN_SEQ:
        raise UserError(f"--max-seq {max_seq} is too small: use at least {MIN_SEQ}")
    plan = _plan(qg, max_seq, budget_bytes, stack_bytes, mem)
    if plan.fits:
        return plan
    raise UserError(explain_over(qg, plan, mem, stack_bytes))


def auto_max_seq(qg, context: int, budget_bytes: int, stack_bytes: int = DEFAULT_STACK_BYTES,
                 board=None) -> int:
    """--max-seq auto: the longest context (<= the model's) that fits."""
    mem = board_memory(board)
    best = largest_fitting_seq(qg, budget_bytes, stack_bytes, context, mem)
    if best is None:
        plan = _plan(qg, MIN_SEQ, budget_bytes, stack_bytes, mem)
        raise UserError(f"--max-seq auto: not even {MIN_SEQ} tokens fit: " + explain_over(qg, plan, mem, stack_bytes))
    return best
