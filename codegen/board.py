"""Boards as typed data: boards/<name>/board.json loaded and validated in
one place.

A board is data, not code paths (as tinygrad's renderers are): its CPU
profile says how to compile for it, its memory regions where buffers may
go, its weight and request storage how the host hands them over, and its
runner which emulator (or none) boots it.  Everything downstream reads a
`Board`; nothing else parses board.json.  An unknown key or a bad value is
a one-line error naming the file and the key, so a typo never becomes a
silent default.

Compiler flags are stated once, per CPU profile (CPU_PROFILES); a board adds
only its optimisation level and section flags.  The numerics contract
(`NUMERICS_CFLAGS`) is separate from both: it is what bit-exactness needs
on every target, and the runtime's CMake target carries it too."""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import UserError
from .memory_map import KINDS, PLACEMENTS, SPEEDS, USES, BoardMemory, Region, host_memory
from .resources import boards_dir

# -ffp-contract=off: no fused multiply-add, so x86 and the M7 round alike
# (gcc fuses a*b+c into VFMA on the M7 otherwise); -fno-math-errno: sqrtf is
# one VSQRT, with no errno side path.  Fast-math is never allowed (the
# runtime #errors on __FAST_MATH__).
NUMERICS_CFLAGS = ("-fno-math-errno", "-ffp-contract=off")


@dataclass(frozen=True)
class CpuProfile:
    """How to compile for one CPU: flags for compiling and for linking, and
    the kernel set (weight layout) its boards default to."""

    name: str
    toolchain: str  # "arm-none-eabi" | "host"
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    kernels: str


_M7 = ("-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-d16", "-mfloat-abi=hard")
CPU_PROFILES = {
    # Cortex-M7 with the double-precision FPv5-D16 (STM32H750, QEMU mps2-an500)
    "cortex-m7": CpuProfile("cortex-m7", "arm-none-eabi", _M7, _M7, "cortex-m7"),
    # the build machine's own gcc
    "host": CpuProfile("host", "host", (), (), "portable"),
}


@dataclass(frozen=True)
class Storage:
    """Where the weights blob or the request lives: "external" / "memory"
    (an address the host or flasher fills), "incbin" (linked into the
    image), "argv" (a file named on the host's command line)."""

    storage: str
    address: int | None = None
    max_bytes: int | None = None
    region: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Uart:
    instance: str
    base: int
    tx_pin: str
    rx_pin: str
    af: int
    baud: int
    note: str = ""


@dataclass(frozen=True)
class Emulator:
    """A QEMU machine: the program, its arguments, and the tick rate the
    board's instruction counter assumes (generated into board_config.h)."""

    program: str
    args: tuple[str, ...]
    instructions_per_tick: int


@dataclass(frozen=True)
class RunSpec:
    emulator: str  # a key of build.RUNNERS: "host" | "qemu" | "unicorn"
    note: str = ""


QSPI_KERNEL_CLOCKS = ("hclk3", "pll1_q", "pll2_r", "per_ck")  # D1CCIPR.QSPISEL 0..3 (RM0433)


