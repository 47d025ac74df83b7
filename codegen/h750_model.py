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
  chips) and an FSIZE that covers the window.  Until then a read of the
  window faults, as an unconfigured QUADSPI does on the chip.

The models are written from the same manuals as bringup.c, so they check
its sequencing and arithmetic, not the manuals themselves."""
from __future__ import annotations

from dataclasses import dataclass, field

HSI_HZ = 64_000_000
RCC, PWR = 0x400, 0x800  # offsets inside the 0x58024000 window
RCC_CR, RCC_CFGR, RCC_D1CFGR = RCC + 0x00, RCC + 0x10, RCC + 0x18
RCC_PLLCKSELR, RCC_PLLCFGR, RCC_PLL1DIVR = RCC + 0x28, RCC + 0x2C, RCC + 0x30
PWR_CSR1, PWR_CR3, PWR_D3CR = PWR + 0x04, PWR + 0x0C, PWR + 0x18
SYSCFG_PWRCR = 0x5800042C
RESET = {RCC_CR: 0x25, RCC_PLLCKSELR: 0x02020200, RCC_PLLCFGR: 0x01FF0000, RCC_PLL1DIVR: 0x01010280,
         PWR_CR3: 0x46, PWR_D3CR: 0x4000}
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


@dataclass
class QspiModel:
    chip: str
    chips: int
    window_bytes: int
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
        if 2 ** ((dcr >> 16 & 0x1F) + 1) < self.window_bytes:
            problems.append(f"FSIZE {dcr >> 16 & 0x1F} covers less than the {self.window_bytes}-byte flash")
        if problems:
            self.violations += problems
            return False
        self.mapped = match
        return True
