"""Board families: the Python that boards built on one chip share, found
from board.json's "family" (whose C sits in boards/<family>/).  A family
derives register values from board data (board_config.h defines) and may add
files to OUT (the STM32H750's Renode platform); a board without a family, or
with one that needs no Python, gets neither."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..board import Board, ConfigValue
from ..errors import UserError
from .stm32h750 import registers as h750_registers
from .stm32h750 import renode as h750_renode


@dataclass(frozen=True)
class Family:
    name: str
    config_values: Callable[[Board, bool], tuple[ConfigValue, ...]]  # board_config.h defines (board, SDRAM used)
    out_files: Callable[[Board, int], dict[str, bytes]]  # OUT path -> bytes, given the request capacity


FAMILIES = {f.name: f for f in (
    Family(h750_renode.FAMILY, h750_registers.config_values, h750_renode.renode_files),
)}


def family_of(board: Board) -> Family | None:
    return FAMILIES.get(board.family) if board.family is not None else None


def config_header(board: Board, sdram_used: bool = False) -> tuple[ConfigValue, ...]:
    """Every define of the board's board_config.h (Board.config_header with its
    family's values); the SDRAM's only when the plan puts something there."""
    family = family_of(board)
    values = board.config_header(family.config_values(board, sdram_used) if family else ())
    names = [v.name for v in values]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"board '{board.name}': board.json's config sets {twice[0]}, which the {family.name} "
                        "family derives from the board's fields: drop it from config")
    return values


def family_files(board: Board, request_capacity: int) -> dict[str, bytes]:
    family = family_of(board)
    return family.out_files(board, request_capacity) if family else {}
