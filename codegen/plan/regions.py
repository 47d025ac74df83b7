"""The board's memory as the planner sees it (memory_map.py has the types):
the host's unbounded region, and the budget checked against the board."""
from __future__ import annotations

from ..board import board_names, load_board
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


def check_kv_region(board, choice: str, choices: tuple[str, ...]) -> None:
    """--kv-region: one of `choices`, and sdram only on a board that has external RAM for it."""
    if choice not in choices:
        raise UserError(f"--kv-region {choice} is not known: choose {', '.join(choices)}")
    if choice == "sdram" and (board is None or not board.memory.kv_regions):
        name = "host" if board is None else board.name
        has = " or ".join(f"--board {n}" for n in board_names() if load_board(n).memory.kv_regions)
        raise UserError(f"--kv-region sdram: board {name} has no SDRAM (no memory region with use \"kv\" in its "
                        f"board.json): drop --kv-region, or compile for a board with SDRAM ({has})")
