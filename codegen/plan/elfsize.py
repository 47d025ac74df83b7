"""The built ELF's sections (arm-none-eabi-size -A), attributed to the board's
memory regions by address, beside what the plan promised."""
from __future__ import annotations

import subprocess
from pathlib import Path

from .regions import board_memory

NOT_LOADED = (".debug", ".comment", ".ARM.attributes")  # address 0 but not in memory


def elf_sections(elf: Path) -> list[tuple[str, int, int]]:
    """(name, size, address) of every allocated section."""
    proc = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True, check=True)
    out = []
    for line in proc.stdout.splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[2].isdigit() and not parts[0].startswith(NOT_LOADED):
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def elf_usage(elf: Path, board, plan_doc: dict) -> dict:
    mem = board_memory(board)
    planned = {f"{board.arena_section or '.tllm_arena'}.{r['name']}": r["arena_bytes"]
               for r in plan_doc["region_detail"]}
    planned[".stack"] = plan_doc["stack_bytes"]
    rows, ram, flash = [], {}, 0
    for name, size, addr in elf_sections(elf):
        region = next((r for r in mem.regions if r.address <= addr < r.address + r.size), None)
        rname = region.name if region else "?"
        rows.append({"name": name, "size": size, "address": f"0x{addr:08x}", "region": rname,
                     "planned": planned.get(name)})
        if region is not None and region.use in ("arena", "kv"):
            ram[rname] = ram.get(rname, 0) + size
        elif region is not None and region.use == "code":
            flash += size
    return {"sections": rows, "ram_regions": ram, "flash_bytes": flash}
