"""The same generated harness for the Cortex-M7, run under QEMU mps2-an500:
the runners are harness_c's, only the I/O layer and main differ.  One boot
runs a batch of calls: the host loads them into PSRAM with `-device loader`
(a table of records: kernel index, argument bytes), each call's outputs are
appended to a buffer in PSRAM, and the buffer is written to a host file by
semihosting (binary-safe, unlike the console).  This checks the kernels'
M7 paths (SMLAD / VMLA assembly, VCVTA rounding, VCVTB fp16) against the
same twins as the host."""
from __future__ import annotations

import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jinja2

from tinyllm_gen.board import load_board
from tinyllm_gen.emit.link_layout import static_link_layout
from tinyllm_gen.resources import firmware_dir
from tinyllm_gen.families import config_header

from .harness_c import WARNINGS, harness_source, runtime_sources
from .spec import Kernel

BOARD = "qemu-mps2-an500"
PSRAM = 0x60000000
IN_BYTES = 6 << 20  # the batch's records
HEAP_AT, HEAP_BYTES = PSRAM + IN_BYTES, 6 << 20  # one call's arrays (reset per call)
OUT_AT = HEAP_AT + HEAP_BYTES  # every call's outputs, up to the end of PSRAM
OUT_BYTES = (16 << 20) - IN_BYTES - HEAP_BYTES
MAGIC = 0x484B4C54  # "TLKH"
OUT_FILE = "kernel_out.bin"

M7_IO = f"""\\
#include "tllm_board.h"
/* Records in PSRAM (the host's -device loader): u32 magic, u32 count, then
 * per record u32 kernel index, u32 bytes, the bytes padded to 4. */
static const uint8_t *in_at, *in_end;
static uint8_t *heap_at;
static uint8_t *out_at = (uint8_t *)0x{OUT_AT:08X}u;
static void fail(int code) {{ tllm_board_exit(code); }}
static void *harness_alloc(size_t bytes) {{
    uint8_t *p = heap_at;
    heap_at += (bytes + 15u) & ~(size_t)15u;
    if (heap_at > (uint8_t *)0x{HEAP_AT + HEAP_BYTES:08X}u) fail(4);
    return p;
}}
static void read_exact(void *p, size_t n) {{
    if ((size_t)(in_end - in_at) < n) fail(2); /* fewer bytes than the declaration */
    memcpy(p, in_at, n);
    in_at += n;
}}
static void done_reading(void) {{
    if (in_at != in_end) fail(5); /* more bytes than the declaration */
}}
static void put(const void *p, size_t n) {{
    if (out_at + n > (uint8_t *)0x{OUT_AT + OUT_BYTES:08X}u) fail(6);
    memcpy(out_at, p, n);
    out_at += n;
}}
"""

M7_MAIN = f"""
static uint32_t semihost(uint32_t op, const void *arg) {{
    register uint32_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}}

static uint32_t word_at(const uint8_t *p) {{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}}

int tllm_main(void) {{
    const uint8_t *rec = (const uint8_t *)0x{PSRAM:08X}u;
    if (word_at(rec) != 0x{MAGIC:08X}u) return 7;
    const uint32_t n = word_at(rec + 4);
    rec += 8;
    uint8_t *const out0 = out_at;
    for (uint32_t r = 0; r < n; r++) {{
        const uint32_t kernel = word_at(rec), bytes = word_at(rec + 4);
        if (kernel >= sizeof KERNELS / sizeof KERNELS[0]) return 3;
        in_at = rec + 8;
        in_end = in_at + bytes;
        heap_at = (uint8_t *)0x{HEAP_AT:08X}u;
        uint8_t *const mark = out_at;
        out_at += 4; /* this call's output length, filled in after it */
        KERNELS[kernel].run();
        const uint32_t len = (uint32_t)(out_at - mark - 4);
        memcpy(mark, &len, 4);
        rec = in_end + ((4u - bytes % 4u) % 4u);
    }}
    static const char name[] = "{OUT_FILE}";
    const uint32_t open_args[3] = {{(uint32_t)name, 5u /* "wb" */, sizeof name - 1u}};
    const uint32_t fd = semihost(0x01u /* SYS_OPEN */, open_args);
    if (fd == 0xFFFFFFFFu) return 8;
    const uint32_t write_args[3] = {{fd, (uint32_t)out0, (uint32_t)(out_at - out0)}};
    if (semihost(0x05u /* SYS_WRITE */, write_args) != 0u) return 9;
    (void)semihost(0x02u /* SYS_CLOSE */, &fd);
    return 0;
}}
"""


@dataclass(frozen=True)
class M7Harness:
    elf: Path
    kernels: tuple[Kernel, ...]

    def index(self, name: str) -> int:
        return next(i for i, k in enumerate(self.kernels) if k.name == name)


def build_m7_harness(kernels: Sequence[Kernel], tmp: Path) -> M7Harness:
    """arm-none-eabi-gcc with the board's flags (its CPU profile, which
    includes NUMERICS_CFLAGS), its startup and board sources, its linker script."""
    board = load_board(BOARD)
    kernels = tuple(kernels)
    src = tmp / "kernel_harness_m7.c"
    src.write_text(harness_source(kernels, M7_IO, M7_MAIN))
    ram = next(r for r in board.memory.regions if r.name == "ram")
    lds = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(board.file(board.linker_script).read_text())
    # the one Cortex-M linker template (boards/cortex-m/linker.ld.j2), as the kernel bench renders it
    (tmp / "linker.ld").write_text(lds.render(**static_link_layout(board, ram, 65536).variables()))
    (tmp / "board_config.h").write_text("".join(f"#define {c.name} {c.value}\n" for c in config_header(board)))
    elf = tmp / "kernel_harness_m7.elf"
    cmd = ["arm-none-eabi-gcc", *board.cflags, *WARNINGS, "-I", str(firmware_dir()), "-I", str(tmp), str(src),
           *map(str, runtime_sources(kernels)), *map(str, board.source_paths()), *board.ldflags,
           f"-T{tmp / 'linker.ld'}", "-o", str(elf), *(f"-l{lib}" for lib in board.libs)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the M7 kernel harness does not build:\n{proc.stderr}")
    return M7Harness(elf, kernels)


def run_batch(h: M7Harness, calls: Sequence[tuple[str, bytes]], tmp: Path, timeout_s: float = 300) -> list[bytes]:
    """Boot once, run every (kernel, stdin bytes) call, return each call's stdout bytes."""
    blob = bytearray(struct.pack("<II", MAGIC, len(calls)))
    for name, data in calls:
        blob += struct.pack("<II", h.index(name), len(data)) + data + bytes(-len(data) % 4)
    assert len(blob) <= IN_BYTES, f"a batch of {len(blob)} B does not fit the {IN_BYTES} B input area"
    (tmp / "in.bin").write_bytes(bytes(blob))
    out = tmp / OUT_FILE
    out.unlink(missing_ok=True)
    board = load_board(BOARD)
    cmd = [board.emulator.program, *board.emulator.args, "-semihosting-config", "enable=on,target=native",
           "-serial", "null", "-device", f"loader,file={tmp / 'in.bin'},addr=0x{PSRAM:08X},force-raw=on",
           "-kernel", str(h.elf)]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the M7 kernel harness exited {proc.returncode}: {proc.stdout[-400:]!r} {proc.stderr[-400:]!r}")
    raw, results, at = out.read_bytes(), [], 0
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        results.append(raw[at + 4: at + 4 + n])
        at += 4 + n
    assert len(results) == len(calls), f"{len(results)} results for {len(calls)} calls"
    return results
