"""Board memories as data: boards/<name>/board.json "memory_regions"
(parsed and validated by board.py).

Each region states what the planner needs to decide placement without
knowing the chip: address, size, speed class (tcm/sram/flash/qspi/sdram),
whether the board's copy engine reaches it, whether the D-cache covers it,
kind (ram/flash) and use (arena | kv | code | weights | none).  Only "arena"
regions receive run-time buffers by default; a "kv" region (the DK's FMC
SDRAM) receives the KV cache, and only when `--kv-region` asks for it: it
is never part of the RAM budget, which counts the on-chip SRAM alone.  "placement" lists, per placement class,
the arena regions to try in order; the planner falls back along that list
when the preferred region is full.

A board without regions (the host) gets one unbounded "ram" region: its
memory is whatever the OS gives it."""
from __future__ import annotations

from dataclasses import dataclass

SPEEDS = ("tcm", "sram", "flash", "qspi", "sdram")
KINDS = ("ram", "flash")
USES = ("arena", "kv", "code", "weights", "none")
# Placement classes a BufferRequest may ask for (see lifetimes.placement_of).
PLACEMENTS = ("hot", "bulk", "dma")
HOST_RAM_BYTES = 1 << 40  # "unbounded": the budget is what limits the host


@dataclass(frozen=True)
class Region:
    name: str
    address: int
    size: int
    speed: str
    kind: str
    dma_reachable: bool  # by the copy engine of the board's weight stream (the H750's MDMA reaches the TCMs too)
    cacheable: bool
    use: str
    note: str = ""

    @property
    def section(self) -> str:
        """The output section holding this region's arena (linker + C attribute)."""
        return f".tllm_arena.{self.name}"


@dataclass(frozen=True)
class BoardMemory:
    board: str
    regions: tuple[Region, ...]  # every region, board.json order
    placement: dict  # class -> tuple of arena region names, in preference order
    stack_region: str  # where stack and runtime statics live

    @property
    def arena_regions(self) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.use == "arena")

    @property
    def sram_bytes(self) -> int:
        """All RAM the planner may use: the ceiling for --ram-budget."""
        return sum(r.size for r in self.arena_regions)

    @property
    def kv_regions(self) -> tuple[Region, ...]:
        """Regions the KV cache may be sent to on request (--kv-region): external RAM."""
        return tuple(r for r in self.regions if r.use == "kv")

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    def weights_region(self) -> Region | None:
        return next((r for r in self.regions if r.use == "weights"), None)


def host_memory(name: str = "host") -> BoardMemory:
    """A board without regions (the host): one unbounded region."""
    ram = Region("ram", 0, HOST_RAM_BYTES, "sram", "ram", True, False, "arena", "host memory")
    return BoardMemory(name, (ram,), {p: ("ram",) for p in PLACEMENTS}, "ram")