@dataclass(frozen=True)
class QspiFlash:
    """The QUADSPI link to the weights flash, as bringup.c programs it (the
    fields become board_config.h defines) and as the timing model prices it.
    Each limit's source is in `note`; families/stm32h750/peripherals.py holds the chips' and the
    H750's tables the Unicorn model checks these values against."""

    chip: str
    chips: int  # 2: dual-flash mode, twice the data lines
    kernel_clock: str = "hclk3"  # D1CCIPR.QSPISEL: "hclk3" | "pll1_q" | "pll2_r" | "per_ck"
    kernel_hz: int = 240_000_000  # that clock's frequency once bringup.c has set the clocks
    prescaler: int = 3  # divider of the kernel clock (CR.PRESCALER + 1)
    ddr: bool = False
    read_instr: int = 0x6B  # the memory-mapped read command
    instr_lines: int = 1
    address_lines: int = 1
    address_bytes: int = 3
    data_lines: int = 4  # per chip
    dummy_cycles: int = 8
    cs_high_cycles: int = 3  # DCR.CSHT + 1: chip-select high time between bursts
    note: str = ""

    @property
    def clock_hz(self) -> float:
        return self.kernel_hz / self.prescaler

    @property
    def bytes_per_s(self) -> float:
        """The data phase's rate: clock x lines x chips (x2 for DDR) / 8."""
        return self.clock_hz * self.data_lines * self.chips * (2 if self.ddr else 1) / 8

    @property
    def burst_overhead_cycles(self) -> float:
        """QUADSPI clocks a memory-mapped burst spends before its first data
        byte (instruction, address, dummy cycles) and after it (chip select
        high): what every new, non-sequential burst costs."""
        per_bit = 0.5 if self.ddr else 1.0
        return (8 / self.instr_lines + 8 * self.address_bytes / self.address_lines * per_bit
                + self.dummy_cycles + self.cs_high_cycles)


FMC_KERNEL_CLOCKS = ("hclk3", "pll1_q", "pll2_r", "per_ck")  # D1CCIPR.FMCSEL 0..3 (RM0433)
SDRAM_BANK_ADDRESS = {1: 0xC0000000, 2: 0xD0000000}  # FMC SDRAM banks with BCR1.BMAP at reset (RM0433)


@dataclass(frozen=True)
class Sdram:
    """The external SDRAM on the FMC, in physical terms: the part's geometry
    and timings (from its datasheet), its wiring (bank, data width, pins) and
    the FMC clock (families/stm32h750/registers.py derives the register
    encodings into board_config.h; the Unicorn model checks bring-up against
    the same fields).  The region it backs is a memory_regions entry with use
    "kv": the KV cache goes there only when `--kv-region` asks."""

    chip: str
    region: str  # the memory_regions entry it backs
    fmc_bank: int  # 1: SDNE0/SDCKE0 at 0xC0000000, 2: SDNE1/SDCKE1 at 0xD0000000
    data_bits: int  # the data lines wired (8, 16 or 32)
    column_bits: int
    row_bits: int
    internal_banks: int
    cas_latency: int  # SDCLK cycles
    kernel_hz: int  # the FMC kernel clock once bringup.c has set the clocks (revision V)
    kernel_hz_min: int  # the slowest it runs at (revision Y): the refresh count must hold there too
    sdclk_div: int  # SDCLK = kernel clock / this (SDCR.SDCLK: 2 or 3)
    t_rcd_ns: float
    t_rp_ns: float
    t_ras_ns: float
    t_rc_ns: float
    t_wr_ns: float
    t_xsr_ns: float
    t_mrd_cycles: int
    refresh_ms: float  # every row refreshed within this
    refresh_rows: int
    powerup_us: int  # after the clock starts, before the first command (the part's power-up wait)
    pins: tuple[str, ...]  # "PD0" ...: the FMC pins, all on alternate function `af`
    af: int = 12
    kernel_clock: str = "hclk3"  # D1CCIPR.FMCSEL
    note: str = ""

    @property
    def bytes(self) -> int:
        """What the wiring addresses: columns x rows x internal banks x data width."""
        return (1 << (self.column_bits + self.row_bits)) * self.internal_banks * self.data_bits // 8

    @property
    def sdclk_hz(self) -> float:
        return self.kernel_hz / self.sdclk_div

    @property
    def bytes_per_s(self) -> float:
        """The data rate of a burst: one word of the wired width per SDCLK."""
        return self.sdclk_hz * self.data_bits / 8


