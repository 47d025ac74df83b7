"""Run STM32H750 firmware under Unicorn (PyPI `unicorn`), where QEMU 7.2 has
no H7 machine and Renode is not installed.

What is modelled, and why it is enough to check the firmware end to end:

* the H750's memory map from board.json: internal flash (the ELF's load
  image), ITCM, DTCM, AXI SRAM, SRAM1..4 and the QUADSPI window, where the
  weights blob and the request block are placed as a flashed board holds
  them (the firmware reads both memory-mapped);
* the console USART (board.json "uart"): TDR writes are the console text,
  ISR always reports TXE/TC, RDR serves the request bytes for the UART
  transport;
* RCC, PWR, FLASH and QUADSPI with their flash chips as register models
  (families/stm32h750/peripherals.py) that answer what bringup.c waits for and record every
  rule it breaks; the QUADSPI window faults until memory-mapped mode is set
  up the way the board's chip needs;
* the MDMA (peripherals.MdmaModel) for the weight-streaming hook: a
  software-requested transfer moves its bytes when the firmware's poll finds
  it done, the bytes moved are counted (`UnicornResult.mdma`), and the first
  broken rule stops the run with one line in `error` ("MDMA: ..."), a CPU
  access to a stream buffer still in flight included (a memory hook on just
  that range, present only while the transfer is);
* the FMC with the board's SDRAM (peripherals.FmcModel), where board.json
  has one: the SDRAM's memory is there from the start, but a hook on it
  stops the run with one line ("FMC: ...") at an access before bring-up
  has sent the part's command sequence, or at the first access after it if
  the MPU (peripherals.MpuModel, fed by a write hook on its registers)
  leaves the window Device memory; past that first good access the hook is
  removed, but Unicorn 2.1.4 keeps the slow path a memory hook brought (a
  load loop measured 294 M instructions/s after the hook's removal, 922
  without one ever), so an SDRAM build runs slower throughout;
* GPIO, SCB (cache maintenance, with the M7's cache geometry), DWT and
  DBGMCU (revision V) as plain registers; the DWT cycle counter reads the
  number of instructions executed so far (counted per translated block, so
  a read counts the rest of its own block too).

No memory hook (UC_HOOK_MEM_READ/WRITE) stays on for a run: while one
exists Unicorn sends every load and store through its slow path, which ran
7x slower than its fast path.  So the DWT and the SCB (whose MPU registers
feed peripherals.MpuModel) are MMIO pages with callbacks for their own
addresses only, and the MDMA's watch on a buffer in flight takes read and
write permission from its pages instead of hooking them (run/tllm_uwatch.c
lets the rest of those pages through).

The firmware runs from its reset vector to the "@TLLM exit N" line it prints
before parking the core; N is the exit status.  An access outside the map
stops the run with the address, as a bus fault would on the chip.  Not
modelled: caches, clock speed, wait states, interrupts (the firmware uses
none) -- instruction counts here are not cycle counts on a board."""
from __future__ import annotations

import ctypes
import functools
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..board import Board
from ..errors import UserError
from ..resources import package_file
from ..families.stm32h750.peripherals import (DBGMCU_IDC, FMC_BASE, MDMA_BASE, MPU_BASE, MPU_RASR, RCC_AHB3ENR,
                                              RCC_AHB3ENR_FMCEN, RCC_AHB3ENR_MDMAEN, ClockModel, FmcModel, MdmaModel,
                                              MpuModel, QspiModel, h750_bus_targets)
from .plugins import build_plugin
from .result import TIMEOUT_EXIT_CODE, RunResult, decode

UCOUNT_SOURCE = package_file("run/tllm_ucount.c")
UWATCH_SOURCE = package_file("run/tllm_uwatch.c")
UNICORN_INSTALL_HINT = "pip install unicorn  (or: pip install -e '.[test]')"
EXIT_PREFIX = b"@TLLM exit "
PAGE = 0x1000

