"""The board's memory as the planner sees it (memory_map.py has the types):
the host's unbounded region, and the budget checked against the board."""
from __future__ import annotations

from ..errors import UserError
from ..memory_map import BoardMemory, host_memory


def board_memory(board) -> BoardMemory:
    """A board's memory map (board.Board.memory, parsed and checked when the
    board was loaded); None means the host."""
    return host_memory() if board is None else board.memory


def check_budget(mem: BoardMemory, budget: int) -> None:
    if budget > mem.sram_bytes:
        raise UserError(f"--ram-budget {budget:,} B exceeds board {mem.board}'s {mem.sram_bytes:,} B of SRAM "
                        f"({', '.join(f'{r.name} {r.size // 1024} KiB' for r in mem.arena_regions)}): "
                        f"use at most {mem.sram_bytes // 1024}K")
