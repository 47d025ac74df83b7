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
* every other peripheral the firmware touches (RCC, GPIO, SCB, DWT) as
  plain registers that read back what was written; the DWT cycle counter
  reads the number of instructions executed so far (counted per translated
  block, so a read counts the rest of its own block too).

The firmware runs from its reset vector to the "@TLLM exit N" line it prints
before parking the core; N is the exit status.  An access outside the map
stops the run with the address, as a bus fault would on the chip.  Not
modelled: caches, clock speed, wait states, interrupts (the firmware uses
none) -- instruction counts here are not cycle counts on a board."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError

UNICORN_INSTALL_HINT = "pip install unicorn  (or: pip install -e '.[test]')"
EXIT_PREFIX = b"@TLLM exit "
PAGE = 0x1000

# Peripheral windows the H750 firmware touches, mapped as plain registers.
# (base, size, what): AHB4 (GPIOA..K, RCC, PWR), D1 AHB (FLASH regs, QUADSPI
# regs), APB4 SYSCFG, the Cortex-M7 private peripheral bus (SCB, DWT, CPACR).
REGISTER_WINDOWS = (
    (0x58020000, 0x8000, "AHB4 peripherals (GPIO, RCC, PWR)"),
    (0x58000000, 0x2000, "APB4 peripherals (SYSCFG)"),
    (0x52000000, 0x8000, "AHB3 peripherals (FLASH, QUADSPI registers)"),
    (0xE0000000, 0x100000, "Cortex-M7 private peripheral bus (SCB, DWT)"),
)
DWT_CYCCNT = 0xE0001004
USART_ISR, USART_RDR, USART_TDR = 0x1C, 0x24, 0x28
USART_ISR_TXE_TC, USART_ISR_RXNE = 0xC0, 0x20


@dataclass
class UnicornResult:
    exit_code: int | None
    output: bytes
    instructions: int
    error: str = ""  # an access outside the memory map, an undefined instruction, ...
    timed_out: bool = False


@dataclass
class _Console:
    out: bytearray = field(default_factory=bytearray)
    rx: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None


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


def run_unicorn(elf: Path, board: dict, weights_bin: Path | None, request_bin: Path | None,
                uart_rx: bytes = b"", count: bool = True, timeout_s: float = 600) -> UnicornResult:
    """Boot ``elf`` on a Unicorn model of ``board`` (an STM32H750 board) and
    run it to its "@TLLM exit" line."""
    try:
        import unicorn as uc
        from unicorn import arm_const as arm
    except ImportError:
        raise UserError(f"running {board['name']} firmware needs the unicorn emulator: {UNICORN_INSTALL_HINT}") \
            from None

    mu = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_THUMB)
    mu.ctl_set_cpu_model(arm.UC_CPU_ARM_CORTEX_M7)
    for region in board["memory_regions"]:
        if region["kind"] in ("ram", "flash"):
            base, size = int(region["address"], 16), int(region["size"])
            mu.mem_map(base, (size + PAGE - 1) // PAGE * PAGE)
    for base, size, _what in REGISTER_WINDOWS:
        mu.mem_map(base, size)

    for addr, data in _load_segments(Path(elf).read_bytes()):
        mu.mem_write(addr, data)
    for blob, key in ((weights_bin, "weights"), (request_bin, "request")):
        if blob is not None:
            data = Path(blob).read_bytes()
            if len(data) > int(board[key]["max_bytes"]):
                raise UserError(f"{key} file {blob} is {len(data)} bytes; {board['name']} has room for "
                                f"{board[key]['max_bytes']}")
            mu.mem_write(int(board[key]["address"], 16), data)

    console = _Console(rx=bytearray(uart_rx))
    uart_base = int(board["uart"]["base"], 16)

    def uart_read(_mu, offset, _size, _user):
        if offset == USART_ISR:
            return USART_ISR_TXE_TC | (USART_ISR_RXNE if console.rx else 0)
        if offset == USART_RDR and console.rx:
            return console.rx.pop(0)
        return 0

    def uart_write(_mu, offset, _size, value, _user):
        if offset != USART_TDR:
            return
        console.out.append(value & 0xFF)
        if value & 0xFF == 0x0A:
            line_start = console.out.rfind(b"\n", 0, len(console.out) - 1) + 1
            line = bytes(console.out[line_start:-1])
            if line.startswith(EXIT_PREFIX):
                console.exit_code = int(line[len(EXIT_PREFIX):] or b"0")
                _mu.emu_stop()

    mu.mmio_map(uart_base, 0x400, uart_read, None, uart_write, None)

    executed = [0]
    if count:
        widths: dict[tuple[int, int], int] = {}

        def on_block(_mu, address, size, _user):
            key = (address, size)
            n = widths.get(key)
            if n is None:
                n = widths[key] = _thumb_widths(bytes(_mu.mem_read(address, size)))
            executed[0] += n

        mu.hook_add(uc.UC_HOOK_BLOCK, on_block)

        def on_cyccnt(_mu, _access, _address, _size, _value, _user):
            _mu.mem_write(DWT_CYCCNT, struct.pack("<I", executed[0] & 0xFFFFFFFF))

        mu.hook_add(uc.UC_HOOK_MEM_READ, on_cyccnt, begin=DWT_CYCCNT, end=DWT_CYCCNT + 3)

    flash = int(board["memory_regions"][[r["name"] for r in board["memory_regions"]].index("flash")]["address"], 16)
    sp, pc = struct.unpack("<II", mu.mem_read(flash, 8))
    mu.reg_write(arm.UC_ARM_REG_SP, sp)
    error = ""
    try:
        mu.emu_start(pc | 1, 0xFFFFFFFF, timeout=int(timeout_s * 1e6))
    except uc.UcError as e:
        where = mu.reg_read(arm.UC_ARM_REG_PC)
        error = f"{e} at pc=0x{where:08x}"
    timed_out = console.exit_code is None and not error
    return UnicornResult(console.exit_code, bytes(console.out), executed[0], error, timed_out)