# Peripheral windows the H750 firmware touches that only need to hold what
# was written: GPIOA..K, DBGMCU (preset to revision V) and the Cortex-M7
# private peripheral bus (SCB with its cache registers, DWT, CPACR).  RCC/PWR,
# SYSCFG, FLASH and QUADSPI are MMIO windows on the family's peripheral models.
REGISTER_WINDOWS = (
    (0x58020000, 0x3000, "GPIOA..K"),
    (0x5C001000, 0x1000, "DBGMCU"),
    (0xE0000000, 0x1000, "ITM"),
    (0xE0002000, 0xC000, "FPB and the rest of the private peripheral bus below the SCS"),
    (0xE000F000, 0xF1000, "the rest of the private peripheral bus (ETM, TPIU, ROM tables)"),
)
# The DWT and the System Control Space (SCB, MPU, NVIC, SysTick, CPACR) are
# MMIO pages over _RegisterPage: they hold what was written, DWT_CYCCNT
# reads the instruction count, and MPU writes reach the MpuModel.
DWT_PAGE, SCS_PAGE = 0xE0001000, 0xE000E000
RCC_PWR_WINDOW, SYSCFG_WINDOW, FLASH_REGS, QSPI_REGS = 0x58024000, 0x58000000, 0x52002000, 0x52005000
SCB_CCR, SCB_CCSIDR, M7_L1D_CCSIDR = 0xE000ED14, 0xE000ED80, 0xF00FE019  # 16 KiB: 128 sets, 4 ways, 32-byte lines
DWT_CYCCNT = 0xE0001004
USART_BRR, USART_ISR, USART_RDR, USART_TDR = 0x0C, 0x1C, 0x24, 0x28
USART_ISR_TXE_TC, USART_ISR_RXNE = 0xC0, 0x20


@dataclass
class UnicornResult:
    exit_code: int | None
    output: bytes
    instructions: int
    error: str = ""  # an access outside the memory map, an undefined instruction, ...
    timed_out: bool = False
    clock: ClockModel | None = None
    qspi: QspiModel | None = None
    scb_ccr: int = 0  # at exit: bit 17 I-cache, bit 16 D-cache enabled
    usart_brr: int = 0  # the console's baud divisor, as last written
    mdma: MdmaModel | None = None  # bytes_moved, transfers, violations
    fmc: FmcModel | None = None  # the SDRAM's controller (boards with one): ready, violations
    # watch_weight_reads: CPU loads from the weights blob after the first MDMA
    # transfer started (the boot copy of pinned weights); None when not watched
    weight_reads_after_first_copy: int | None = None
    limit: str = ""  # what ended a timed-out run: "N guest instructions" or "T s" of wall clock

    @property
    def violations(self) -> list[str]:
        return (self.clock.violations if self.clock else []) + (self.qspi.violations if self.qspi else []) + \
            (self.mdma.violations if self.mdma else []) + (self.fmc.violations if self.fmc else [])


@dataclass
class _Console:
    out: bytearray = field(default_factory=bytearray)
    rx: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    brr: int = 0
    wait_rx: object = None  # called when the firmware polls an empty receiver (unicorn_session: waits for the host)


