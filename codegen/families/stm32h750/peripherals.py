"""Register models of the STM32H750 blocks that bringup.c programs (RCC, PWR,
FLASH, QUADSPI and its flash chips), for the Unicorn runner (run_unicorn.py).

Each model does what the firmware waits for (ready flags follow their
enables, SWS follows SW, a QUADSPI command completes) and checks the rules
RM0433 and the flash datasheets set, recording each broken one in
`violations`:

* PLL1's source, dividers and range are written only while PLL1 is off;
* the core switches to PLL1 only once it is locked, with enough flash wait
  states, the AXI bus at most 240 MHz, and VOS0 above 400 MHz;
* the QUADSPI window becomes readable only in memory-mapped mode with a read
  command the board's chip answers (instruction, lines, address size,
  dummy cycles; QE set first where the chip needs it; dual-flash mode for two
  chips), a clock (kernel clock / prescaler) within the H750's SDR limit and
  the chip's table for those dummy cycles (CHIP_MAX_HZ), and an FSIZE that
  covers the window.  Until then a read of the
  window faults, as an unconfigured QUADSPI does on the chip;
* the FMC's SDRAM (FmcModel) becomes usable only after bring-up has clocked
  the FMC, described the part in SDCRx/SDTRx (the geometry board.json
  states, timings that cover the part's nanoseconds at the SDCLK in use),
  enabled the FMC and sent the part's command sequence in order (clock
  enable, precharge all, two or more auto-refreshes, the mode register with
  SDCR's CAS latency, then a refresh rate that keeps every row within the
  refresh period); a CPU access before that, and a first access the MPU
  leaves as Device memory (MpuModel), stop the run with one line;
* the MDMA moves a software-requested block transfer only between memories
  its chosen buses reach, with length fields that agree, the MDMA clock on,
  never on a busy channel, and never while the CPU touches the destination
  (MdmaModel: these violations stop the Unicorn run).

The models are written from the same manuals as bringup.c, so they check
its sequencing and arithmetic, not the manuals themselves."""
from __future__ import annotations

from dataclasses import dataclass, field

DBGMCU_IDC = {"V": 0x20036450, "Y": 0x10036450}  # REV_ID 0x2003 / 0x1003, DEV_ID 0x450: the silicon revisions
HSI_HZ = 64_000_000
RCC, PWR = 0x400, 0x800  # offsets inside the 0x58024000 window
RCC_CR, RCC_CFGR, RCC_D1CFGR = RCC + 0x00, RCC + 0x10, RCC + 0x18
RCC_PLLCKSELR, RCC_PLLCFGR, RCC_PLL1DIVR = RCC + 0x28, RCC + 0x2C, RCC + 0x30
RCC_PLL2DIVR, RCC_D1CCIPR = RCC + 0x38, RCC + 0x4C
PWR_CSR1, PWR_CR3, PWR_D3CR = PWR + 0x04, PWR + 0x0C, PWR + 0x18
SYSCFG_PWRCR = 0x5800042C
RESET = {RCC_CR: 0x25, RCC_PLLCKSELR: 0x02020200, RCC_PLLCFGR: 0x01FF0000, RCC_PLL1DIVR: 0x01010280,
         RCC_PLL2DIVR: 0x01010280, PWR_CR3: 0x46, PWR_D3CR: 0x4000}
# CR bit pairs (enable, ready): HSI, CSI, HSE, PLL1, PLL2, PLL3
READY_OF = ((0, 2), (7, 8), (16, 17), (24, 25), (26, 27), (28, 29))
AXI_MAX_HZ = 240_000_000
# D1CPRE / HPRE encodings: 0xxx /1, then /2 /4 /8 /16 /64 /128 /256 /512
PRESCALE = {8: 2, 9: 4, 10: 8, 11: 16, 12: 64, 13: 128, 14: 256, 15: 512}


