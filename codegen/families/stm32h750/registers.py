"""The STM32H750's register values that board.json's typed fields imply:
board_config.h's QUADSPI defines, which bringup.c writes as they are
(RM0433: D1CCIPR.QSPISEL, CR.PRESCALER, DCR.CSHT; the read command from the
chip's datasheet).  Board holds the link in physical terms (clock, lines,
cycles); the encodings are this chip's."""
from __future__ import annotations

from ...board import QSPI_KERNEL_CLOCKS, Board, ConfigValue


def qspi_values(board: Board) -> tuple[ConfigValue, ...]:
    q = board.qspi_flash
    if q is None:
        return ()
    return (ConfigValue("TLLM_QSPI_KERNEL_SEL", f"{QSPI_KERNEL_CLOCKS.index(q.kernel_clock)}u",
                        f"D1CCIPR.QSPISEL: {q.kernel_clock}, {q.kernel_hz / 1e6:g} MHz"),
            ConfigValue("TLLM_QSPI_PRESCALER", f"{q.prescaler - 1}u",
                        f"QUADSPI clock {q.kernel_hz / 1e6:g} MHz / {q.prescaler} = {q.clock_hz / 1e6:g} MHz"),
            ConfigValue("TLLM_QSPI_READ_INSTR", f"0x{q.read_instr:02X}u", f"{q.chip} memory-mapped read"),
            ConfigValue("TLLM_QSPI_DCYC", f"{q.dummy_cycles}u", "dummy cycles of the read"),
            ConfigValue("TLLM_QSPI_CSHT", f"{q.cs_high_cycles - 1}u",
                        f"chip select high {q.cs_high_cycles} cycles between commands"))