def _load_segments(elf: bytes) -> list[tuple[int, bytes]]:
    """(physical address, bytes) of each PT_LOAD with file contents: the load
    image as a flasher writes it (.data at its flash LMA)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 1 or elf[5] != 1:
        raise UserError("not a 32-bit little-endian ELF: rebuild with `tinyllm-gen build OUT`")
    phoff, = struct.unpack_from("<I", elf, 28)
    phentsize, phnum = struct.unpack_from("<HH", elf, 42)
    segs = []
    for i in range(phnum):
        p_type, p_offset, _vaddr, p_paddr, p_filesz = struct.unpack_from("<5I", elf, phoff + i * phentsize)
        if p_type == 1 and p_filesz:
            segs.append((p_paddr, elf[p_offset:p_offset + p_filesz]))
    return segs


class NativeCounter:
    """tllm_ucount.c's block hook on one Unicorn instance: its count and
    whether it stopped the run at the limit."""

    def __init__(self, lib, handle, hook_fn):
        self._lib, self._handle, self._hook_fn = lib, handle, hook_fn  # the hook's pointer kept alive

    @property
    def executed(self) -> int:
        return self._lib.tllm_ucount_executed(self._handle)

    @property
    def limit_hit(self) -> bool:
        return bool(self._lib.tllm_ucount_limit_hit(self._handle))

    def __del__(self):
        self._lib.tllm_ucount_free(self._handle)


@functools.lru_cache(maxsize=1)
def _ucount_lib():
    """tllm_ucount.c's shared object with its prototypes, loaded once per
    process (every Unicorn run of a test session shares it); None where gcc
    cannot build it."""
    try:
        lib = ctypes.CDLL(str(build_plugin(UCOUNT_SOURCE)))
    except (OSError, UserError, subprocess.CalledProcessError):
        return None
    lib.tllm_ucount_new.restype = ctypes.c_void_p
    lib.tllm_ucount_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    lib.tllm_ucount_executed.restype = ctypes.c_uint64
    lib.tllm_ucount_executed.argtypes = [ctypes.c_void_p]
    lib.tllm_ucount_limit_hit.restype = ctypes.c_int32
    lib.tllm_ucount_limit_hit.argtypes = [ctypes.c_void_p]
    lib.tllm_ucount_free.argtypes = [ctypes.c_void_p]
    return lib


def native_counter(uc, mu, limit: int | None) -> NativeCounter | None:
    """Install tllm_ucount.c's UC_HOOK_BLOCK callback on MU through the
    binding's C library (uc: the unicorn module); None where it cannot be
    built or the binding differs (its uclib and the engine handle are the
    2.1 binding's)."""
    try:
        from unicorn.unicorn_py3 import unicorn as binding

        uclib, engine = binding.uclib, mu._uch
    except (ImportError, AttributeError):
        return None
    lib = _ucount_lib()
    if lib is None:
        return None
    as_ptr = lambda f: ctypes.cast(f, ctypes.c_void_p)  # noqa: E731
    handle = lib.tllm_ucount_new(as_ptr(uclib.uc_mem_read), as_ptr(uclib.uc_emu_stop), limit or 0)
    if not handle:
        return None
    hook_fn = as_ptr(lib.tllm_ucount_on_block)
    hook = ctypes.c_size_t()
    status = uclib.uc_hook_add(engine, ctypes.byref(hook), uc.UC_HOOK_BLOCK, hook_fn,
                               ctypes.c_void_p(handle), ctypes.c_uint64(1), ctypes.c_uint64(0))
    if status != 0:
        lib.tllm_ucount_free(handle)
        return None
    return NativeCounter(lib, handle, hook_fn)


class _RegisterPage:
    """A page of 32-bit registers that hold what was written (byte and
    halfword accesses merge into their word), with `readers` answering some
    offsets themselves and `writers` told of writes to some."""

    def __init__(self, preset: dict[int, int] | None = None):
        self.words: dict[int, int] = dict(preset or {})
        self.readers: dict[int, object] = {}  # offset -> () -> value
        self.writers: dict[int, object] = {}  # offset -> (value) -> None

    def word(self, offset: int) -> int:
        reader = self.readers.get(offset)
        return (reader() if reader is not None else self.words.get(offset, 0)) & 0xFFFFFFFF

    def read(self, _mu, offset: int, size: int, _user) -> int:
        shift = (offset & 3) * 8
        return (self.word(offset & ~3) >> shift) & ((1 << (8 * size)) - 1)

    def write(self, _mu, offset: int, size: int, value: int, _user) -> None:
        base, shift = offset & ~3, (offset & 3) * 8
        mask = ((1 << (8 * min(size, 4))) - 1) << shift
        word = (self.words.get(base, 0) & ~mask) | ((value << shift) & mask)
        self.words[base] = word & 0xFFFFFFFF
        writer = self.writers.get(base)
        if writer is not None:
            writer(self.words[base])


class NativeWatch:
    """tllm_uwatch.c's protection-fault callback on one Unicorn instance: the
    pending ranges it refuses, and the first access it refused."""

    def __init__(self, lib, handle, hook_fn):
        self._lib, self._handle, self._hook_fn = lib, handle, hook_fn  # the hook's pointer kept alive

    def set(self, slot: int, lo: int, hi: int) -> None:
        self._lib.tllm_uwatch_set(self._handle, slot, lo, hi)

    def hit(self) -> tuple[int, int, bool] | None:
        """(address, size, write) of the first access inside a pending range, or None."""
        a, n, w = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int32()
        if not self._lib.tllm_uwatch_hit(self._handle, ctypes.byref(a), ctypes.byref(n), ctypes.byref(w)):
            return None
        return a.value, n.value, bool(w.value)

    def __del__(self):
        self._lib.tllm_uwatch_free(self._handle)


@functools.lru_cache(maxsize=1)
def _uwatch_lib():
    """tllm_uwatch.c's shared object with its prototypes, once per process; None where gcc cannot build it."""
    try:
        lib = ctypes.CDLL(str(build_plugin(UWATCH_SOURCE)))
    except (OSError, UserError, subprocess.CalledProcessError):
        return None
    lib.tllm_uwatch_new.restype = ctypes.c_void_p
    lib.tllm_uwatch_new.argtypes = [ctypes.c_void_p]
    lib.tllm_uwatch_set.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]
    lib.tllm_uwatch_hit.restype = ctypes.c_int32
    lib.tllm_uwatch_hit.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 3
    lib.tllm_uwatch_free.argtypes = [ctypes.c_void_p]
    return lib


