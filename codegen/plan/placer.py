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

import numpy as np

from .lifetimes import BufferRequest


def place(buffers: Sequence[BufferRequest]) -> dict[str, int]:
    """One memory of unbounded size: buffer name -> offset."""
    where = place_regions(buffers, {"ram": 1 << 62}, {b.place_class: ("ram",) for b in buffers})
    return {name: off for name, (_, off) in where.items()}


def arena_bytes(buffers: Sequence[BufferRequest], offsets: Mapping[str, int]) -> int:
    return max((offsets[b.name] + b.size for b in buffers), default=0)


def peak_live_bytes(buffers: Sequence[BufferRequest]) -> tuple[int, int]:
    """(peak bytes live at one time step, that time step): the first step,
    of the steps where a buffer starts, with the most bytes live."""
    if not buffers:
        return 0, 0
    first = np.array([b.first for b in buffers], np.int64)
    last = np.array([b.last for b in buffers], np.int64)
    size = np.array([b.size for b in buffers], np.int64)
    times = np.unique(first)
    # bytes live at t: sizes of buffers started by t less those ended before t (one sweep, exact integers)
    started = np.cumsum(size[np.argsort(first, kind="stable")])[np.searchsorted(np.sort(first), times, "right") - 1]
    ended_sorted = np.sort(last)
    by_end = np.concatenate([[0], np.cumsum(size[np.argsort(last, kind="stable")])])
    live = started - by_end[np.searchsorted(ended_sorted, times, "left")]
    i = int(np.argmax(live))  # the first of the maxima: the earliest step
    return (int(live[i]), int(times[i])) if live[i] > 0 else (0, 0)


def overlapping_pairs(buffers: Sequence[BufferRequest], offsets: Mapping[str, int]) -> list[tuple[str, str]]:
    """Pairs live at the same time whose byte ranges intersect (must be empty),
    in the buffers' order (a before b)."""
    first = np.array([b.first for b in buffers], np.int64)
    last = np.array([b.last for b in buffers], np.int64)
    lo = np.array([offsets[b.name] for b in buffers], np.int64)
    hi = lo + np.array([b.size for b in buffers], np.int64)
    bad = []
    for i in range(len(buffers) - 1):
        j = i + 1
        clash = (first[i] <= last[j:]) & (first[j:] <= last[i]) & (lo[i] < hi[j:]) & (lo[j:] < hi[i])
        bad += [(buffers[i].name, buffers[j + k].name) for k in np.flatnonzero(clash)]
    return bad


# --- several memories ------------------------------------------------------
# Same greedy order, one free-space search per region: each buffer tries the
# regions its placement class lists, in order, and takes the first where the
# greedy offset still fits that region's capacity.  A buffer that fits
# nowhere lands in its first choice past the end, so the plan can say by how
# much it is over instead of just failing.

class _Placed:
    """The buffers placed in one region so far, as arrays: the free-space
    search below is one vectorised pass over them instead of a Python loop
    (a 300-layer unrolled step places thousands of buffers)."""

    def __init__(self):
        self.n = 0
        self.first = np.empty(64, np.int64)
        self.last = np.empty(64, np.int64)
        self.start = np.empty(64, np.int64)
        self.stop = np.empty(64, np.int64)

    def add(self, buf: BufferRequest, off: int) -> None:
        if self.n == len(self.first):
            for name in ("first", "last", "start", "stop"):
                setattr(self, name, np.concatenate([getattr(self, name), np.empty(self.n, np.int64)]))
        self.first[self.n], self.last[self.n] = buf.first, buf.last
        self.start[self.n], self.stop[self.n] = off, off + buf.size
        self.n += 1

    def greedy_offset(self, buf: BufferRequest) -> int:
        """The lowest offset (aligned for buf) where buf overlaps no placed
        buffer live at the same time: the busy ranges in order of start, the
        first gap before one of them that holds buf, else past them all."""
        n = self.n
        live = (self.first[:n] <= buf.last) & (buf.first <= self.last[:n])
        start, stop = self.start[:n][live], self.stop[:n][live]
        if not len(start):
            return 0
        order = np.lexsort((stop, start))
        start, stop = start[order], stop[order]
        before = np.maximum.accumulate(np.concatenate([[0], stop]))  # the candidate before each range, and after all
        a = buf.align
        cand = -(-before // a) * a
        fits = np.flatnonzero(cand[:-1] + buf.size <= start)
        return int(cand[fits[0]] if len(fits) else cand[-1])


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
    placed = {r: _Placed() for r in capacity}
    out: dict[str, tuple[str, int]] = {}
    for buf in ordered:
        choices = order[buf.place_class]
        pick = None
        for region in choices:
            off = placed[region].greedy_offset(buf)
            if off + buf.size <= capacity[region]:
                pick = (region, off)
                break
        if pick is None:
            pick = (choices[0], placed[choices[0]].greedy_offset(buf))
        placed[pick[0]].add(buf, pick[1])
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
