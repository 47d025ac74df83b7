"""Per-region data for the templates: the arenas of tllm_model.c/h and the
Cortex-M linker script (boards/cortex-m/linker.ld.j2, one template for every
Arm board).  All arithmetic happens here, none in templates.

The linker script is generated from a `LinkLayout`: the board's typed
memory regions (board.json "memory_regions"), where the stack lives, the
planned arenas and the budgets.  Every board gets the same symbol names
(the template's banner lists them) and the same checks:

- each arena output section is exactly the plan's size;
- stack + the runtime-statics reserve + every arena <= the RAM budget, and
  .data + .bss <= that reserve, so the link fails exactly when the plan
  is over budget;
- an arena region's MEMORY length is at most the budget (no region can hold
  more than the whole plan: QEMU's one 4 MiB RAM links as the 512 KiB an
  STM32H750 gives the plan, so a firmware that only fits the emulator is
  refused on it too);
- the weights blob fits its region."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..board import Board
from ..plan.memory import CANARY_BYTES, MemoryPlan
from ..memory_map import Region
from ..plan.regions import board_memory
from ..kernels.c_names import ident
from ..kernels.c_text import block_comment


def _section(board: Board, region: str) -> str:
    return f"{board.arena_section}.{region}" if board.arena_section else ""


def arena_regions(plan: MemoryPlan, board: Board) -> list[dict]:
    """Regions that hold buffers, board order."""
    out = []
    for r in plan.regions:
        if not r.arena_bytes:
            continue
        sec = _section(board, r.name)
        out.append({"name": r.name, "arena_bytes": r.arena_bytes, "lower_bound_bytes": r.lower_bound_bytes,
                    "canary_offset": r.arena_bytes - CANARY_BYTES, "size": r.size, "address": f"0x{r.address:08x}",
                    "reserved_bytes": r.reserved_bytes, "external": r.external,
                    "attribute": f'__attribute__((section("{sec}")))' if sec else ""})
    return out


@dataclass(frozen=True)
class LinkRegion:
    """One MEMORY entry."""

    id: str  # the linker's region name (a C identifier)
    origin: str  # "0x...."
    length: int
    attrs: str  # "rx" (flash) | "rwx" (RAM)
    note: str

    @property
    def comment(self) -> str:
        """The note as a block comment at the MEMORY entries' indent, wrapped to the line width."""
        return block_comment(self.note, 2)


@dataclass(frozen=True)
class LinkArena:
    """One planned arena: its output section, region and start/end symbols."""

    section: str
    region: str
    bytes: int
    start: str
    end: str
    in_budget: bool = True  # False: an arena in external RAM (--kv-region sdram), outside the RAM budget


@dataclass(frozen=True)
class LinkLayout:
    """Everything boards/cortex-m/linker.ld.j2 reads."""

    regions: tuple[LinkRegion, ...]
    code_region: str  # vectors, code, rodata, the .data load image, the zero table
    stack_region: str  # stack, .data, .bss
    weights_region: str  # "" when the board has none
    has_weights_region: bool
    stack_bytes: int
    runtime_static_bytes: int  # the plan's reserve for .data + .bss
    budget_bytes: int  # stack + reserve + arenas must fit
    weights_bytes: int
    arenas: tuple[LinkArena, ...]

    @property
    def budget_arenas(self) -> tuple[LinkArena, ...]:
        """The arenas the RAM budget counts (on-chip)."""
        return tuple(a for a in self.arenas if a.in_budget)

    def variables(self) -> dict:
        """The template's variables (the fields by name, and budget_arenas)."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"budget_arenas": self.budget_arenas}


def link_layout(regions: tuple[Region, ...], stack_region: str, *, stack_bytes: int, runtime_static_bytes: int,
                budget_bytes: int, weights_bytes: int = 0, arenas: tuple[LinkArena, ...] = ()) -> LinkLayout:
    """The layout of a firmware on these regions (board order).  The code
    region is the first flash region used for code; the weights region the
    first used for weights."""
    code = next((r for r in regions if r.use == "code" and r.kind == "flash"), None)
    if code is None:
        raise ValueError("a Cortex-M board needs a flash region with use \"code\"")
    weights = next((r for r in regions if r.use == "weights"), None)

    def length(r: Region) -> int:
        return min(r.size, budget_bytes) if r.use == "arena" else r.size

    return LinkLayout(
        regions=tuple(LinkRegion(ident(r.name), f"0x{r.address:08X}", length(r),
                                 "rx" if r.kind == "flash" else "rwx", r.note) for r in regions),
        code_region=ident(code.name), stack_region=ident(stack_region),
        weights_region=ident(weights.name) if weights else "", has_weights_region=weights is not None,
        stack_bytes=stack_bytes, runtime_static_bytes=runtime_static_bytes, budget_bytes=budget_bytes,
        weights_bytes=weights_bytes, arenas=arenas)


def link_arenas(plan: MemoryPlan, board: Board, stem: str = "__tllm_arena") -> tuple[LinkArena, ...]:
    """A plan's arenas as output sections (stem: their start/end symbols' prefix; a draft model
    beside the target has its own sections and symbols, compile_draft.py)."""
    return tuple(LinkArena(_section(board, r["name"]), ident(r["name"]), r["arena_bytes"],
                           f"{stem}_{r['name']}_start__", f"{stem}_{r['name']}_end__", not r["external"])
                 for r in arena_regions(plan, board))


def plan_link_layout(plan: MemoryPlan, board: Board, weights_bytes: int, extra_arenas: tuple[LinkArena, ...] = (),
                     budget_bytes: int | None = None) -> LinkLayout:
    """The layout of a compiled model: the board's regions, the plan's arenas (and a draft model's,
    extra_arenas, within budget_bytes: the whole budget the two plans share)."""
    mem = board_memory(board)
    return link_layout(mem.regions, mem.stack_region, stack_bytes=plan.stack_bytes,
                       runtime_static_bytes=plan.runtime_static_bytes,
                       budget_bytes=plan.budget_bytes if budget_bytes is None else budget_bytes,
                       weights_bytes=weights_bytes, arenas=link_arenas(plan, board) + tuple(extra_arenas))


def static_link_layout(board: Board, ram: Region, stack_bytes: int) -> LinkLayout:
    """A program without a plan (the kernel bench, board tests): the board's
    code region and one RAM region holding stack and statics, all of it the
    budget."""
    code = tuple(r for r in board_memory(board).regions if r.use == "code" and r.kind == "flash")
    return link_layout(code + (ram,), ram.name, stack_bytes=stack_bytes,
                       runtime_static_bytes=ram.size - stack_bytes, budget_bytes=ram.size)


def linker_variables(plan: MemoryPlan, board: Board, weights_bytes: int, extra_arenas: tuple[LinkArena, ...] = (),
                     budget_bytes: int | None = None) -> dict:
    """The linker template's variables for a compiled model (render.py)."""
    return plan_link_layout(plan, board, weights_bytes, extra_arenas, budget_bytes).variables()
