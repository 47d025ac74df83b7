"""The STM32H750's register values that board.json's typed fields imply:
board_config.h's QUADSPI defines, which bringup.c writes as they are
(RM0433: D1CCIPR.QSPISEL, CR.PRESCALER, DCR.CSHT; the read command from the
chip's datasheet), and the FMC SDRAM's (RM0433 FMC chapter: SDCRx, SDTRx,
SDCMR, SDRTR; D1CCIPR.FMCSEL; the part's mode register; the Cortex-M7 MPU
region that makes the SDRAM Normal memory).  Board holds the link and the
part in physical terms (clock, lines, cycles, nanoseconds); the encodings
are this chip's.  docs/sdram.md gives the sources of the SDRAM fields."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...board import FMC_KERNEL_CLOCKS, QSPI_KERNEL_CLOCKS, Board, ConfigValue, Sdram

# The fastest core clock bringup.c sets (revision V): busy-wait loops take at least one cycle an iteration.
CORE_HZ_MAX = 480_000_000
# RM0433, SDRTR: the refresh timer counts COUNT + 1 SDCLK cycles and the FMC
# leaves a 20-cycle margin for a refresh that must wait behind a read burst;
# COUNT must be at least 41.
REFRESH_MARGIN_CYCLES = 20
REFRESH_MIN_COUNT = 41
MWID = {8: 0, 16: 1, 32: 2}
# Cortex-M7 MPU RASR (ARMv7-M ARM, B3.5): XN, AP = full access, TEX 001 C 1 B 1
# = Normal memory, outer and inner write-back, read and write allocate, not shareable.
MPU_RASR_XN, MPU_RASR_AP_FULL = 1 << 28, 3 << 24
MPU_RASR_NORMAL_WBWA = (1 << 19) | (1 << 17) | (1 << 16)


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


@dataclass(frozen=True)
class SdramTiming:
    """SDTRx in SDCLK cycles (each field of the register holds cycles - 1)."""

    tmrd: int
    txsr: int
    tras: int
    trc: int
    twr: int
    trp: int
    trcd: int

    @property
    def sdtr(self) -> int:
        fields = (self.tmrd, self.txsr, self.tras, self.trc, self.twr, self.trp, self.trcd)
        return sum((n - 1) << (4 * i) for i, n in enumerate(fields))


def _cycles(ns: float, sdclk_hz: float) -> int:
    return max(1, math.ceil(ns * sdclk_hz / 1e9 - 1e-9))


def sdram_timing(s: Sdram) -> SdramTiming:
    """The part's minimum times in cycles of the fastest SDCLK (every slower
    clock only lengthens them).  TWR also covers RM0433's two rules for the
    FMC: TWR >= TRAS - TRCD and TWR >= TRC - TRCD - TRP."""
    f = s.sdclk_hz
    trcd, trp, tras, trc = (_cycles(ns, f) for ns in (s.t_rcd_ns, s.t_rp_ns, s.t_ras_ns, s.t_rc_ns))
    twr = max(_cycles(s.t_wr_ns, f), tras - trcd, trc - trcd - trp)
    t = SdramTiming(s.t_mrd_cycles, _cycles(s.t_xsr_ns, f), tras, trc, twr, trp, trcd)
    over = [k for k, v in vars(t).items() if v > 16]
    if over:
        raise ValueError(f"SDRAM {over[0]} needs more than the 16 cycles SDTR holds at {f / 1e6:g} MHz")
    return t


def sdram_sdcr(s: Sdram) -> int:
    """SDCRx: NC, NR, MWID, NB, CAS, SDCLK, RBURST (on: the FMC reads ahead
    for the next cache line), RPIPE 0."""
    return ((s.column_bits - 8) | (s.row_bits - 11) << 2 | MWID[s.data_bits] << 4
            | (1 if s.internal_banks == 4 else 0) << 6 | s.cas_latency << 7 | s.sdclk_div << 10 | 1 << 12)


def sdram_mode_register(s: Sdram) -> int:
    """The part's mode register: burst length 1 and sequential (the FMC
    makes its own bursts), the CAS latency SDCR has, standard operation,
    single-location writes (JEDEC SDR layout: BL A0-A2, BT A3, CL A4-A6,
    OP A7-A8, WB A9)."""
    return s.cas_latency << 4 | 1 << 9


def sdram_refresh_count(s: Sdram) -> int:
    """SDRTR.COUNT: one row's share of the refresh period at the slowest
    SDCLK the board runs (a faster clock refreshes more often: safe), less
    the FMC's margin."""
    per_row_s = s.refresh_ms / 1e3 / s.refresh_rows
    count = math.floor(per_row_s * s.kernel_hz_min / s.sdclk_div) - REFRESH_MARGIN_CYCLES
    if count < REFRESH_MIN_COUNT:
        raise ValueError(f"SDRAM refresh count {count} is below the FMC's minimum of {REFRESH_MIN_COUNT}")
    return count


