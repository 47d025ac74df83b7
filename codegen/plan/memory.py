"""The memory plan of one lowered step at one context: placed buffers, per
board memory region, checked against the regions' sizes and one total RAM
budget.  Which context, stream chunk, pins and prefill batch to plan is
the searches' business (fit/search.py); this module places what it is
given and says what is over.

Budget = arenas of every on-chip region (each ends with CANARY_BYTES of
guard words) + stack + a reserve for the runtime's own .data/.bss.  Stack
and reserve live in the board's stack_region (DTCM on the STM32H750), so
they come off that region's capacity too.

With `kv_region` (`--kv-region sdram`: a region of use "kv", the DK's FMC
SDRAM) the KV cache, and only it, is placed there: it is the one buffer
whose bytes grow with the context and which attention streams through once
per token, so it is what external RAM buys context with; everything else
stays in SRAM.  That region is checked against its own size and is not part
of the RAM budget, which keeps counting the on-chip SRAM alone."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..memory_map import BoardMemory
from ..quant.kv import KV8, KVBits, parse_kv_bits
from .lifetimes import CTYPE_BYTES, BufferRequest, Lifetimes
from .placer import overlapping_pairs_regions, peak_live_bytes, place_regions

CANARY_BYTES = 16  # guard words after each region's arena, checked after each generation
# .data/.bss of the runtime outside the arena (board driver state, newlib
# bits); the link itself enforces the real total, this keeps the plan honest.
RUNTIME_STATIC_BYTES = 1024
MIN_SEQ = 8


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
    external: bool = False  # a "kv" region (SDRAM): outside the RAM budget

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
    kv_bits: KVBits = KV8  # quant/kv.py
    kv_rotate: str = "off"  # the int4 cache's rotation ("hadamard" | "off", quant/kv.py): code, not memory
    sram_bytes: int = 0  # the board's plannable RAM (ceiling for --ram-budget)
    stack_region: str = "ram"
    external_bytes: int = 0  # arena bytes in external RAM (--kv-region sdram), outside the budget
    kv_region_option: str = ""  # --kv-region as resolved ("sram" | "sdram") on a board with SDRAM; "" elsewhere

    @property
    def total_bytes(self) -> int:
        return self.arena_bytes + self.stack_bytes + self.runtime_static_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes and all(r.fits for r in self.regions)

    def kv_bytes_per_position(self, part: str) -> int:
        """Bytes one more position costs in `part` ("k" or "v"), values and
        scales over all layers: the cache's declarations' own counts (lower/step.py)."""
        names = (f".{part}_cache", f".{part}_scale")
        return sum(b.request.count * CTYPE_BYTES[b.request.ctype] for b in self.buffers
                   if b.request.kind == "kv" and b.name.endswith(names)) // max(1, self.max_seq)

    @property
    def kv_cache_bytes(self) -> int:
        return sum(b.size for b in self.buffers if b.request.kind == "kv")

    @property
    def kv_cache_regions(self) -> tuple[str, ...]:
        """Where the KV cache went, in the plan's region order."""
        used = {b.region for b in self.buffers if b.request.kind == "kv"}
        return tuple(r.name for r in self.regions if r.name in used)

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


KV_PLACEMENT = "kv_region"  # the placement class of the KV cache sent to external RAM


def _kv_to(buffers, region: str | None):
    """The requests with the KV cache's placement class naming `region`'s own (None: unchanged)."""
    if region is None:
        return buffers
    return tuple(dataclasses.replace(b, placement=KV_PLACEMENT) if b.kind == "kv" else b for b in buffers)


def plan_lifetimes(life: Lifetimes, max_seq: int, budget: int, stack: int, mem: BoardMemory,
                   kv_bits: KVBits, kv_region: str | None = None) -> MemoryPlan:
    """Place a step's buffers (their lifetimes, lifetimes_of) at this
    context in the board's regions: the plan, fitting or not (`fits`).
    kv_region: a "kv" region's name, where the KV cache goes (None: SRAM)."""
    lt = life.at(max_seq)
    lt = dataclasses.replace(lt, buffers=_kv_to(lt.buffers, kv_region))
    reserve = stack + RUNTIME_STATIC_BYTES
    capacity = {r.name: r.size - CANARY_BYTES - (reserve if r.name == mem.stack_region else 0)
                for r in mem.arena_regions}
    order = dict(mem.placement)
    if kv_region is not None:
        capacity[kv_region] = mem.region(kv_region).size - CANARY_BYTES
        order[KV_PLACEMENT] = (kv_region,)
    where = place_regions(lt.buffers, capacity, order)
    bad = overlapping_pairs_regions(lt.buffers, where)
    if bad:  # the placer's invariant; a failure here is a bug, not user error
        raise AssertionError(f"planner overlapped live buffers: {bad[:3]}")
    placed = tuple(sorted((PlacedBuffer(b, where[b.name][1], where[b.name][0]) for b in lt.buffers),
                          key=lambda p: (p.region, p.offset, p.name)))
    regions = []
    for r in mem.regions:
        mine = [p for p in placed if p.region == r.name]
        if not mine and (r.use != "arena" or r.name != mem.stack_region):
            continue
        top = max((p.offset + p.size for p in mine), default=0)
        peak, _ = peak_live_bytes([p.request for p in mine])
        regions.append(RegionPlan(r.name, r.address, r.size, top + CANARY_BYTES if mine else 0,
                                  peak + CANARY_BYTES if mine else 0,
                                  reserve if r.name == mem.stack_region else 0, r.speed, r.use != "arena"))
    on_chip = [r for r in regions if not r.external]
    _, at = peak_live_bytes(lt.buffers)
    return MemoryPlan(
        buffers=placed, lifetimes=lt, max_seq=max_seq,
        arena_bytes=sum(r.arena_bytes for r in on_chip),
        lower_bound_bytes=sum(r.lower_bound_bytes for r in on_chip), peak_time=at,
        stack_bytes=stack, runtime_static_bytes=RUNTIME_STATIC_BYTES, budget_bytes=budget,
        regions=tuple(regions), board=mem.board, kv_bits=parse_kv_bits(kv_bits), sram_bytes=mem.sram_bytes,
        stack_region=mem.stack_region, external_bytes=sum(r.arena_bytes for r in regions if r.external),
        kv_region_option=("sdram" if kv_region else "sram") if mem.kv_regions else "",
    )


def what_is_over(plan: MemoryPlan) -> str:
    """The first thing over: the total against the budget, or a region against its size."""
    if plan.total_bytes > plan.budget_bytes:
        return (f"memory plan needs {plan.total_bytes:,} B of RAM but the budget is {plan.budget_bytes:,} B "
                f"(over by {plan.total_bytes - plan.budget_bytes:,} B)")
    r = next(r for r in plan.regions if not r.fits)
    return (f"region {r.name} needs {r.used_bytes:,} B but holds {r.size:,} B "
            f"(over by {r.used_bytes - r.size:,} B)")
