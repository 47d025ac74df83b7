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
        """The QUADSPI kernel clock D1CCIPR.QSPISEL selects: rcc_hclk3,
        pll1_q, pll2_r or per_ck (HSI by default), and its problems."""
        sel = self.regs.get(RCC_D1CCIPR, 0) >> 4 & 3
        if sel == 0:
            return self.hclk_hz(), []
        if sel == 1:
            vco_p, problems = self.pll1()
            div = self.regs[RCC_PLL1DIVR]
            return (vco_p * ((div >> 9 & 0x7F) + 1) // ((div >> 16 & 0x7F) + 1)), problems
        if sel == 2:
            hz, problems = self.pll2_r_hz()
            return hz, problems + ([] if hz else ["QUADSPI kernel clock PLL2R selected while PLL2 is off"])
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
