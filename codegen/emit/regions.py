"""Per-region data for the templates: the arenas of tllm_model.c/h and the
board linker script.  All arithmetic happens here, none in templates."""
from __future__ import annotations

from pathlib import Path

from ..plan.memory import CANARY_BYTES, MemoryPlan
from ..plan.regions import board_memory
from .names import ident

from ..resources import boards_dir


def board_file(board: dict, name: str) -> Path:
    """A board's own file, else its family's shared one (board.json "common_dir"),
    so two STM32H750 boards share startup code and linker template."""
    own = boards_dir() / board["name"] / name
    if own.is_file() or "common_dir" not in board:
        return own
    return boards_dir() / board["common_dir"] / name


def _section(board: dict, region: str) -> str:
    return f"{board['arena_section']}.{region}" if board.get("arena_section") else ""


def arena_regions(plan: MemoryPlan, board: dict) -> list[dict]:
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


def linker_variables(plan: MemoryPlan, board: dict, weights_bytes: int) -> dict:
    """Everything a board's linker template may use.  The single-RAM qemu
    template reads the flat names; region templates read `regions`."""
    mem = board_memory(board)
    v: dict = {"stack_bytes": plan.stack_bytes, "budget_bytes": plan.budget_bytes,
               "runtime_static_bytes": plan.runtime_static_bytes, "weights_bytes": weights_bytes}
    if "memory" in board:  # qemu-mps2-an500: RAM limited to the budget
        m = board["memory"]
        v.update(flash_origin=m["flash"]["address"], flash_bytes=m["flash"]["size"],
                 ram_origin=m["sram"]["address"], ram_bytes=plan.budget_bytes)
    v["regions"] = [{"id": ident(r.name), "origin": f"0x{r.address:08X}", "length": r.size,
                     "attrs": "rx" if r.kind == "flash" else "rwx", "note": r.note} for r in mem.regions]
    v["arenas"] = [{"section": _section(board, r["name"]), "region": ident(r["name"]), "bytes": r["arena_bytes"],
                    "start": f"__tllm_arena_{r['name']}_start__", "end": f"__tllm_arena_{r['name']}_end__"}
                   for r in arena_regions(plan, board)]
    v["stack_region"] = ident(mem.stack_region)
    code = next((r for r in mem.regions if r.use == "code" and r.kind == "flash"), None)
    v["code_region"] = ident(code.name) if code else ""
    w = mem.weights_region()
    v["weights_region"] = ident(w.name) if w else ""
    return v
