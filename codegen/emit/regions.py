"""Per-region data for the templates: the arenas of tllm_model.c/h and the
board linker script.  All arithmetic happens here, none in templates."""
from __future__ import annotations

from ..board import Board
from ..plan.memory import CANARY_BYTES, MemoryPlan
from ..plan.regions import board_memory
from .names import ident



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
                    "reserved_bytes": r.reserved_bytes,
                    "attribute": f'__attribute__((section("{sec}")))' if sec else ""})
    return out


def linker_variables(plan: MemoryPlan, board: Board, weights_bytes: int) -> dict:
    """Everything a board's linker template may use.  The single-RAM qemu
    template reads the flat names; region templates read `regions`."""
    mem = board_memory(board)
    v: dict = {"stack_bytes": plan.stack_bytes, "budget_bytes": plan.budget_bytes,
               "runtime_static_bytes": plan.runtime_static_bytes, "weights_bytes": weights_bytes}
    code = next((r for r in mem.regions if r.use == "code" and r.kind == "flash"), None)
    if code is not None and len(mem.arena_regions) == 1:  # one RAM (qemu-mps2-an500): limited to the budget
        ram = mem.arena_regions[0]
        v.update(flash_origin=f"0x{code.address:08X}", flash_bytes=code.size,
                 ram_origin=f"0x{ram.address:08X}", ram_bytes=plan.budget_bytes)
    v["regions"] = [{"id": ident(r.name), "origin": f"0x{r.address:08X}", "length": r.size,
                     "attrs": "rx" if r.kind == "flash" else "rwx", "note": r.note} for r in mem.regions]
    v["arenas"] = [{"section": _section(board, r["name"]), "region": ident(r["name"]), "bytes": r["arena_bytes"],
                    "start": f"__tllm_arena_{r['name']}_start__", "end": f"__tllm_arena_{r['name']}_end__"}
                   for r in arena_regions(plan, board)]
    v["stack_region"] = ident(mem.stack_region)
    v["code_region"] = ident(code.name) if code else ""
    w = mem.weights_region()
    v["weights_region"] = ident(w.name) if w else ""
    return v