def mpu_rasr(size: int) -> int:
    """The MPU region for the SDRAM: Normal write-back memory, no execution.
    The default memory map makes 0xC0000000-0xDFFFFFFF Device memory (XN,
    no caching, an unaligned access faults), where the firmware's int8 and
    float KV reads are unaligned-capable loads through the D-cache."""
    if size & (size - 1) or size < 32:
        raise ValueError(f"an MPU region is a power of two of at least 32 bytes, not {size}")
    return MPU_RASR_XN | MPU_RASR_AP_FULL | MPU_RASR_NORMAL_WBWA | (size.bit_length() - 2) << 1 | 1


def pin_list(pins) -> str:
    """"PD0" ... -> the C initialiser {{port (A=0), pin}, ...}."""
    return "{" + ", ".join(f"{{{ord(p[1]) - ord('A')}, {int(p[2:])}}}" for p in pins) + "}"


def sdram_values(board: Board, used: bool) -> tuple[ConfigValue, ...]:
    """The SDRAM's defines, only for a build that places something there
    (bringup.c starts the FMC only then: the defaults' boot stays as it was)."""
    s = board.sdram
    if s is None or not used:
        return ()
    region = board.memory.region(s.region)
    t = sdram_timing(s)
    return (
        ConfigValue("TLLM_SDRAM_BASE", f"0x{region.address:08X}u", f"{s.chip}, FMC SDRAM bank {s.fmc_bank}"),
        ConfigValue("TLLM_SDRAM_BANK", f"{s.fmc_bank}u", "SDCMR's command target (CTB1 or CTB2)"),
        ConfigValue("TLLM_SDRAM_FMCSEL", f"{FMC_KERNEL_CLOCKS.index(s.kernel_clock)}u",
                    f"D1CCIPR.FMCSEL: {s.kernel_clock}, {s.kernel_hz / 1e6:g} MHz"),
        ConfigValue("TLLM_SDRAM_SDCR", f"0x{sdram_sdcr(s):08X}u",
                    f"{s.column_bits} column / {s.row_bits} row bits, {s.data_bits}-bit, {s.internal_banks} banks, "
                    f"CAS {s.cas_latency}, SDCLK {s.kernel_hz / 1e6:g} MHz / {s.sdclk_div}, read burst"),
        ConfigValue("TLLM_SDRAM_SDTR", f"0x{t.sdtr:08X}u",
                    f"cycles at {s.sdclk_hz / 1e6:g} MHz: TMRD {t.tmrd} TXSR {t.txsr} TRAS {t.tras} TRC {t.trc} "
                    f"TWR {t.twr} TRP {t.trp} TRCD {t.trcd}"),
        ConfigValue("TLLM_SDRAM_MODE", f"0x{sdram_mode_register(s):03X}u",
                    f"burst 1, sequential, CAS {s.cas_latency}, standard, single writes"),
        ConfigValue("TLLM_SDRAM_REFRESH", f"{sdram_refresh_count(s)}u",
                    f"SDRTR.COUNT: {s.refresh_ms:g} ms / {s.refresh_rows} rows at "
                    f"{s.kernel_hz_min / s.sdclk_div / 1e6:.4g} MHz (the slowest SDCLK) - {REFRESH_MARGIN_CYCLES}"),
        ConfigValue("TLLM_SDRAM_POWERUP_LOOPS", f"{s.powerup_us * CORE_HZ_MAX // 1_000_000}u",
                    f"{s.powerup_us} us at up to {CORE_HZ_MAX // 1_000_000} MHz, one cycle or more per iteration"),
        ConfigValue("TLLM_SDRAM_PINS", pin_list(s.pins), f"{{port (A=0), pin}}: the FMC's {len(s.pins)} pins"),
        ConfigValue("TLLM_SDRAM_AF", f"{s.af}u", "FMC alternate function"),
        ConfigValue("TLLM_SDRAM_MPU_RASR", f"0x{mpu_rasr(region.size):08X}u",
                    f"MPU region: Normal write-back, XN, {region.size >> 20} MiB"),
    )


def config_values(board: Board, sdram_used: bool = False) -> tuple[ConfigValue, ...]:
    """Every register value of the family's board_config.h defines."""
    return qspi_values(board) + sdram_values(board, sdram_used)
