"""Offset assignment: a pure algorithm over (size, align, live range) items.

Greedy, as TFLite Micro's GreedyMemoryPlanner: take buffers from largest to
smallest (ties: earlier first use, then name, so the result is
deterministic) and put each at the lowest aligned offset where it overlaps
no already-placed buffer that is live at the same time; two other orders
are tried as well and the tightest placement kept (ORDERS).  Big, long-lived
buffers (the KV cache) settle at the bottom and short-lived activations
share the space above them.

The lower bound any placement must respect is the peak, over time, of the
bytes live at once; `peak_live_bytes` computes it so callers can report how
close the placement came."""
from __future__ import annotations

from typing import Mapping, Sequence

from .lifetimes import BufferRequest, align_up


def place(buffers: Sequence[BufferRequest]) -> dict[str, int]:
    """One memory of unbounded size: buffer name -> offset."""
    where = place_regions(buffers, {"ram": 1 << 62}, {b.place_class: ("ram",) for b in buffers})
    return {name: off for name, (_, off) in where.items()}


def arena_bytes(buffers: Sequence[BufferRequest], offsets: Mapping[str, int]) -> int:
    return max((offsets[b.name] + b.size for b in buffers), default=0)


def peak_live_bytes(buffers: Sequence[BufferRequest]) -> tuple[int, int]:
    """(peak bytes live at one time step, that time step)."""
    times = sorted({b.first for b in buffers})
    best, at = 0, 0
    for t in times:
        live = sum(b.size for b in buffers if b.first <= t <= b.last)
        if live > best:
            best, at = live, t
    return best, at


def overlapping_pairs(buffers: Sequence[BufferRequest], offsets: Mapping[str, int]) -> list[tuple[str, str]]:
    """Pairs live at the same time whose byte ranges intersect (must be empty)."""
    bad = []
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.overlaps_in_time(b):
                a0, b0 = offsets[a.name], offsets[b.name]
                if a0 < b0 + b.size and b0 < a0 + a.size:
                    bad.append((a.name, b.name))
    return bad


# --- several memories ------------------------------------------------------
# Same greedy order, one free-space search per region: each buffer tries the
# regions its placement class lists, in order, and takes the first where the
# greedy offset still fits that region's capacity.  A buffer that fits
# nowhere lands in its first choice past the end, so the plan can say by how
# much it is over instead of just failing.

def _greedy_offset(buf: BufferRequest, placed: Sequence[tuple[int, BufferRequest]]) -> int:
    busy = sorted((off, off + other.size) for off, other in placed if other.overlaps_in_time(buf))
    candidate = 0
    for start, stop in busy:
        if align_up(candidate, buf.align) + buf.size <= start:
            break
        candidate = max(candidate, stop)
    return align_up(candidate, buf.align)


# Greedy by size is not optimal in general; a couple of other classic
# orders (by size x lifetime, by first use) sometimes pack tighter. All are
# tried and the tightest result kept (earlier order wins ties: deterministic).
ORDERS = (
    lambda b: (-b.size, b.first, b.name),
    lambda b: (-b.size * (b.last - b.first + 1), -b.size, b.name),
    lambda b: (b.first, -b.size, b.name),
)


def _place_in_order(ordered: Sequence[BufferRequest], capacity: Mapping[str, int],
                    order: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, int]]:
    placed: dict[str, list[tuple[int, BufferRequest]]] = {r: [] for r in capacity}
    out: dict[str, tuple[str, int]] = {}
    for buf in ordered:
        choices = order[buf.place_class]
        pick = None
        for region in choices:
            off = _greedy_offset(buf, placed[region])
            if off + buf.size <= capacity[region]:
                pick = (region, off)
                break
        if pick is None:
            pick = (choices[0], _greedy_offset(buf, placed[choices[0]]))
        placed[pick[0]].append((pick[1], buf))
        out[buf.name] = pick
    return out


def _cost(buffers: Sequence[BufferRequest], where: Mapping[str, tuple[str, int]],
          capacity: Mapping[str, int]) -> tuple[int, int]:
    """(bytes past capacity, total arena bytes): smaller is better."""
    ends: dict[str, int] = {}
    for b in buffers:
        region, off = where[b.name]
        ends[region] = max(ends.get(region, 0), off + b.size)
    over = sum(max(0, end - capacity[r]) for r, end in ends.items())
    return over, sum(ends.values())


def place_regions(buffers: Sequence[BufferRequest], capacity: Mapping[str, int],
                  order: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, int]]:
    """buffer name -> (region, offset).  `capacity`: usable bytes per region;
    `order`: placement class -> region names to try."""
    best, best_cost = None, None
    for key in ORDERS:
        where = _place_in_order(sorted(buffers, key=key), capacity, order)
        cost = _cost(buffers, where, capacity)
        if best_cost is None or cost < best_cost:
            best, best_cost = where, cost
    return best


def overlapping_pairs_regions(buffers: Sequence[BufferRequest],
                              where: Mapping[str, tuple[str, int]]) -> list[tuple[str, str]]:
    """Pairs in one region, live together, whose byte ranges intersect."""
    bad = []
    by_region: dict[str, list[BufferRequest]] = {}
    for b in buffers:
        by_region.setdefault(where[b.name][0], []).append(b)
    for group in by_region.values():
        bad += overlapping_pairs(group, {b.name: where[b.name][1] for b in group})
    return bad
