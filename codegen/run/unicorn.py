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
  (h750_model.py) that answer what bringup.c waits for and record every
  rule it breaks; the QUADSPI window faults until memory-mapped mode is set
  up the way the board's chip needs;
* the MDMA (h750_model.MdmaModel) for the weight-streaming hook: a
  software-requested transfer moves its bytes when the firmware's poll finds
  it done, the bytes moved are counted (`UnicornResult.mdma`), and the first
  broken rule stops the run with one line in `error` ("MDMA: ..."), a CPU
  access to a stream buffer still in flight included (a memory hook on just
  that range, present only while the transfer is);
* GPIO, SCB (cache maintenance, with the M7's cache geometry), DWT and
  DBGMCU (revision V) as plain registers; the DWT cycle counter reads the
  number of instructions executed so far (counted per translated block, so
  a read counts the rest of its own block too).

The firmware runs from its reset vector to the "@TLLM exit N" line it prints
before parking the core; N is the exit status.  An access outside the map
stops the run with the address, as a bus fault would on the chip.  Not
modelled: caches, clock speed, wait states, interrupts (the firmware uses
none) -- instruction counts here are not cycle counts on a board."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..board import Board
from ..errors import UserError
from ..h750_model import (MDMA_BASE, RCC_AHB3ENR, RCC_AHB3ENR_MDMAEN, ClockModel, MdmaModel, QspiModel,
                          h750_bus_targets)
from .result import TIMEOUT_EXIT_CODE, RunResult, decode

UNICORN_INSTALL_HINT = "pip install unicorn  (or: pip install -e '.[test]')"
EXIT_PREFIX = b"@TLLM exit "
PAGE = 0x1000

# Peripheral windows the H750 firmware touches that only need to hold what
# was written: GPIOA..K, DBGMCU (preset to revision V) and the Cortex-M7
# private peripheral bus (SCB with its cache registers, DWT, CPACR).  RCC/PWR,
# SYSCFG, FLASH and QUADSPI are MMIO windows on the h750_model.py models.
REGISTER_WINDOWS = (
    (0x58020000, 0x3000, "GPIOA..K"),
    (0x5C001000, 0x1000, "DBGMCU"),
    (0xE0000000, 0x100000, "Cortex-M7 private peripheral bus (SCB, DWT)"),
)
RCC_PWR_WINDOW, SYSCFG_WINDOW, FLASH_REGS, QSPI_REGS = 0x58024000, 0x58000000, 0x52002000, 0x52005000
DBGMCU_IDC = {"V": 0x20036450, "Y": 0x10036450}  # REV_ID 0x2003 / 0x1003, DEV_ID 0x450
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
    # watch_weight_reads: CPU loads from the weights blob after the first MDMA
    # transfer started (the boot copy of pinned weights); None when not watched
    weight_reads_after_first_copy: int | None = None

    @property
    def violations(self) -> list[str]:
        return (self.clock.violations if self.clock else []) + (self.qspi.violations if self.qspi else []) + \
            (self.mdma.violations if self.mdma else [])


@dataclass
class _Console:
    out: bytearray = field(default_factory=bytearray)
    rx: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    brr: int = 0


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


def _thumb_widths(code: bytes) -> int:
    """Instructions in a block of Thumb-2 code: a halfword whose top five bits
    are 0b11101, 0b11110 or 0b11111 starts a 32-bit instruction."""
    n = i = 0
    while i + 1 < len(code):
        hw = code[i] | (code[i + 1] << 8)
        i += 4 if (hw >> 11) in (0x1D, 0x1E, 0x1F) else 2
        n += 1
    return n


def run_unicorn(elf: Path, board: Board, weights_bin: Path | None, request_bin: Path | None,
                uart_rx: bytes = b"", timeout_s: float = 600, revision: str = "V", on_line=None,
                watch_weight_reads: bool = False) -> UnicornResult:
    """Boot ``elf`` on a Unicorn model of ``board`` (an STM32H750 board) and
    run it to its "@TLLM exit" line; ``revision`` is the silicon DBGMCU
    reports ("V": 480 MHz parts, "Y": the early 400 MHz ones)."""
    try:
        import unicorn as uc
        from unicorn import arm_const as arm
    except ImportError:
        raise UserError(f"running {board.name} firmware needs the unicorn emulator: {UNICORN_INSTALL_HINT}") \
            from None

    mu = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_THUMB)
    mu.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_M7)
    regions = {r.name: r for r in board.memory.regions}
    for region in board.memory.regions:
        if region.kind in ("ram", "flash") and region.name != "qspi":
            mu.mem_map(region.address, (region.size + PAGE - 1) // PAGE * PAGE)
    for base, size, _what in REGISTER_WINDOWS:
        mu.mem_map(base, size)
    mu.mem_write(0x5C001000, struct.pack("<I", DBGMCU_IDC[revision]))
    mu.mem_write(SCB_CCSIDR, struct.pack("<I", M7_L1D_CCSIDR))

    for addr, data in _load_segments(Path(elf).read_bytes()):
        mu.mem_write(addr, data)

    # The QUADSPI window holds what a flasher wrote, but reads fault until the
    # firmware has put QUADSPI in a memory-mapped mode the chip answers.
    clock = ClockModel()
    qspi = None
    if "qspi" in regions:
        q_base, q_size = regions["qspi"].address, regions["qspi"].size
        qspi = QspiModel(board.qspi_flash.chip, board.qspi_flash.chips, q_size, kernel_hz=clock.qspi_kernel_hz)
        mu.mem_map(q_base, q_size, uc.UC_PROT_NONE)
    for blob, key, place in ((weights_bin, "weights", board.weights), (request_bin, "request", board.request)):
        if blob is not None:
            data = Path(blob).read_bytes()
            if len(data) > place.max_bytes:
                raise UserError(f"{key} file {blob} is {len(data)} bytes; {board.name} has room for "
                                f"{place.max_bytes}")
            mu.mem_write(place.address, data)

    def clock_read(_mu, offset, _size, _user):
        return clock.read(offset)

    def clock_write(_mu, offset, _size, value, _user):
        clock.write(offset, value)

    def syscfg_write(_mu, offset, _size, value, _user):
        if offset == 0x42C:
            clock.oden = bool(value & 1)

    def flash_read(_mu, offset, _size, _user):
        return clock.flash_acr if offset == 0 else 0

    def flash_write(_mu, offset, _size, value, _user):
        if offset == 0:
            clock.flash_acr = value

    def qspi_read(_mu, offset, _size, _user):
        return qspi.read(offset) if qspi else 0

    def qspi_write(_mu, offset, _size, value, _user):
        if qspi and qspi.write(offset, value):
            _mu.mem_protect(q_base, q_size, uc.UC_PROT_READ | uc.UC_PROT_EXEC)

    # MDMA: the copy runs when the firmware's poll finds it done; until then a
    # CPU access to the destination is watched by a hook on exactly that range
    # (added and removed per transfer, so ordinary runs pay nothing), and the
    # first broken rule stops the run with its line.
    mdma_stop: list[str] = []
    watches: dict[int, int] = {}

    def mdma_copy(dst, src, n):
        mu.mem_write(dst, bytes(mu.mem_read(src, n)))

    def on_pending_access(_mu, access, address, size, _value, _user):
        if mdma.cpu_access(address, size, access == uc.UC_MEM_WRITE) is not None:
            _mu.emu_stop()

    copying = [False]  # set at the first MDMA transfer (watch_weight_reads)

    def mdma_start(t):
        copying[0] = True
        watches[t.channel] = mu.hook_add(uc.UC_HOOK_MEM_READ | uc.UC_HOOK_MEM_WRITE, on_pending_access,
                                         begin=t.dst, end=t.dst + t.length - 1)
        mu.ctl_flush_tb()

    def mdma_done(t):
        h = watches.pop(t.channel, None)
        if h is not None:
            mu.hook_del(h)
            mu.ctl_flush_tb()

    def mdma_violation(line):
        if not mdma_stop:
            mdma_stop.append(line)
        mu.emu_stop()

    def qspi_readable(addr):
        if qspi is None or not q_base <= addr < q_base + q_size:
            return None
        return qspi.mapped is not None

    mdma = MdmaModel(h750_bus_targets(board.memory.regions),
                     lambda: bool(clock.regs.get(RCC_AHB3ENR, 0) & RCC_AHB3ENR_MDMAEN), mdma_copy, qspi_readable,
                     on_start=mdma_start, on_done=mdma_done, on_violation=mdma_violation)
    mu.mmio_map(MDMA_BASE, PAGE, lambda _mu, off, _sz, _u: mdma.read(off), None,
                lambda _mu, off, _sz, value, _u: mdma.write(off, value), None)

    mu.mmio_map(RCC_PWR_WINDOW, PAGE, clock_read, None, clock_write, None)
    mu.mmio_map(SYSCFG_WINDOW, PAGE, lambda *_: 0, None, syscfg_write, None)
    mu.mmio_map(FLASH_REGS, PAGE, flash_read, None, flash_write, None)
    mu.mmio_map(QSPI_REGS, PAGE, qspi_read, None, qspi_write, None)

    console = _Console(rx=bytearray(uart_rx))
    uart_base = board.uart.base

    def uart_read(_mu, offset, _size, _user):
        if offset == USART_ISR:
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
            if on_line is not None:
                on_line(line.decode("utf-8", errors="replace"))
            if line.startswith(EXIT_PREFIX):
                console.exit_code = int(line[len(EXIT_PREFIX):] or b"0")
                _mu.emu_stop()

    mu.mmio_map(uart_base, 0x400, uart_read, None, uart_write, None)

    executed = [0]
    widths: dict[tuple[int, int], int] = {}

    def on_block(_mu, address, size, _user):
        key = (address, size)
        n = widths.get(key)
        if n is None:
            n = widths[key] = _thumb_widths(bytes(_mu.mem_read(address, size)))
        executed[0] += n

    def on_cyccnt(_mu, _access, _address, _size, _value, _user):
        _mu.mem_write(DWT_CYCCNT, struct.pack("<I", executed[0] & 0xFFFFFFFF))

    mu.hook_add(uc.UC_HOOK_BLOCK, on_block)
    weight_reads = [0]
    if watch_weight_reads and weights_bin is not None:  # weight streaming: no flash reads once pinned
        def on_weight_read(_mu, _access, _address, _size, _value, _user):
            if copying[0]:
                weight_reads[0] += 1

        w0 = board.weights.address
        mu.hook_add(uc.UC_HOOK_MEM_READ, on_weight_read, begin=w0, end=w0 + Path(weights_bin).stat().st_size - 1)
    mu.hook_add(uc.UC_HOOK_MEM_READ, on_cyccnt, begin=DWT_CYCCNT, end=DWT_CYCCNT + 3)

    sp, pc = struct.unpack("<II", mu.mem_read(regions["flash"].address, 8))
    mu.reg_write(arm.UC_ARM_REG_SP, sp)
    error = ""
    try:
        mu.emu_start(pc | 1, 0xFFFFFFFF, timeout=int(timeout_s * 1e6))
    except uc.UcError as e:
        where = mu.reg_read(arm.UC_ARM_REG_PC)
        error = f"{e} at pc=0x{where:08x}"
    if mdma_stop and not error:
        error = f"MDMA: {mdma_stop[0]} (pc=0x{mu.reg_read(arm.UC_ARM_REG_PC):08x})"
    timed_out = console.exit_code is None and not error
    scb_ccr, = struct.unpack("<I", mu.mem_read(SCB_CCR, 4))
    return UnicornResult(console.exit_code, bytes(console.out), executed[0], error, timed_out, clock, qspi, scb_ccr,
                         console.brr, mdma, weight_reads[0] if watch_weight_reads and weights_bin is not None else None)


def run_unicorn_board(elf: Path, board: Board, weights_bin: Path | None, request_bin: Path,
                      uart_request: bytes = b"", timeout_s: float = 600, on_line=None) -> RunResult:
    """Run STM32H750 firmware under the Unicorn model (run_unicorn above): the
    request in its block next to the weights, or (uart_request) sent over
    the console USART instead."""
    res = run_unicorn(elf, board, weights_bin, None if uart_request else request_bin, uart_rx=uart_request,
                      timeout_s=timeout_s, on_line=on_line)
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
                     f"{res.instructions} instructions under Unicorn")