def native_watch(uc, mu, spans) -> NativeWatch | None:
    """Install tllm_uwatch.c's UC_HOOK_MEM_READ_PROT | UC_HOOK_MEM_WRITE_PROT
    callback on MU over each (first, last) address span (the RAMs a transfer
    may write: the QUADSPI window's own protection stays a fault), as
    native_counter does; None where it cannot be built or the binding differs."""
    try:
        from unicorn.unicorn_py3 import unicorn as binding

        uclib, engine = binding.uclib, mu._uch
    except (ImportError, AttributeError):
        return None
    lib = _uwatch_lib()
    if lib is None:
        return None
    as_ptr = lambda f: ctypes.cast(f, ctypes.c_void_p)  # noqa: E731
    handle = lib.tllm_uwatch_new(as_ptr(uclib.uc_mem_write))
    if not handle:
        return None
    hook_fn = as_ptr(lib.tllm_uwatch_on_prot)
    for first, last in spans:
        hook = ctypes.c_size_t()
        status = uclib.uc_hook_add(engine, ctypes.byref(hook), uc.UC_HOOK_MEM_READ_PROT | uc.UC_HOOK_MEM_WRITE_PROT,
                                   hook_fn, ctypes.c_void_p(handle), ctypes.c_uint64(first), ctypes.c_uint64(last))
        if status != 0:  # hooks already added stay, harmless: no page is protected until a transfer starts
            lib.tllm_uwatch_free(handle)
            return None
    return NativeWatch(lib, handle, hook_fn)