@dataclass(frozen=True)
class FlashTool:
    tool: str
    openocd: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class ConfigValue:
    """One #define of the generated board_config.h."""

    name: str
    value: str
    note: str = ""


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    cpu: CpuProfile
    optimize: str  # e.g. "-O2"
    extra_cflags: tuple[str, ...]
    extra_ldflags: tuple[str, ...]
    libs: tuple[str, ...]
    sources: tuple[str, ...]  # the board's C sources/headers, own dir first, then its family's
    weights: Storage
    request: Storage
    run: RunSpec
    memory: BoardMemory
    stack_bytes: int
    family: str | None = None  # boards/<family>/ and families/<family>/: what boards of one chip share
    linker_script: str | None = None
    arena_section: str | None = None
    emulator: Emulator | None = None
    uart: Uart | None = None
    qspi_flash: QspiFlash | None = None
    sdram: Sdram | None = None
    flash: FlashTool | None = None
    clock: str = ""
    config: tuple[ConfigValue, ...] = ()  # board_config.h's board-specific defines

    def config_header(self, family_values: tuple[ConfigValue, ...] = ()) -> tuple[ConfigValue, ...]:
        """Every define of the generated board_config.h: those derived from the
        typed fields (stated once, in board.json), the family's register values
        (families.config_values derives them from the same fields), then the
        board's own."""
        derived = []
        if self.uart is not None:
            derived += [ConfigValue("TLLM_UART_BASE", f"0x{self.uart.base:08X}u", self.uart.instance),
                        ConfigValue("TLLM_UART_AF", f"{self.uart.af}u", f"{self.uart.tx_pin} TX / {self.uart.rx_pin} RX"),
                        ConfigValue("TLLM_UART_BAUD", f"{self.uart.baud}u", "")]
        if self.request.address is not None:
            derived.append(ConfigValue("TLLM_REQUEST_ADDR", f"0x{self.request.address:08X}u", self.request.note))
        if self.request.max_bytes is not None:
            derived.append(ConfigValue("TLLM_REQUEST_MAX", f"{self.request.max_bytes}u", "bytes of the request block"))
        derived += family_values
        if self.emulator is not None:
            derived.append(ConfigValue("TLLM_INSTR_PER_TICK", f"{self.emulator.instructions_per_tick}u",
                                       "emulated instructions per timer tick (QEMU -icount shift=0)"))
        return tuple(derived) + self.config

    @property
    def toolchain(self) -> str:
        return self.cpu.toolchain

    @property
    def is_arm(self) -> bool:
        return self.toolchain == "arm-none-eabi"

    @property
    def cflags(self) -> tuple[str, ...]:
        """Every flag the board's C is compiled with, in a fixed order: CPU,
        optimisation, the numerics contract, the board's own."""
        return self.cpu.cflags + (self.optimize,) + NUMERICS_CFLAGS + self.extra_cflags

    @property
    def ldflags(self) -> tuple[str, ...]:
        return self.cpu.ldflags + self.extra_ldflags

    @property
    def kernels(self) -> str:
        return self.cpu.kernels

    @property
    def directory(self) -> Path:
        return boards_dir() / self.name

    @property
    def search_dirs(self) -> tuple[Path, ...]:
        """Where a board's files are found, most specific first: its own
        folder, its family's (boards/stm32h750: the two STM32H750 boards), the
        Cortex-M code every Arm board shares (boards/cortex-m: the reset
        handler), then what every board may use (boards/common)."""
        dirs = [self.directory]
        if self.family is not None:
            dirs.append(boards_dir() / self.family)
        if self.is_arm:
            dirs.append(boards_dir() / "cortex-m")
        dirs.append(boards_dir() / "common")
        return tuple(dirs)

    def file(self, name: str) -> Path:
        """The first of search_dirs holding `name` (the board's own path when none does)."""
        return next((d / name for d in self.search_dirs if (d / name).is_file()), self.directory / name)

    def source_paths(self) -> list[Path]:
        return [self.file(s) for s in self.sources]


class _BoardFileError(UserError):
    pass


def _fail(path: Path, key: str, why: str) -> None:
    raise _BoardFileError(f"{path}: {key}: {why}")