@dataclass
class ClockModel:
    """RCC and PWR in one window (0x58024000), plus FLASH_ACR and ODEN."""

    regs: dict = field(default_factory=lambda: dict(RESET))
    flash_acr: int = 0
    oden: bool = False
    violations: list = field(default_factory=list)

    def read(self, offset: int) -> int:
        v = self.regs.get(offset, 0)
        if offset == RCC_CR:
            for en, rdy in READY_OF:
                v = (v | (1 << rdy)) if v >> en & 1 else (v & ~(1 << rdy))
            v |= 3 << 14  # D1CKRDY, D2CKRDY
        elif offset == RCC_CFGR:
            v = (v & ~(7 << 3)) | ((v & 7) << 3)  # SWS = SW
        elif offset == PWR_CSR1:
            v |= 1 << 13  # ACTVOSRDY
        elif offset == PWR_D3CR:
            v |= 1 << 13  # VOSRDY
        return v

    def write(self, offset: int, value: int) -> None:
        pll_on = self.regs[RCC_CR] >> 24 & 1
        if offset in (RCC_PLLCKSELR, RCC_PLLCFGR, RCC_PLL1DIVR) and pll_on and value != self.regs.get(offset):
            self.violations.append(f"RCC 0x{offset - RCC:03X} written while PLL1 is on")
        pll2_on = self.regs[RCC_CR] >> 26 & 1
        if offset in (RCC_PLLCKSELR, RCC_PLLCFGR, RCC_PLL2DIVR) and pll2_on and value != self.regs.get(offset):
            self.violations.append(f"RCC 0x{offset - RCC:03X} written while PLL2 is on")
        if offset == RCC_CFGR and (value & 7) == 3 and (self.regs.get(RCC_CFGR, 0) & 7) != 3:
            self._check_switch_to_pll()
        self.regs[offset] = value

    def _check_switch_to_pll(self) -> None:
        if not self.regs[RCC_CR] >> 24 & 1:
            self.violations.append("switched to PLL1 before it locked")
        sys_hz, problems = self.pll1()
        self.violations += problems
        d1cfgr = self.regs.get(RCC_D1CFGR, 0)
        axi_hz = sys_hz // PRESCALE.get(d1cfgr >> 8 & 0xF, 1) // PRESCALE.get(d1cfgr & 0xF, 1)
        if axi_hz > AXI_MAX_HZ:
            self.violations.append(f"AXI/AHB clock {axi_hz} Hz above {AXI_MAX_HZ}")
        if (self.flash_acr & 0xF) < 4 and axi_hz > 210_000_000:
            self.violations.append(f"flash latency {self.flash_acr & 0xF} too small for {axi_hz} Hz")
        vos1 = (self.regs.get(PWR_D3CR, 0) >> 14 & 3) == 3
        if sys_hz > 400_000_000 and not (vos1 and self.oden):
            self.violations.append(f"{sys_hz} Hz needs VOS0 (scale 1 and ODEN)")
        if sys_hz > 480_000_000:
            self.violations.append(f"core clock {sys_hz} Hz above 480 MHz")

    def pll1(self) -> tuple[int, list[str]]:
        """PLL1's P output in Hz from its registers, and what is wrong with
        them (read-only: the caller decides whether it is a violation)."""
        sel, cfg, div = self.regs[RCC_PLLCKSELR], self.regs[RCC_PLLCFGR], self.regs[RCC_PLL1DIVR]
        if sel & 3 != 0:
            return 0, ["PLL1 source is not HSI (the model has no crystal)"]
        m = sel >> 4 & 0x3F
        if m == 0:
            return 0, []
        problems = []
        ref = HSI_HZ // m
        lo, hi = ((1, 2), (2, 4), (4, 8), (8, 16))[cfg >> 2 & 3]
        if not lo * 1_000_000 <= ref <= hi * 1_000_000:
            problems.append(f"PLL1 input {ref} Hz outside PLL1RGE's {lo}-{hi} MHz")
        vco = ref * ((div & 0x1FF) + 1)
        if not (cfg >> 1 & 1) and not 192_000_000 <= vco <= 960_000_000:
            problems.append(f"PLL1 VCO {vco} Hz outside 192-960 MHz")
        if not cfg >> 16 & 1:
            problems.append("PLL1 P output not enabled")
        return vco // ((div >> 9 & 0x7F) + 1), problems

    def pll2_r_hz(self) -> tuple[int, list[str]]:
        """PLL2's R output in Hz (0 while PLL2 is off), and what is wrong
        with its settings (RM0433: input 1-16 MHz in the range PLL2RGE
        states, wide VCO 192-960 MHz, DIVR2EN set)."""
        if not self.regs[RCC_CR] >> 26 & 1:
            return 0, []
        sel, cfg, div = self.regs[RCC_PLLCKSELR], self.regs[RCC_PLLCFGR], self.regs[RCC_PLL2DIVR]
        if sel & 3 != 0:
            return 0, ["PLL2 source is not HSI (the model has no crystal)"]
        m = sel >> 12 & 0x3F
        if m == 0:
            return 0, ["PLL2 prescaler DIVM2 is 0 (PLL2 off)"]
        problems = []
        ref = HSI_HZ // m
        lo, hi = ((1, 2), (2, 4), (4, 8), (8, 16))[cfg >> 6 & 3]
        if not lo * 1_000_000 <= ref <= hi * 1_000_000:
            problems.append(f"PLL2 input {ref} Hz outside PLL2RGE's {lo}-{hi} MHz")
        vco = ref * ((div & 0x1FF) + 1)
        if not (cfg >> 5 & 1) and not 192_000_000 <= vco <= 960_000_000:
            problems.append(f"PLL2 VCO {vco} Hz outside 192-960 MHz")
        if not cfg >> 21 & 1:
            problems.append("PLL2 R output not enabled (DIVR2EN)")
        return vco // ((div >> 24 & 0x7F) + 1), problems

    def qspi_kernel_hz(self) -> tuple[int, list[str]]:
        """The QUADSPI kernel clock D1CCIPR.QSPISEL selects, and its problems."""
        return self._d1_kernel_hz(self.regs.get(RCC_D1CCIPR, 0) >> 4 & 3, "QUADSPI")

    def fmc_kernel_hz(self) -> tuple[int, list[str]]:
        """The FMC kernel clock D1CCIPR.FMCSEL selects, and its problems."""
        return self._d1_kernel_hz(self.regs.get(RCC_D1CCIPR, 0) & 3, "FMC")

    def _d1_kernel_hz(self, sel: int, user: str) -> tuple[int, list[str]]:
        """A D1 kernel clock selection (QSPISEL, FMCSEL: the same four
        sources): rcc_hclk3, pll1_q, pll2_r or per_ck (HSI by default)."""
        if sel == 0:
            return self.hclk_hz(), []
        if sel == 1:
            vco_p, problems = self.pll1()
            div = self.regs[RCC_PLL1DIVR]
            return (vco_p * ((div >> 9 & 0x7F) + 1) // ((div >> 16 & 0x7F) + 1)), problems
        if sel == 2:
            hz, problems = self.pll2_r_hz()
            return hz, problems + ([] if hz else [f"{user} kernel clock PLL2R selected while PLL2 is off"])
        return HSI_HZ, []

    def hclk_hz(self) -> int:
        """rcc_hclk3 (AHB/AXI): the QUADSPI kernel clock bringup.c uses."""
        d1cfgr = self.regs.get(RCC_D1CFGR, 0)
        return self.sysclk_hz() // PRESCALE.get(d1cfgr >> 8 & 0xF, 1) // PRESCALE.get(d1cfgr & 0xF, 1)

    def sysclk_hz(self) -> int:
        sw = self.regs.get(RCC_CFGR, 0) & 7
        return HSI_HZ if sw == 0 else (self.pll1()[0] if sw == 3 else 0)


# --------------------------------------------------------------- QUADSPI
QSPI_CR, QSPI_DCR, QSPI_SR, QSPI_FCR, QSPI_DLR, QSPI_CCR, QSPI_DR = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14, 0x20


@dataclass(frozen=True)
class ReadCommand:
    instr: int
    imode: int
    admode: int
    address_bytes: int
    dcyc: int
    dmode: int
    needs_qe: bool = False


# The memory-mapped reads each chip answers (datasheet defaults).
CHIP_READS = {
    "W25Q64JV": (ReadCommand(0x03, 1, 1, 3, 0, 1), ReadCommand(0x0B, 1, 1, 3, 8, 1),
                 ReadCommand(0x6B, 1, 1, 3, 8, 3, needs_qe=True)),
    "MT25QL512ABB": (ReadCommand(0x13, 1, 1, 4, 0, 1), ReadCommand(0x0C, 1, 1, 4, 8, 1),
                     ReadCommand(0x6C, 1, 1, 4, 8, 3)),
}


# The fastest clock each chip allows for a memory-mapped read with a given
# number of dummy cycles, SDR: {(instruction, dummy cycles): max Hz}.  A read
# with dummy cycles the table does not list is not answered.
# - W25Q64JV datasheet, AC electrical characteristics: FR 133 MHz for every
#   instruction but Read Data (03h), fR 50 MHz for 03h; its instruction table
#   fixes 8 dummy clocks for 0Bh and 6Bh.
# - MT25QL512ABB datasheet: 133 MHz max for all protocols in STR; its
#   supported-clock-frequencies table (STR) lets the default 8 dummy cycles of
#   FAST READ / QUAD OUTPUT FAST READ run at that maximum (fewer need a write
#   of the volatile configuration register, which bringup.c does not do);
#   READ (13h, no dummy cycles) limited here to 50 MHz, the conservative
#   figure of the family's READ row.
CHIP_MAX_HZ = {
    "W25Q64JV": {(0x03, 0): 50_000_000, (0x0B, 8): 133_000_000, (0x6B, 8): 133_000_000},
    "MT25QL512ABB": {(0x13, 0): 50_000_000, (0x0C, 8): 133_000_000, (0x6C, 8): 133_000_000},
}
# STM32H750 datasheet DS12556, QUADSPI characteristics (VDD 2.7-3.6 V): the
# SDR clock limit; DDR mode is not used by the boards.
H750_QSPI_SDR_MAX_HZ = 133_000_000


@dataclass
class QspiModel:
    chip: str
    chips: int
    window_bytes: int
    kernel_hz: object = None  # () -> Hz or (Hz, problems): the QUADSPI kernel clock now; None: not checked
    regs: dict = field(default_factory=dict)
    tcf: bool = False
    qe: bool = False
    volatile_write_enabled: bool = False
    write_enabled: bool = False
    commands: list = field(default_factory=list)
    mapped: ReadCommand | None = None
    violations: list = field(default_factory=list)
    _pending: int | None = None

    def read(self, offset: int) -> int:
        if offset == QSPI_SR:
            return (1 << 1) if self.tcf else 0  # never BUSY
        return self.regs.get(offset, 0)

    def write(self, offset: int, value: int) -> bool:
        """Returns True when the window has just become readable."""
        if offset == QSPI_FCR:
            if value & 2:
                self.tcf = False
            return False
        if offset == QSPI_DR and self._pending is not None:
            self._command(self._pending, value & 0xFF)
            self._pending = None
            return False
        self.regs[offset] = value
        if offset != QSPI_CCR:
            return False
        fmode, dmode = value >> 26 & 3, value >> 24 & 3
        if fmode == 0:
            if dmode:
                self._pending = value
            else:
                self._command(value, None)
            return False
        if fmode == 3:
            return self._memory_mapped(value)
        self.violations.append(f"QUADSPI mode {fmode} not modelled")
        return False

    def _command(self, ccr: int, data: int | None) -> None:
        instr, imode = ccr & 0xFF, ccr >> 8 & 3
        if not self.regs.get(QSPI_CR, 0) & 1:
            self.violations.append(f"QUADSPI command {instr:02X}h while the peripheral is disabled")
        self.commands.append((instr, imode, data))
        if self.chip == "W25Q64JV":
            if instr == 0x50:
                self.volatile_write_enabled = True
            elif instr == 0x06:
                self.write_enabled = True
            elif instr == 0x31 and data is not None:
                if not (self.volatile_write_enabled or self.write_enabled):
                    self.violations.append("status register 2 written without 50h/06h first")
                self.qe = bool(data & 2)
                self.volatile_write_enabled = self.write_enabled = False
        self.tcf = True

    def _memory_mapped(self, ccr: int) -> bool:
        cr, dcr = self.regs.get(QSPI_CR, 0), self.regs.get(QSPI_DCR, 0)
        got = ReadCommand(ccr & 0xFF, ccr >> 8 & 3, ccr >> 10 & 3, (ccr >> 12 & 3) + 1, ccr >> 18 & 0x1F,
                          ccr >> 24 & 3)
        known = {(r.instr, r.imode, r.admode, r.address_bytes, r.dcyc, r.dmode): r for r in CHIP_READS[self.chip]}
        match = known.get((got.instr, got.imode, got.admode, got.address_bytes, got.dcyc, got.dmode))
        problems = []
        if not cr & 1:
            problems.append("QUADSPI not enabled")
        if match is None:
            problems.append(f"{self.chip} does not answer read {got}")
        elif match.needs_qe and not self.qe:
            problems.append(f"{got.instr:02X}h needs the QE bit, never set")
        if bool(cr >> 6 & 1) != (self.chips == 2):
            problems.append("dual-flash mode (DFM) must match the number of chips")
        if self.kernel_hz is not None and match is not None:
            kernel = self.kernel_hz()
            kernel, clock_problems = kernel if isinstance(kernel, tuple) else (kernel, [])
            problems += clock_problems
            hz = kernel / ((cr >> 24 & 0xFF) + 1)
            limit = CHIP_MAX_HZ[self.chip].get((got.instr, got.dcyc))
            if ccr >> 31 & 1:
                problems.append("DDR mode (CCR.DDRM) is not modelled")
            elif hz > H750_QSPI_SDR_MAX_HZ:
                problems.append(f"QUADSPI clock {hz / 1e6:g} MHz above the H750's {H750_QSPI_SDR_MAX_HZ / 1e6:g} MHz "
                                "in SDR (DS12556)")
            elif limit is None or hz > limit:
                problems.append(f"{self.chip} read {got.instr:02X}h with {got.dcyc} dummy cycles runs at most "
                                f"{(limit or 0) / 1e6:g} MHz; QUADSPI clock is {hz / 1e6:g} MHz")
        if 2 ** ((dcr >> 16 & 0x1F) + 1) < self.window_bytes:
            problems.append(f"FSIZE {dcr >> 16 & 0x1F} covers less than the {self.window_bytes}-byte flash")
        if problems:
            self.violations += problems
            return False
        self.mapped = match
        return True


# ------------------------------------------------------------------ MDMA
# Register facts: RM0433's MDMA chapter and ST's stm32h750xx.h (field
# positions).  Channel x's registers sit at 0x40 + 0x40 * x in the window.
MDMA_BASE = 0x52000000
MDMA_CHANNELS = 16
MDMA_CISR, MDMA_CIFCR, MDMA_CESR, MDMA_CCR, MDMA_CTCR, MDMA_CBNDTR = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14
MDMA_CSAR, MDMA_CDAR, MDMA_CBRUR, MDMA_CLAR, MDMA_CTBR, MDMA_CMAR, MDMA_CMDR = 0x18, 0x1C, 0x20, 0x24, 0x28, 0x30, 0x34
MDMA_REG_NAMES = {MDMA_CISR: "CISR", MDMA_CIFCR: "CIFCR", MDMA_CESR: "CESR", MDMA_CCR: "CCR", MDMA_CTCR: "CTCR",
                  MDMA_CBNDTR: "CBNDTR", MDMA_CSAR: "CSAR", MDMA_CDAR: "CDAR", MDMA_CBRUR: "CBRUR",
                  MDMA_CLAR: "CLAR", MDMA_CTBR: "CTBR", MDMA_CMAR: "CMAR", MDMA_CMDR: "CMDR"}
# CCR.EN protects the transfer's configuration: RM0433 lets these be written
# only while the channel is disabled.
MDMA_PROTECTED = (MDMA_CTCR, MDMA_CBNDTR, MDMA_CSAR, MDMA_CDAR, MDMA_CBRUR, MDMA_CLAR, MDMA_CTBR)
CISR_TEIF, CISR_CTCIF, CISR_BRTIF, CISR_BTIF, CISR_TCIF, CISR_CRQA = 1, 2, 4, 8, 16, 1 << 16
CCR_EN, CCR_SWRQ = 1, 1 << 16
RCC_AHB3ENR = RCC + 0xD4
RCC_AHB3ENR_MDMAEN = 1
BURST_BEATS = (1, 4, 8, 16, 32, 64, 128)  # SBURST/DBURST encodings 0..6


@dataclass(frozen=True)
class BusTarget:
    """A memory the MDMA may address: [start, end), whether it is a TCM (the
    AHB/TCM side, CTBR bus bit 1, only) or on the AXI side (bus bit 0), and
    whether it can be written."""

    name: str
    start: int
    end: int
    tcm: bool
    writable: bool


def h750_bus_targets(regions) -> tuple[BusTarget, ...]:
    """board.json's memory regions as MDMA targets: ITCM/DTCM ("tcm" speed)
    on the AHB/TCM bus, the rest (AXI SRAM, SRAM1..4, internal flash, the
    QUADSPI window, SDRAM) on the AXI bus; flash is read-only."""
    return tuple(BusTarget(r.name, r.address, r.address + r.size, r.speed == "tcm", r.kind == "ram")
                 for r in regions)


@dataclass
class MdmaTransfer:
    channel: int
    src: int
    dst: int
    length: int
    polls_left: int


@dataclass
class MdmaModel:
    """MDMA for software-requested block transfers (TRGM 01 with one block,
    or 10: repeated blocks on one request), contiguous and incrementing on
    both sides.  A request (CCR.SWRQ with EN) checks the configuration; the
    bytes move when the firmware's poll of CISR finds the channel done
    (after `busy_polls` polls that still read busy), so until then the
    destination range is pending: `on_start`/`on_done` tell the emulator to
    watch it, and a CPU access to it is a violation (`cpu_access`).

    Every broken rule is one line in `violations` and is passed to
    `on_violation` (the Unicorn runner stops there): a register written while
    the MDMA clock is off in RCC, configuration written while the channel is
    enabled, a channel enabled again while its transfer is in flight, length
    fields that disagree (BNDT against the data sizes, TLEN against the
    bursts), misaligned addresses, an address the selected bus does not
    reach (TCMs only through the AHB/TCM bus, everything else only through
    AXI), a destination in flash, and QUADSPI not memory-mapped yet."""

    targets: tuple[BusTarget, ...]
    clock_enabled: object  # () -> bool: RCC AHB3ENR.MDMAEN
    copy: object  # (dst, src, n) -> None
    qspi_mapped: object = None  # (address) -> bool | None: is this QUADSPI-window address readable now?
    busy_polls: int = 1
    regs: dict = field(default_factory=dict)
    active: dict = field(default_factory=dict)  # channel -> MdmaTransfer
    bytes_moved: int = 0
    transfers: int = 0
    started: list = field(default_factory=list)  # (source, destination, bytes) of every transfer, in request order
    violations: list = field(default_factory=list)
    on_start: object = None  # (transfer) -> None
    on_done: object = None  # (transfer) -> None
    on_violation: object = None  # (line) -> None

    def _violate(self, line: str) -> None:
        self.violations.append(line)
        if self.on_violation is not None:
            self.on_violation(line)

    @staticmethod
    def _split(offset: int) -> tuple[int | None, int]:
        if offset < 0x40 or offset >= 0x40 + 0x40 * MDMA_CHANNELS:
            return None, offset
        return (offset - 0x40) // 0x40, (offset - 0x40) % 0x40

    def reg(self, channel: int, reg: int) -> int:
        return self.regs.get((channel, reg), 0)

    def read(self, offset: int) -> int:
        ch, reg = self._split(offset)
        if ch is None:
            if offset == 0:  # GISR0: one bit per channel with a flag up
                return sum(1 << c for c in range(MDMA_CHANNELS) if self.reg(c, MDMA_CISR) & 0x1F)
            return 0
        if not self.clock_enabled():
            return 0
        if reg == MDMA_CISR and ch in self.active:
            t = self.active[ch]
            if t.polls_left > 0:
                t.polls_left -= 1
            else:
                self._complete(t)
        return self.reg(ch, reg)

    def write(self, offset: int, value: int) -> None:
        ch, reg = self._split(offset)
        if ch is None:
            return
        name = MDMA_REG_NAMES.get(reg, f"0x{reg:02X}")
        if not self.clock_enabled():
            self._violate(f"MDMA channel {ch} {name} written while the MDMA clock is off (RCC AHB3ENR.MDMAEN)")
            return
        enabled = self.reg(ch, MDMA_CCR) & CCR_EN
        if reg == MDMA_CIFCR:
            self.regs[(ch, MDMA_CISR)] = self.reg(ch, MDMA_CISR) & ~(value & 0x1F)
            return
        if reg in MDMA_PROTECTED and enabled:
            self._violate(f"MDMA channel {ch} {name} written while the channel is enabled (the write is ignored)")
            return
        if reg != MDMA_CCR:
            if reg not in (MDMA_CISR, MDMA_CESR):  # read-only
                self.regs[(ch, reg)] = value
            return
        if value & CCR_EN and ch in self.active and not (value & CCR_SWRQ and enabled):
            self._violate(f"MDMA channel {ch} enabled while busy (its transfer of {self.active[ch].length} bytes "
                          "has not completed)")
            return
        if not value & CCR_EN and ch in self.active:  # disabling a running channel aborts it: nothing moves
            t = self.active.pop(ch)
            if self.on_done is not None:
                self.on_done(t)
        if value & CCR_SWRQ and ch in self.active:
            self._violate(f"MDMA channel {ch} requested again while busy (its transfer of "
                          f"{self.active[ch].length} bytes has not completed)")
            return
        self.regs[(ch, MDMA_CCR)] = value & ~CCR_SWRQ  # SWRQ is write-only
        if value & CCR_SWRQ:
            if not value & CCR_EN:
                self._violate(f"MDMA channel {ch} software request with the channel disabled (CCR.EN 0)")
                return
            self._request(ch)

    # -- a request ---------------------------------------------------
    def _target(self, addr: int, n: int) -> BusTarget | None:
        for t in self.targets:
            if t.start <= addr and addr + n <= t.end:
                return t
        return None

    def _request(self, ch: int) -> None:
        tcr, bndtr, tbr = self.reg(ch, MDMA_CTCR), self.reg(ch, MDMA_CBNDTR), self.reg(ch, MDMA_CTBR)
        src, dst = self.reg(ch, MDMA_CSAR), self.reg(ch, MDMA_CDAR)
        sinc, dinc, ssize, dsize = tcr & 3, tcr >> 2 & 3, 1 << (tcr >> 4 & 3), 1 << (tcr >> 6 & 3)
        sincos, dincos = 1 << (tcr >> 8 & 3), 1 << (tcr >> 10 & 3)
        sburst, dburst, tlen = tcr >> 12 & 7, tcr >> 15 & 7, (tcr >> 18 & 0x7F) + 1
        pke, trgm, swrm = tcr >> 25 & 1, tcr >> 28 & 3, tcr >> 30 & 1
        bndt, brc = bndtr & 0x1FFFF, bndtr >> 20 & 0xFFF
        p = f"MDMA channel {ch}:"
        problems = []
        if not swrm:
            problems.append(f"{p} software request without CTCR.SWRM (the request is ignored)")
        if trgm not in (1, 2) or (trgm == 1 and brc):
            problems.append(f"{p} CTCR.TRGM {trgm} with BRC {brc} is not a modelled block transfer")
        if sinc != 2 or dinc != 2 or sincos != ssize or dincos != dsize or self.reg(ch, MDMA_CBRUR) \
                or bndtr >> 18 & 3:
            problems.append(f"{p} only contiguous incrementing transfers are modelled (SINC/DINC 10, "
                            "SINCOS = SSIZE, DINCOS = DSIZE, BRUR 0)")
        if bndt == 0:
            problems.append(f"{p} length fields inconsistent: BNDT is 0")
        elif bndt % ssize or bndt % dsize:
            problems.append(f"{p} length fields inconsistent: BNDT {bndt} is not a multiple of SSIZE {ssize} "
                            f"and DSIZE {dsize}")
        if tlen % max(ssize, dsize):
            problems.append(f"{p} length fields inconsistent: TLEN+1 = {tlen} is not a multiple of the data size")
        if BURST_BEATS[min(sburst, 6)] * ssize > tlen or BURST_BEATS[min(dburst, 6)] * dsize > tlen:
            problems.append(f"{p} length fields inconsistent: a burst is longer than the {tlen}-byte buffer "
                            "(TLEN+1)")
        if ssize != dsize and not pke:
            problems.append(f"{p} SSIZE {ssize} and DSIZE {dsize} differ without packing (PKE)")
        if src % ssize or dst % dsize:
            problems.append(f"{p} address not aligned to its data size (source 0x{src:08X}, destination "
                            f"0x{dst:08X})")
        total = bndt * (brc + 1) if trgm == 2 else bndt
        for side, addr, bus in (("source", src, tbr >> 16 & 1), ("destination", dst, tbr >> 17 & 1)):
            t = self._target(addr, max(total, 1))
            if t is None:
                problems.append(f"{p} {side} 0x{addr:08X}..+{total} is not memory the MDMA reaches")
            elif t.tcm and not bus:
                problems.append(f"{p} {side} 0x{addr:08X} is in {t.name}, which the AXI bus cannot reach "
                                f"(CTBR.{'SBUS' if side == 'source' else 'DBUS'} must select the AHB/TCM bus)")
            elif not t.tcm and bus:
                problems.append(f"{p} {side} 0x{addr:08X} is in {t.name}, which the AHB/TCM bus cannot reach "
                                f"(CTBR.{'SBUS' if side == 'source' else 'DBUS'} must select AXI)")
            elif side == "destination" and not t.writable:
                problems.append(f"{p} destination 0x{addr:08X} is in {t.name}, which is read-only")
            elif side == "source" and self.qspi_mapped is not None and self.qspi_mapped(addr) is False:
                problems.append(f"{p} source 0x{addr:08X} is in the QUADSPI window before memory-mapped mode")
        if problems:
            self._violate(problems[0])
            return
        t = MdmaTransfer(ch, src, dst, total, self.busy_polls)
        self.started.append((src, dst, total))
        self.active[ch] = t
        self.regs[(ch, MDMA_CISR)] = self.reg(ch, MDMA_CISR) | CISR_CRQA
        if self.on_start is not None:
            self.on_start(t)

    def _complete(self, t: MdmaTransfer) -> None:
        del self.active[t.channel]
        if self.on_done is not None:
            self.on_done(t)  # stop watching the range before the model writes it
        self.copy(t.dst, t.src, t.length)
        self.bytes_moved += t.length
        self.transfers += 1
        isr = self.reg(t.channel, MDMA_CISR) & ~CISR_CRQA
        self.regs[(t.channel, MDMA_CISR)] = isr | CISR_CTCIF | CISR_BTIF | CISR_BRTIF | CISR_TCIF
        self.regs[(t.channel, MDMA_CCR)] = self.reg(t.channel, MDMA_CCR) & ~CCR_EN  # EN clears at the end

    def cpu_access(self, addr: int, size: int, write: bool) -> str | None:
        """The violation line when the CPU touches a pending destination."""
        for t in self.active.values():
            if t.dst < addr + size and addr < t.dst + t.length:
                line = (f"MDMA channel {t.channel}: CPU {'wrote' if write else 'read'} 0x{addr:08X}, inside the "
                        f"stream buffer 0x{t.dst:08X}..+{t.length} whose transfer has not completed "
                        "(call tllm_board_copy_wait first)")
                self._violate(line)
                return line
        return None


# ------------------------------------------------------------------ FMC SDRAM
# Register facts: RM0433's FMC chapter and ST's stm32h750xx.h (field
# positions): SDCRx at 0x140/0x144, SDTRx at 0x148/0x14C, SDCMR, SDRTR, SDSR.
# The H7's SDSR has no busy flag (the F4/F7's BUSY is gone): bring-up polls
# nothing, and the model never reads busy.
FMC_BASE = 0x52004000
FMC_BCR1, FMC_SDCR1, FMC_SDCR2, FMC_SDTR1, FMC_SDTR2 = 0x000, 0x140, 0x144, 0x148, 0x14C
FMC_SDCMR, FMC_SDRTR, FMC_SDSR = 0x150, 0x154, 0x158
FMC_REG_NAMES = {FMC_BCR1: "BCR1", FMC_SDCR1: "SDCR1", FMC_SDCR2: "SDCR2", FMC_SDTR1: "SDTR1", FMC_SDTR2: "SDTR2",
                 FMC_SDCMR: "SDCMR", FMC_SDRTR: "SDRTR", FMC_SDSR: "SDSR"}
FMC_RESET = {FMC_BCR1: 0x000030DB, FMC_SDCR1: 0x2D0, FMC_SDCR2: 0x2D0, FMC_SDTR1: 0x0FFFFFFF, FMC_SDTR2: 0x0FFFFFFF}
FMC_BCR1_FMCEN = 1 << 31
RCC_AHB3ENR_FMCEN = 1 << 12
# SDCMR.MODE, in the order the part's power-up needs them (then SDRTR).
SDRAM_SEQUENCE = ((1, "clock enable"), (2, "precharge all"), (3, "auto-refresh"), (4, "load mode register"))
SDRAM_REFRESH_MARGIN, SDRAM_REFRESH_MIN = 20, 41  # RM0433 SDRTR: COUNT = period x SDCLK - 20, at least 41
SDTR_FIELDS = ("TMRD", "TXSR", "TRAS", "TRC", "TWR", "TRP", "TRCD")


@dataclass
class FmcModel:
    """The FMC's SDRAM controller with the board's part (board.json "sdram",
    a board.Sdram).  `ready` once the command sequence and the refresh rate
    are in; until then a CPU access to the SDRAM is a violation
    (`cpu_access`).  Every broken rule is one line in `violations`, passed to
    `on_violation` (the Unicorn runner stops there); `on_ready` tells the
    emulator the SDRAM answers from now on."""

    sdram: object  # board.Sdram
    clock_enabled: object  # () -> bool: RCC AHB3ENR.FMCEN
    kernel_hz: object = None  # () -> (Hz, problems): the FMC kernel clock now; None: the board's kernel_hz
    regs: dict = field(default_factory=lambda: dict(FMC_RESET))
    step: int = 0  # commands of SDRAM_SEQUENCE done
    ready: bool = False
    violations: list = field(default_factory=list)
    on_violation: object = None  # (line) -> None
    on_ready: object = None  # () -> None

    def _violate(self, line: str) -> None:
        self.violations.append(line)
        if self.on_violation is not None:
            self.on_violation(line)

    @property
    def _bank_regs(self) -> tuple[int, int]:
        return (FMC_SDCR1, FMC_SDTR1) if self.sdram.fmc_bank == 1 else (FMC_SDCR2, FMC_SDTR2)

    def read(self, offset: int) -> int:
        if offset == FMC_SDSR:  # RE 0; MODESx 00: normal mode once the sequence is done
            return 0
        return self.regs.get(offset, 0)

    def write(self, offset: int, value: int) -> None:
        name = FMC_REG_NAMES.get(offset, f"0x{offset:03X}")
        if not self.clock_enabled():
            self._violate(f"FMC {name} written while the FMC clock is off (RCC AHB3ENR.FMCEN)")
            return
        if offset == FMC_SDCMR:
            self._command(value)
        elif offset == FMC_SDRTR:
            self._refresh_rate(value)
        else:
            self.regs[offset] = value

    def sdclk_hz(self) -> float:
        hz = self.kernel_hz()[0] if self.kernel_hz is not None else self.sdram.kernel_hz
        div = self.regs[FMC_SDCR1] >> 10 & 3  # SDCLK: from SDCR1 for both banks
        return hz / div if div in (2, 3) else 0.0

    # -- the configuration, checked at the first command -------------
    def _configuration_problem(self) -> str | None:
        s = self.sdram
        sdcr_reg, sdtr_reg = self._bank_regs
        sdcr = self.regs[sdcr_reg]
        want = {"NC": (0, s.column_bits - 8), "NR": (2, s.row_bits - 11), "MWID": (4, {8: 0, 16: 1, 32: 2}[s.data_bits]),
                "NB": (6, 1 if s.internal_banks == 4 else 0), "CAS": (7, s.cas_latency)}
        width = {"NC": 3, "NR": 3, "MWID": 3, "NB": 1, "CAS": 3}
        for f, (pos, v) in want.items():
            if sdcr >> pos & width[f] != v:
                return (f"SDCR{s.fmc_bank}.{f} is {sdcr >> pos & width[f]}, the {s.chip} as wired needs {v} "
                        "(board.json sdram)")
        if self.regs[FMC_SDCR1] >> 10 & 3 not in (2, 3):
            return "SDCR1.SDCLK is not 2 or 3: no SDRAM clock (bank 2 takes SDCLK from SDCR1)"
        if self.kernel_hz is not None:
            hz, problems = self.kernel_hz()
            if problems:
                return problems[0]
        return self._timing_problem()

    def _timing_problem(self) -> str | None:
        """SDTR's cycles against the part's nanoseconds at the SDCLK in use
        (TRC and TRP of bank 2 come from SDTR1, RM0433)."""
        s, f = self.sdram, self.sdclk_hz()
        own = self.regs[self._bank_regs[1]]
        shared = self.regs[FMC_SDTR1]
        cycles = {n: ((shared if n in ("TRC", "TRP") else own) >> (4 * i) & 0xF) + 1 for i, n in enumerate(SDTR_FIELDS)}
        need_ns = {"TXSR": s.t_xsr_ns, "TRAS": s.t_ras_ns, "TRC": s.t_rc_ns, "TWR": s.t_wr_ns, "TRP": s.t_rp_ns,
                   "TRCD": s.t_rcd_ns}
        for n, ns in need_ns.items():
            if cycles[n] * 1e9 / f < ns - 1e-6:
                return (f"SDTR.{n} {cycles[n]} cycles = {cycles[n] * 1e9 / f:.1f} ns at SDCLK {f / 1e6:g} MHz, "
                        f"the {s.chip} needs {ns:g} ns")
        if cycles["TMRD"] < s.t_mrd_cycles:
            return f"SDTR.TMRD {cycles['TMRD']} cycles, the {s.chip} needs {s.t_mrd_cycles}"
        if cycles["TWR"] < max(cycles["TRAS"] - cycles["TRCD"], cycles["TRC"] - cycles["TRCD"] - cycles["TRP"]):
            return "SDTR.TWR below TRAS - TRCD or TRC - TRCD - TRP (RM0433)"
        return None

    # -- commands ------------------------------------------------------
    def _command(self, value: int) -> None:
        mode, ctb2, ctb1 = value & 7, value >> 3 & 1, value >> 4 & 1
        nrfs, mrd = (value >> 5 & 0xF) + 1, value >> 9 & 0x1FFF
        bank = self.sdram.fmc_bank
        if (ctb1, ctb2) != ((1, 0) if bank == 1 else (0, 1)):
            self._violate(f"FMC SDCMR targets {'bank 1' if ctb1 else ''}{' and ' if ctb1 and ctb2 else ''}"
                          f"{'bank 2' if ctb2 else ''}{'no bank' if not ctb1 and not ctb2 else ''}; "
                          f"the SDRAM is on bank {bank} only")
            return
        if not self.regs[FMC_BCR1] & FMC_BCR1_FMCEN:
            self._violate("FMC SDRAM command while the FMC is disabled (BCR1.FMCEN)")
            return
        if mode == 0 and self.ready:
            return  # normal mode: nothing to do
        expected = SDRAM_SEQUENCE[self.step] if self.step < len(SDRAM_SEQUENCE) else None
        names = dict(SDRAM_SEQUENCE)
        if expected is None or mode != expected[0]:
            got = names.get(mode, f"mode {mode}")
            self._violate(f"FMC SDRAM {got} out of order: "
                          f"{'the sequence is complete' if expected is None else expected[1] + ' comes next'}")
            return
        if self.step == 0:
            problem = self._configuration_problem()
            if problem is not None:
                self._violate(f"FMC: {problem}")
                return
        if mode == 3 and nrfs < 2:
            self._violate(f"FMC SDRAM auto-refresh x{nrfs}: the {self.sdram.chip} needs two or more")
            return
        if mode == 4:
            problem = self._mode_register_problem(mrd)
            if problem is not None:
                self._violate(f"FMC SDRAM mode register 0x{mrd:03X}: {problem}")
                return
        self.step += 1

    def _mode_register_problem(self, mrd: int) -> str | None:
        cas = self.regs[self._bank_regs[0]] >> 7 & 3
        if mrd >> 4 & 7 != cas:
            return f"CAS latency {mrd >> 4 & 7}, SDCR has {cas}"
        if mrd & 7:
            return "burst length is not 1 (the FMC makes its own bursts)"
        if mrd >> 7 & 3:
            return "not standard operation"
        return None

    def _refresh_rate(self, value: int) -> None:
        self.regs[FMC_SDRTR] = value
        count = value >> 1 & 0x1FFF
        if self.step < len(SDRAM_SEQUENCE):
            self._violate(f"FMC SDRTR written before the {SDRAM_SEQUENCE[self.step][1]} command: the refresh rate "
                          "comes last")
            return
        s, f = self.sdram, self.sdclk_hz()
        interval = (count + SDRAM_REFRESH_MARGIN) / f if f else float("inf")
        limit = s.refresh_ms / 1e3 / s.refresh_rows
        if count < SDRAM_REFRESH_MIN:
            self._violate(f"FMC SDRTR.COUNT {count} is below {SDRAM_REFRESH_MIN} (RM0433)")
        elif interval > limit + 1e-12:
            self._violate(f"FMC SDRTR.COUNT {count}: a row every {interval * 1e6:.2f} us at SDCLK {f / 1e6:g} MHz, "
                          f"the {s.chip} needs {limit * 1e6:.3f} us ({s.refresh_ms:g} ms / {s.refresh_rows} rows)")
        elif not self.ready:
            self.ready = True
            if self.on_ready is not None:
                self.on_ready()

    def cpu_access(self, addr: int, write: bool) -> str | None:
        """The violation line for a CPU access before the SDRAM is ready."""
        if self.ready:
            return None
        todo = SDRAM_SEQUENCE[self.step][1] if self.step < len(SDRAM_SEQUENCE) else "the refresh rate (SDRTR)"
        line = (f"FMC: CPU {'wrote' if write else 'read'} 0x{addr:08X} in the SDRAM before its bring-up ({todo} "
                "not done)")
        self._violate(line)
        return line


# ------------------------------------------------------------------ MPU
# Cortex-M7 MPU (ARMv7-M ARM B3.5): CTRL, RNR, RBAR, RASR at 0xE000ED94..A0;
# the default memory map makes 0xA0000000-0xDFFFFFFF Device memory (XN).
MPU_BASE = 0xE000ED90
MPU_CTRL, MPU_RNR, MPU_RBAR, MPU_RASR = 0x4, 0x8, 0xC, 0x10
MPU_REGIONS = 16  # MPU_TYPE.DREGION on the Cortex-M7 with the H7's configuration


@dataclass
class MpuModel:
    """Which attributes the MPU gives an address: the regions as written."""

    ctrl: int = 0
    rnr: int = 0
    regions: dict = field(default_factory=dict)  # number -> [rbar, rasr]

    def write(self, offset: int, value: int) -> None:
        if offset == MPU_CTRL:
            self.ctrl = value
        elif offset == MPU_RNR:
            self.rnr = value & 0xFF
        elif offset == MPU_RBAR:
            if value & 0x10:  # VALID: the region number comes with the address
                self.rnr = value & 0xF
            self.regions.setdefault(self.rnr, [0, 0])[0] = value & ~0x1F
        elif offset == MPU_RASR:
            self.regions.setdefault(self.rnr, [0, 0])[1] = value

    def region_of(self, addr: int) -> tuple[int, int] | None:
        """(number, RASR) of the enabled region that decides `addr` (the highest number wins)."""
        for n in sorted(self.regions, reverse=True):
            base, rasr = self.regions[n]
            size = 1 << ((rasr >> 1 & 0x1F) + 1)
            if rasr & 1 and base <= addr < base + size and not rasr >> (8 + (addr - base) // (size // 8)) & 1:
                return n, rasr
        return None

    def normal_memory_problem(self, addr: int) -> str | None:
        """Why `addr` is not Normal cacheable memory for the core, or None."""
        if not self.ctrl & 1:
            return f"the MPU is off: the default memory map makes 0x{addr:08X} Device memory (uncached, XN)"
        hit = self.region_of(addr)
        if hit is None:
            return f"no enabled MPU region covers 0x{addr:08X}: the default map makes it Device memory"
        n, rasr = hit
        tex, c, b = rasr >> 19 & 7, rasr >> 17 & 1, rasr >> 16 & 1
        if not (tex & 4 or (tex == 0 and c) or (tex == 1 and (c or not b))):
            return f"MPU region {n} makes 0x{addr:08X} Device or strongly-ordered (TEX {tex} C {c} B {b})"
        if rasr >> 24 & 7 not in (3,):
            return f"MPU region {n} does not give full read/write access (AP {rasr >> 24 & 7})"
        return None