class _PythonWatch:
    """tllm_uwatch.c's callback in Python, where gcc cannot build it: the same ranges, refusals and pass-through."""

    def __init__(self, uc, mu, spans):
        self.ranges: dict[int, tuple[int, int]] = {}
        self.first: tuple[int, int, bool] | None = None

        def on_prot(_mu, access, address, size, value, _user):
            write = access == uc.UC_MEM_WRITE_PROT
            if any(lo < address + size and address < hi for lo, hi in self.ranges.values()):
                self.first = self.first or (address, size, write)
                return False
            if write:
                _mu.mem_write(address, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
            return True

        for first, last in spans:
            mu.hook_add(uc.UC_HOOK_MEM_READ_PROT | uc.UC_HOOK_MEM_WRITE_PROT, on_prot, begin=first, end=last)

    def set(self, slot: int, lo: int, hi: int) -> None:
        if lo < hi:
            self.ranges[slot] = (lo, hi)
        else:
            self.ranges.pop(slot, None)

    def hit(self) -> tuple[int, int, bool] | None:
        return self.first


def _thumb_widths(code: bytes) -> int:
    """Instructions in a block of Thumb-2 code: a halfword whose top five bits
    are 0b11101, 0b11110 or 0b11111 starts a 32-bit instruction."""
    n = i = 0
    while i + 1 < len(code):
        hw = code[i] | (code[i + 1] << 8)
        i += 4 if (hw >> 11) in (0x1D, 0x1E, 0x1F) else 2
        n += 1
    return n


class _H750Machine:
    """One Unicorn instance set up as the board: memories, the register
    models, the console, the MDMA and the instruction counter."""

    def __init__(self, uc, arm, board: Board, revision: str, on_line, max_instructions: int | None):
        self.uc, self.arm, self.board = uc, arm, board
        self.mu = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_THUMB)
        self.mu.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_M7)
        self.regions = {r.name: r for r in board.memory.regions}
        self.clock = ClockModel()
        self.qspi: QspiModel | None = None
        self.console = _Console()
        self.on_line = on_line
        self._executed = 0  # the Python counter's (count_instructions), when the C one cannot be built
        self._limit_hit = False
        self.counter: NativeCounter | None = None
        self.max_instructions = max_instructions
        self.mdma_stop: list[str] = []  # the first MDMA or FMC line that stopped the run
        self.fmc: FmcModel | None = None
        self.copying = False  # set at the first MDMA transfer (watch_weight_reads)
        self.weight_reads = 0
        self.dwt = _RegisterPage()
        self.scs = _RegisterPage({SCB_CCSIDR - SCS_PAGE: M7_L1D_CCSIDR})
        self.mpu = MpuModel()
        self._map_memories(revision)

    # --- memories ------------------------------------------------------
    def _map_memories(self, revision: str) -> None:
        mu = self.mu
        for region in self.board.memory.regions:
            if region.kind in ("ram", "flash") and region.name != "qspi":
                mu.mem_map(region.address, (region.size + PAGE - 1) // PAGE * PAGE)
        for base, size, _what in REGISTER_WINDOWS:
            mu.mem_map(base, size)
        mu.mem_write(0x5C001000, struct.pack("<I", DBGMCU_IDC[revision]))
        for base, page in ((DWT_PAGE, self.dwt), (SCS_PAGE, self.scs)):
            mu.mmio_map(base, PAGE, page.read, None, page.write, None)
        for reg in range(MPU_BASE + 4, MPU_BASE + MPU_RASR + 4, 4):
            self.scs.writers[reg - SCS_PAGE] = functools.partial(lambda r, value: self.mpu.write(r, value),
                                                                 reg - MPU_BASE)

    def load(self, elf: Path, weights_bin: Path | None, request_bin: Path | None) -> None:
        """The image as flashed; the blobs where a flashed board holds them. The
        QUADSPI window holds what a flasher wrote, but reads fault until the
        firmware has put QUADSPI in a memory-mapped mode the chip answers."""
        for addr, data in _load_segments(Path(elf).read_bytes()):
            self.mu.mem_write(addr, data)
        if "qspi" in self.regions:
            q = self.regions["qspi"]
            self.qspi = QspiModel(self.board.qspi_flash.chip, self.board.qspi_flash.chips, q.size,
                                  kernel_hz=self.clock.qspi_kernel_hz)
            self.mu.mem_map(q.address, q.size, self.uc.UC_PROT_NONE)
        for blob, key, place in ((weights_bin, "weights", self.board.weights),
                                 (request_bin, "request", self.board.request)):
            if blob is not None:
                data = Path(blob).read_bytes()
                if len(data) > place.max_bytes:
                    raise UserError(f"{key} file {blob} is {len(data)} bytes; {self.board.name} has room for "
                                    f"{place.max_bytes}")
                self.mu.mem_write(place.address, data)

    # --- register models -------------------------------------------------
    def map_registers(self) -> None:
        mu, clock, uc = self.mu, self.clock, self.uc
        q = self.regions.get("qspi")

        def syscfg_write(_mu, offset, _size, value, _user):
            if offset == 0x42C:
                clock.oden = bool(value & 1)

        def flash_write(_mu, offset, _size, value, _user):
            if offset == 0:
                clock.flash_acr = value

        def qspi_write(_mu, offset, _size, value, _user):
            if self.qspi and self.qspi.write(offset, value):
                _mu.mem_protect(q.address, q.size, uc.UC_PROT_READ | uc.UC_PROT_EXEC)

        mu.mmio_map(RCC_PWR_WINDOW, PAGE, lambda _mu, off, _sz, _u: clock.read(off), None,
                    lambda _mu, off, _sz, value, _u: clock.write(off, value), None)
        mu.mmio_map(SYSCFG_WINDOW, PAGE, lambda *_: 0, None, syscfg_write, None)
        mu.mmio_map(FLASH_REGS, PAGE, lambda _mu, off, _sz, _u: clock.flash_acr if off == 0 else 0, None,
                    flash_write, None)
        mu.mmio_map(QSPI_REGS, PAGE, lambda _mu, off, _sz, _u: self.qspi.read(off) if self.qspi else 0, None,
                    qspi_write, None)

    def map_mdma(self) -> None:
        """The copy runs when the firmware's poll finds it done; until then a
        CPU access to the destination is refused, and the first broken rule
        stops the run with its line.  The watch is protection, not a memory
        hook (see the module docstring): the pages the destination covers
        lose read and write permission while it is in flight, and the
        protection-fault callback (tllm_uwatch.c, or _PythonWatch) refuses
        an access inside the range and lets the rest of those pages through.
        A memory hook added and removed per transfer cost more than the
        guest's own work (13,216 transfers per SmolLM2 token); a protection
        change is about 12 us."""
        mu, uc = self.mu, self.uc
        q = self.regions.get("qspi")
        page = mu.ctl_get_page_size()
        spans = [(r.address, r.address + r.size - 1) for r in self.board.memory.regions if r.kind == "ram"]
        self.watch = native_watch(uc, mu, spans) or _PythonWatch(uc, mu, spans)
        pending: dict[int, tuple[int, int]] = {}  # channel -> the pages [lo, hi) its destination covers

        def protect(pages, perms):
            lo, hi = pages
            mu.mem_protect(lo, hi - lo, perms)

        def start(t):
            self.copying = True
            pages = (t.dst // page * page, -(-(t.dst + t.length) // page) * page)
            pending[t.channel] = pages
            self.watch.set(t.channel, t.dst, t.dst + t.length)
            protect(pages, uc.UC_PROT_EXEC)  # execute stays: removing it would end the translated block

        def done(t):
            self.watch.set(t.channel, 0, 0)
            pages = pending.pop(t.channel, None)
            if pages is not None:
                protect(pages, uc.UC_PROT_ALL)
                for other in pending.values():  # another channel in flight on a shared page (never in the runtime)
                    protect(other, uc.UC_PROT_EXEC)

        def violation(line):
            if not self.mdma_stop:
                self.mdma_stop.append(line)
            mu.emu_stop()

        def qspi_readable(addr):
            if self.qspi is None or not q.address <= addr < q.address + q.size:
                return None
            return self.qspi.mapped is not None

        self.mdma = MdmaModel(h750_bus_targets(self.board.memory.regions),
                              lambda: bool(self.clock.regs.get(RCC_AHB3ENR, 0) & RCC_AHB3ENR_MDMAEN),
                              lambda dst, src, n: mu.mem_write(dst, bytes(mu.mem_read(src, n))), qspi_readable,
                              on_start=start, on_done=done, on_violation=violation)
        mu.mmio_map(MDMA_BASE, PAGE, lambda _mu, off, _sz, _u: self.mdma.read(off), None,
                    lambda _mu, off, _sz, value, _u: self.mdma.write(off, value), None)

    def map_fmc(self) -> None:
        """The FMC and the MPU, on a board with SDRAM: the guard hook on the
        SDRAM's memory stays until the first access that finds the part ready
        and the window Normal memory (see the module docstring)."""
        s = self.board.sdram
        if s is None:
            return
        mu, uc, clock, mpu = self.mu, self.uc, self.clock, self.mpu
        region = self.regions[s.region]
        guard: list[int] = []

        def violation(line):
            if not self.mdma_stop:
                self.mdma_stop.append(line)
            mu.emu_stop()

        def on_sdram(_mu, access, address, _size, _value, _user):
            if self.fmc.cpu_access(address, access == uc.UC_MEM_WRITE) is not None:
                return
            problem = mpu.normal_memory_problem(address)
            if problem is not None:
                self.fmc.violations.append(f"FMC: SDRAM accessed at 0x{address:08X}, but {problem}")
                violation(self.fmc.violations[-1])
                return
            if guard:
                _mu.hook_del(guard.pop())

        self.fmc = FmcModel(s, lambda: bool(clock.regs.get(RCC_AHB3ENR, 0) & RCC_AHB3ENR_FMCEN), clock.fmc_kernel_hz,
                            on_violation=violation)
        guard.append(mu.hook_add(uc.UC_HOOK_MEM_READ | uc.UC_HOOK_MEM_WRITE, on_sdram, begin=region.address,
                                 end=region.address + region.size - 1))
        mu.mmio_map(FMC_BASE, PAGE, lambda _mu, off, _sz, _u: self.fmc.read(off), None,
                    lambda _mu, off, _sz, value, _u: self.fmc.write(off, value), None)

    def map_console(self, uart_rx: bytes) -> None:
        """The console USART: TDR writes are the console text (a line "@TLLM
        exit N" ends the run), ISR always reports TXE/TC, RDR serves uart_rx."""
        console = self.console
        console.rx = bytearray(uart_rx)

        def uart_read(_mu, offset, _size, _user):
            if offset == USART_ISR:
                if not console.rx and console.wait_rx is not None:
                    console.wait_rx()
                return USART_ISR_TXE_TC | (USART_ISR_RXNE if console.rx else 0)
            if offset == USART_RDR and console.rx:
                return console.rx.pop(0)
            return 0

        def uart_write(_mu, offset, _size, value, _user):
            if offset == USART_BRR:
                console.brr = value
            if offset != USART_TDR:
                return
            console.out.append(value & 0xFF)
            if value & 0xFF == 0x0A:
                line_start = console.out.rfind(b"\n", 0, len(console.out) - 1) + 1
                line = bytes(console.out[line_start:-1])
                if self.on_line is not None:
                    self.on_line(line.decode("utf-8", errors="replace"))
                if line.startswith(EXIT_PREFIX):
                    console.exit_code = int(line[len(EXIT_PREFIX):] or b"0")
                    _mu.emu_stop()

        self.mu.mmio_map(self.board.uart.base, 0x400, uart_read, None, uart_write, None)

    # --- counting ---------------------------------------------------------
    def count_instructions(self) -> None:
        """Per translated block, its Thumb instructions; the DWT cycle counter
        reads the count; past max_instructions the run stops (a busy host
        slows it, never ends it early).  The block hook is C (tllm_ucount.c)
        where gcc can build it, else the same count in Python."""
        counter = native_counter(self.uc, self.mu, self.max_instructions)
        if counter is not None:
            self.counter = counter
        else:
            self._count_in_python()

        self.dwt.readers[DWT_CYCCNT - DWT_PAGE] = lambda: self.executed

    @property
    def executed(self) -> int:
        return self.counter.executed if self.counter is not None else self._executed

    @property
    def limit_hit(self) -> bool:
        return self.counter.limit_hit if self.counter is not None else self._limit_hit

    def _count_in_python(self) -> None:
        widths: dict[tuple[int, int], int] = {}
        limit = self.max_instructions

        def on_block(_mu, address, size, _user):
            key = (address, size)
            n = widths.get(key)
            if n is None:
                n = widths[key] = _thumb_widths(bytes(_mu.mem_read(address, size)))
            self._executed += n
            if limit is not None and self._executed > limit:
                self._limit_hit = True
                _mu.emu_stop()

        self.mu.hook_add(self.uc.UC_HOOK_BLOCK, on_block)

    def watch_weight_reads(self, weights_bin: Path) -> None:
        """Count CPU loads from the weights blob once the first MDMA copy (the pinned weights' boot copy) began."""
        def on_weight_read(_mu, _access, _address, _size, _value, _user):
            if self.copying:
                self.weight_reads += 1

        w0 = self.board.weights.address
        self.mu.hook_add(self.uc.UC_HOOK_MEM_READ, on_weight_read, begin=w0,
                         end=w0 + Path(weights_bin).stat().st_size - 1)

    # --- running -----------------------------------------------------------
    def run(self, timeout_s: float) -> str:
        """From the reset vector to the exit line; the error that stopped it, or ""."""
        mu, arm = self.mu, self.arm
        sp, pc = struct.unpack("<II", mu.mem_read(self.regions["flash"].address, 8))
        mu.reg_write(arm.UC_ARM_REG_SP, sp)
        error = ""
        try:
            mu.emu_start(pc | 1, 0xFFFFFFFF, timeout=int(timeout_s * 1e6))
        except self.uc.UcError as e:
            error = f"{e} at pc=0x{mu.reg_read(arm.UC_ARM_REG_PC):08x}"
        refused = self.watch.hit()
        if refused is not None:  # the protection error is the watch refusing a pending buffer's access
            address, size, write = refused
            self.mdma.cpu_access(address, size, write)
            error = ""
        if self.mdma_stop and not error:
            line = self.mdma_stop[0]
            error = f"{'' if line.startswith('FMC') else 'MDMA: '}{line} (pc=0x{mu.reg_read(arm.UC_ARM_REG_PC):08x})"
        return error


def run_unicorn(elf: Path, board: Board, weights_bin: Path | None, request_bin: Path | None,
                uart_rx: bytes = b"", timeout_s: float = 600, revision: str = "V", on_line=None,
                watch_weight_reads: bool = False, max_instructions: int | None = None) -> UnicornResult:
    """Boot ``elf`` on a Unicorn model of ``board`` (an STM32H750 board) and
    run it to its "@TLLM exit" line; ``revision`` is the silicon DBGMCU
    reports ("V": 480 MHz parts, "Y": the early 400 MHz ones).  The run ends
    as timed out past ``max_instructions`` guest instructions, or past
    ``timeout_s`` seconds of wall clock (the backstop)."""
    try:
        import unicorn as uc
        from unicorn import arm_const as arm
    except ImportError:
        raise UserError(f"running {board.name} firmware needs the unicorn emulator: {UNICORN_INSTALL_HINT}") \
            from None
    m = _H750Machine(uc, arm, board, revision, on_line, max_instructions)
    m.load(elf, weights_bin, request_bin)
    m.map_registers()
    m.map_mdma()
    m.map_fmc()
    m.map_console(uart_rx)
    m.count_instructions()
    watched = watch_weight_reads and weights_bin is not None
    if watched:  # weight streaming: no flash reads once pinned
        m.watch_weight_reads(weights_bin)
    error = m.run(timeout_s)
    timed_out = m.console.exit_code is None and not error
    scb_ccr = m.scs.word(SCB_CCR - SCS_PAGE)
    limit = (f"{max_instructions:,} guest instructions" if m.limit_hit else f"{timeout_s:g} s") if timed_out else ""
    return UnicornResult(m.console.exit_code, bytes(m.console.out), m.executed, error, timed_out, m.clock, m.qspi,
                         scb_ccr, m.console.brr, m.mdma, m.fmc, m.weight_reads if watched else None, limit)


def run_unicorn_board(elf: Path, board: Board, weights_bin: Path | None, request_bin: Path,
                      uart_request: bytes = b"", timeout_s: float = 600, on_line=None,
                      max_instructions: int | None = None) -> RunResult:
    """Run STM32H750 firmware under the Unicorn model (run_unicorn above): the
    request in its block next to the weights, or (uart_request) sent over
    the console USART instead."""
    res = run_unicorn(elf, board, weights_bin, None if uart_request else request_bin, uart_rx=uart_request,
                      timeout_s=timeout_s, on_line=on_line, max_instructions=max_instructions)
    command = ["unicorn", board.name, str(elf)]
    if res.error:
        why = f" ({'; '.join(res.violations)})" if res.violations else ""
        raise UserError(f"the {board.name} firmware stopped under Unicorn: {res.error}{why}; the console said: "
                        f"{decode(res.output).strip()[-200:]!r}")
    if res.violations:
        raise UserError(f"the {board.name} firmware broke a hardware rule under Unicorn: "
                        f"{'; '.join(res.violations)}")
    code = TIMEOUT_EXIT_CODE if res.exit_code is None else res.exit_code
    return RunResult(code, decode(res.output), res.timed_out, command,
                     f"{res.instructions} instructions under Unicorn", res.limit)