def _int(path: Path, key: str, v: Any, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        _fail(path, key, f"expected an integer or a 0x... string, got {v!r}")
    try:
        n = int(v, 0) if isinstance(v, str) else v
    except ValueError:
        _fail(path, key, f"expected an integer or a 0x... string, got {v!r}")
    if n < minimum:
        _fail(path, key, f"must be at least {minimum}, got {n}")
    return n


def _str(path: Path, key: str, v: Any, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str):
        _fail(path, key, f"expected a string, got {v!r}")
    if choices is not None and v not in choices:
        _fail(path, key, f"{v!r} is not one of {', '.join(choices)}")
    return v


def _strs(path: Path, key: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        _fail(path, key, f"expected a list of strings, got {v!r}")
    return tuple(v)


def _object(path: Path, key: str, v: Any, allowed: set[str], required: set[str]) -> dict:
    if not isinstance(v, dict):
        _fail(path, key, f"expected an object, got {v!r}")
    unknown = sorted(set(v) - allowed)
    if unknown:
        _fail(path, key, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(v))
    if missing:
        _fail(path, key, f"missing key {missing[0]!r}")
    return v


def _keys(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def _storage(path: Path, key: str, v: Any) -> Storage:
    d = _object(path, key, v, _keys(Storage), {"storage"})
    return Storage(_str(path, f"{key}.storage", d["storage"], ("external", "memory", "incbin", "argv")),
                   _int(path, f"{key}.address", d["address"]) if "address" in d else None,
                   _int(path, f"{key}.max_bytes", d["max_bytes"], 1) if "max_bytes" in d else None,
                   _str(path, f"{key}.region", d["region"]) if "region" in d else None,
                   _str(path, f"{key}.note", d.get("note", "")))


def _regions(path: Path, raw: Any, placement: Any, stack_region: Any, name: str) -> BoardMemory:
    if raw is None:  # the host: one unbounded region, whatever the OS gives
        return host_memory(name)
    if not isinstance(raw, list) or not raw:
        _fail(path, "memory_regions", "expected a non-empty list of regions")
    regions = []
    for i, r in enumerate(raw):
        k = f"memory_regions[{i}]"
        d = _object(path, k, r, _keys(Region), _keys(Region) - {"note"})
        for flag in ("dma_reachable", "cacheable"):
            if not isinstance(d[flag], bool):
                _fail(path, f"{k}.{flag}", f"expected true or false, got {d[flag]!r}")
        regions.append(Region(_str(path, f"{k}.name", d["name"]), _int(path, f"{k}.address", d["address"]),
                              _int(path, f"{k}.size", d["size"], 1), _str(path, f"{k}.speed", d["speed"], SPEEDS),
                              _str(path, f"{k}.kind", d["kind"], KINDS), d["dma_reachable"], d["cacheable"],
                              _str(path, f"{k}.use", d["use"], USES), _str(path, f"{k}.note", d.get("note", ""))))
    names = [r.name for r in regions]
    if len(set(names)) != len(names):
        _fail(path, "memory_regions", "duplicate region names")
    arena = {r.name: r for r in regions if r.use == "arena"}
    d = _object(path, "placement", placement, set(PLACEMENTS), set(PLACEMENTS))
    order = {p: _strs(path, f"placement.{p}", d[p]) for p in PLACEMENTS}
    for p, names_p in order.items():
        bad = [n for n in names_p if n not in arena]
        if not names_p or bad:
            _fail(path, f"placement.{p}", f"names {bad[0] if bad else 'no region'}, not an arena region")
    not_dma = [n for n in order["dma"] if not arena[n].dma_reachable]
    if not_dma:
        _fail(path, "placement.dma", f"region {not_dma[0]} is not DMA-reachable")
    stack = _str(path, "stack_region", stack_region if stack_region is not None else order["hot"][0])
    if stack not in arena:
        _fail(path, "stack_region", f"{stack} is not an arena region")
    return BoardMemory(name, tuple(regions), order, stack)


_SDRAM_RANGES = {"fmc_bank": (1, 2), "data_bits": (8, 32), "column_bits": (8, 11), "row_bits": (11, 13),
                 "internal_banks": (2, 4), "cas_latency": (1, 3), "sdclk_div": (2, 3), "t_mrd_cycles": (1, 16)}
_SDRAM_NS = ("t_rcd_ns", "t_rp_ns", "t_ras_ns", "t_rc_ns", "t_wr_ns", "t_xsr_ns", "refresh_ms")


def _number(path: Path, key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        _fail(path, key, f"expected a positive number, got {v!r}")
    return v


def _sdram(path: Path, v: Any) -> Sdram:
    """board.json "sdram": every field required but note, af and kernel_clock; each range is the FMC's."""
    k = "sdram"
    q = _object(path, k, v, _keys(Sdram), _keys(Sdram) - {"note", "af", "kernel_clock"})
    ints = {f: _int(path, f"{k}.{f}", q[f], lo) for f, (lo, _hi) in _SDRAM_RANGES.items()}
    for f, (lo, hi) in _SDRAM_RANGES.items():
        if ints[f] > hi:
            _fail(path, f"{k}.{f}", f"must be at most {hi}, got {ints[f]}")
    if ints["data_bits"] not in (8, 16, 32):
        _fail(path, f"{k}.data_bits", f"must be 8, 16 or 32, got {ints['data_bits']}")
    if ints["internal_banks"] not in (2, 4):
        _fail(path, f"{k}.internal_banks", f"must be 2 or 4, got {ints['internal_banks']}")
    pins = _strs(path, f"{k}.pins", q["pins"])
    bad = next((p for p in pins if len(p) < 3 or p[0] != "P" or not "A" <= p[1] <= "K" or not p[2:].isdigit()
                or int(p[2:]) > 15), None)
    if bad is not None or not pins:
        _fail(path, f"{k}.pins", f"{bad!r} is not a pin like PD0 (ports A..K, pins 0..15)")
    return Sdram(_str(path, f"{k}.chip", q["chip"]), _str(path, f"{k}.region", q["region"]),
                 kernel_hz=_int(path, f"{k}.kernel_hz", q["kernel_hz"], 1),
                 kernel_hz_min=_int(path, f"{k}.kernel_hz_min", q["kernel_hz_min"], 1),
                 refresh_rows=_int(path, f"{k}.refresh_rows", q["refresh_rows"], 1),
                 powerup_us=_int(path, f"{k}.powerup_us", q["powerup_us"], 1), pins=pins,
                 af=_int(path, f"{k}.af", q.get("af", 12), 0),
                 kernel_clock=_str(path, f"{k}.kernel_clock", q.get("kernel_clock", "hclk3"), FMC_KERNEL_CLOCKS),
                 note=_str(path, f"{k}.note", q.get("note", "")),
                 **ints, **{f: _number(path, f"{k}.{f}", q[f]) for f in _SDRAM_NS})


def _check_sdram_region(path: Path, sdram: Sdram, mem: BoardMemory) -> None:
    """The SDRAM backs one "kv" region of sdram speed, at its bank's address, as large as its wiring addresses."""
    region = next((r for r in mem.regions if r.name == sdram.region), None)
    if region is None or region.use != "kv" or region.speed != "sdram":
        _fail(path, "sdram.region", f"{sdram.region!r} is not a memory_regions entry with use \"kv\" and "
                                    "speed \"sdram\"")
    if region.address != SDRAM_BANK_ADDRESS[sdram.fmc_bank]:
        _fail(path, "sdram.fmc_bank", f"FMC SDRAM bank {sdram.fmc_bank} is at 0x{SDRAM_BANK_ADDRESS[sdram.fmc_bank]:08X}, "
                                      f"region {region.name} at 0x{region.address:08X}")
    if region.size != sdram.bytes:
        _fail(path, "sdram.row_bits", f"columns, rows, banks and data width address {sdram.bytes:,} B but region "
                                      f"{region.name} is {region.size:,} B")
    if sdram.kernel_hz_min > sdram.kernel_hz:
        _fail(path, "sdram.kernel_hz_min", f"{sdram.kernel_hz_min} is above kernel_hz {sdram.kernel_hz}")


_TOP_KEYS = {f.name for f in fields(Board)} - {"memory", "config_header"} | {
    "memory_regions", "placement", "stack_region", "config"}
_REQUIRED = {"name", "description", "cpu", "optimize", "libs", "sources", "weights", "request", "run", "stack_bytes"}


def parse_board(path: Path, doc: Any) -> Board:
    """board.json's parsed JSON -> Board, or a one-line UserError."""
    d = _object(path, "board", doc, _TOP_KEYS, _REQUIRED)
    name = _str(path, "name", d["name"])
    if name != path.parent.name:
        _fail(path, "name", f"{name!r} does not match its directory {path.parent.name!r}")
    cpu = _str(path, "cpu", d["cpu"], tuple(CPU_PROFILES))
    run = _object(path, "run", d["run"], _keys(RunSpec), {"emulator"})
    emulator = None
    if "emulator" in d:
        e = _object(path, "emulator", d["emulator"], _keys(Emulator), _keys(Emulator))
        emulator = Emulator(_str(path, "emulator.program", e["program"]), _strs(path, "emulator.args", e["args"]),
                            _int(path, "emulator.instructions_per_tick", e["instructions_per_tick"], 1))
    uart = None
    if "uart" in d:
        u = _object(path, "uart", d["uart"], _keys(Uart), _keys(Uart) - {"note"})
        uart = Uart(_str(path, "uart.instance", u["instance"]), _int(path, "uart.base", u["base"]),
                    _str(path, "uart.tx_pin", u["tx_pin"]), _str(path, "uart.rx_pin", u["rx_pin"]),
                    _int(path, "uart.af", u["af"]), _int(path, "uart.baud", u["baud"], 1),
                    _str(path, "uart.note", u.get("note", "")))
    qspi = None
    if "qspi_flash" in d:
        q = _object(path, "qspi_flash", d["qspi_flash"], _keys(QspiFlash), _keys(QspiFlash))
        k = "qspi_flash"
        ints = {f: _int(path, f"{k}.{f}", q[f], 1) for f in ("kernel_hz", "prescaler", "instr_lines", "address_lines",
                                                         "address_bytes", "data_lines", "cs_high_cycles",
                                                         "read_instr") if f in q}
        if "dummy_cycles" in q:
            ints["dummy_cycles"] = _int(path, f"{k}.dummy_cycles", q["dummy_cycles"], 0)
        if "ddr" in q and not isinstance(q["ddr"], bool):
            _fail(path, f"{k}.ddr", f"expected true or false, got {q['ddr']!r}")
        qspi = QspiFlash(_str(path, f"{k}.chip", q["chip"]), _int(path, f"{k}.chips", q["chips"], 1),
                         ddr=q.get("ddr", False), note=_str(path, f"{k}.note", q.get("note", "")),
                         kernel_clock=_str(path, f"{k}.kernel_clock", q.get("kernel_clock", "hclk3"),
                                           QSPI_KERNEL_CLOCKS), **ints)
        for f, hi in (("prescaler", 256), ("dummy_cycles", 31), ("cs_high_cycles", 8), ("chips", 2),
                      ("address_bytes", 4), ("read_instr", 255)):
            if getattr(qspi, f) > hi:
                _fail(path, f"{k}.{f}", f"must be at most {hi}, got {getattr(qspi, f)}")
        for f in ("instr_lines", "address_lines", "data_lines"):
            if getattr(qspi, f) not in (1, 2, 4):
                _fail(path, f"{k}.{f}", f"must be 1, 2 or 4, got {getattr(qspi, f)}")
        if qspi.ddr:
            _fail(path, f"{k}.ddr", "DDR needs DTR read commands that bringup.c does not issue yet")
    sdram = _sdram(path, d["sdram"]) if "sdram" in d else None
    flash = None
    if "flash" in d:
        f = _object(path, "flash", d["flash"], _keys(FlashTool), {"tool", "openocd"})
        flash = FlashTool(_str(path, "flash.tool", f["tool"], ("openocd",)), _strs(path, "flash.openocd", f["openocd"]),
                          _str(path, "flash.note", f.get("note", "")))
    raw_config = d.get("config", [])
    if not isinstance(raw_config, list):
        _fail(path, "config", f"expected a list of {{name, value, note}}, got {raw_config!r}")
    config = []
    for i, c in enumerate(raw_config):
        e = _object(path, f"config[{i}]", c, _keys(ConfigValue), {"name", "value"})
        cname = _str(path, f"config[{i}].name", e["name"])
        if not cname.isidentifier() or not cname.startswith("TLLM_"):
            _fail(path, f"config[{i}].name", f"{cname!r} is not a TLLM_ C identifier")
        config.append(ConfigValue(cname, _str(path, f"config[{i}].value", e["value"]),
                                  _str(path, f"config[{i}].note", e.get("note", ""))))
    board = Board(
        name=name, description=_str(path, "description", d["description"]), cpu=CPU_PROFILES[cpu],
        optimize=_str(path, "optimize", d["optimize"], ("-O0", "-O1", "-O2", "-O3", "-Os")),
        extra_cflags=_strs(path, "extra_cflags", d.get("extra_cflags", [])),
        extra_ldflags=_strs(path, "extra_ldflags", d.get("extra_ldflags", [])),
        libs=_strs(path, "libs", d["libs"]), sources=_strs(path, "sources", d["sources"]),
        weights=_storage(path, "weights", d["weights"]), request=_storage(path, "request", d["request"]),
        run=RunSpec(_str(path, "run.emulator", run["emulator"], ("host", "qemu", "unicorn")),
                    _str(path, "run.note", run.get("note", ""))),
        memory=_regions(path, d.get("memory_regions"), d.get("placement"), d.get("stack_region"), name),
        stack_bytes=_int(path, "stack_bytes", d["stack_bytes"], 256),
        family=_str(path, "family", d["family"]) if "family" in d else None,
        linker_script=_str(path, "linker_script", d["linker_script"]) if "linker_script" in d else None,
        arena_section=_str(path, "arena_section", d["arena_section"]) if "arena_section" in d else None,
        emulator=emulator, uart=uart, qspi_flash=qspi, sdram=sdram, flash=flash, clock=_str(path, "clock", d.get("clock", "")),
        config=tuple(config),
    )
    if board.family is not None and not (boards_dir() / board.family).is_dir():
        _fail(path, "family", f"no folder boards/{board.family}/ (the family's shared C)")
    names = [c.name for c in board.config_header()]
    if len(set(names)) != len(names):
        _fail(path, "config", "a define is given twice (uart/request/emulator fields generate their own)")
    if board.run.emulator == "qemu" and board.emulator is None:
        _fail(path, "run.emulator", "qemu needs an \"emulator\" object (program, args, instructions_per_tick)")
    if board.weights.storage == "external" and board.weights.address is None:
        _fail(path, "weights.address", "external weights need an address")
    if board.is_arm and not any(r.use == "code" and r.kind == "flash" for r in board.memory.regions):
        _fail(path, "memory_regions", "a Cortex-M board needs a flash region with use \"code\" (vectors, code, rodata)")
    if sdram is not None:
        _check_sdram_region(path, sdram, board.memory)
    if board.linker_script is not None and not board.file(board.linker_script).is_file():
        _fail(path, "linker_script", f"{board.linker_script} is in none of {', '.join(str(d) for d in board.search_dirs)}")
    for s in board.sources:
        if not board.file(s).is_file():
            _fail(path, "sources", f"{s} is in none of {', '.join(str(d) for d in board.search_dirs)}")
    return board


def board_names() -> list[str]:
    """Names of the boards shipped with tinyllm-gen, sorted."""
    root = boards_dir()
    return sorted(p.name for p in root.iterdir() if (p / "board.json").is_file())


def load_board(name: str) -> Board:
    names = board_names()
    if name not in names:
        raise UserError(f"unknown board '{name}': choose one of {', '.join(names)}")
    path = boards_dir() / name / "board.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not readable JSON ({e})") from None
    return parse_board(path, doc)
