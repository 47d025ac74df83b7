"""Smoke tests for the boards: a tiny tllm_main() built with CMake for the
host and for qemu-mps2-an500, run through tinyllm_gen.run (host.py, qemu.py)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from tinyllm_gen.errors import UserError
from tinyllm_gen.run import host, qemu
from tinyllm_gen.board import board_names, load_board
from tinyllm_gen.emit.link_layout import static_link_layout
from tinyllm_gen.resources import firmware_dir
from tinyllm_gen.families import config_header
from bounds import BACKSTOP_S

FIRMWARE_DIR = firmware_dir()
TOOLCHAIN_FILE = FIRMWARE_DIR / "cmake" / "arm-none-eabi.cmake"

HAVE_CMAKE = shutil.which("cmake") is not None
HAVE_ARM_GCC = shutil.which("arm-none-eabi-gcc") is not None
HAVE_QEMU = shutil.which("qemu-system-arm") is not None
HAVE_HOST_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None

needs_cmake = pytest.mark.skipif(not HAVE_CMAKE, reason="cmake is not installed")
needs_arm = pytest.mark.skipif(
    not HAVE_ARM_GCC,
    reason="arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)",
)
needs_qemu = pytest.mark.skipif(
    not HAVE_QEMU, reason="qemu-system-arm is not installed (apt-get install qemu-system-arm)"
)

# The weights word the QEMU run places at the board's weights address.
WEIGHTS_WORD = 0xC0FFEE42
LOOP_ITERS = 1_000_000  # two instructions each (subs + bne)

TEST_MAIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "tllm_board.h"

static void say(const char *s) { tllm_board_write(s, strlen(s)); }

static void say_u64(const char *label, uint64_t v)
{
    char buf[32];
    int i = (int)sizeof buf;
    buf[--i] = '\0';
    buf[--i] = '\n';
    do {
        buf[--i] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    say(label);
    say(&buf[i]);
}

static volatile int zero;

static int deep(int n)
{
    volatile char pad[512];
    pad[0] = (char)n;
    return n == 0 ? pad[0] : deep(n - 1) + pad[0];
}

int tllm_main(void)
{
    uint64_t t0 = tllm_board_instret();
    say("hello\n");

    size_t len = 0;
    const uint8_t *req = tllm_board_request(&len);
    if (req == NULL) {
        say("no request\n");
        return 3;
    }
    uint32_t h = 2166136261u; /* FNV-1a over the whole request */
    for (size_t i = 0; i < len; ++i) {
        h = (h ^ req[i]) * 16777619u;
    }
    char line[64];
    snprintf(line, sizeof line, "request len=%lu fnv=%08lx\n", (unsigned long)len, (unsigned long)h);
    say(line);

    if (len >= 14 && memcmp(req + 8, "fault:", 6) == 0) {
        if (len >= 18 && memcmp(req + 14, "div0", 4) == 0) {
            return 100 / zero;
        }
        return deep(1 << 20);
    }

    printf("stdio ok\n");
    fflush(stdout);

#if defined(__arm__)
    snprintf(line, sizeof line, "weights=%08lx\n",
             (unsigned long)*(const volatile uint32_t *)0x60000000u);
    say(line);
    uint32_t n = LOOP_ITERS;
    uint64_t a = tllm_board_instret();
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    uint64_t b = tllm_board_instret();
    say_u64("loop=", b - a);
#endif
    say_u64("can_count=", (uint64_t)tllm_board_can_count());
    say_u64("instret=", tllm_board_instret() - t0);
    return 7;
}
""".replace("LOOP_ITERS", str(LOOP_ITERS))

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.20)
project(tllm_smoke C)
set(CMAKE_C_STANDARD 11)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
set(TLLM_FIRMWARE_DIR {firmware_dir})
set(TLLM_BOARD_SOURCES {sources})
set(TLLM_BOARD_CFLAGS {cflags})
set(TLLM_BOARD_LDFLAGS {ldflags})
set(TLLM_BOARD_LIBS {libs})
set(TLLM_LINKER_SCRIPT {linker_script})
add_executable(fw main.c ${{TLLM_BOARD_SOURCES}})
target_include_directories(fw PRIVATE ${{TLLM_FIRMWARE_DIR}} ${{CMAKE_CURRENT_SOURCE_DIR}})
target_compile_options(fw PRIVATE ${{TLLM_BOARD_CFLAGS}} -Wall -Wextra -Werror)
target_link_options(fw PRIVATE ${{TLLM_BOARD_LDFLAGS}})
target_link_libraries(fw PRIVATE ${{TLLM_BOARD_LIBS}})
if(TLLM_LINKER_SCRIPT)
  target_link_options(fw PRIVATE "-T${{TLLM_LINKER_SCRIPT}}" "-Wl,-Map=fw.map")
  set_target_properties(fw PROPERTIES LINK_DEPENDS "${{TLLM_LINKER_SCRIPT}}" SUFFIX ".elf")
endif()
"""


def _cmake_list(items) -> str:
    return " ".join('"' + str(x).replace("\\", "/").replace('"', '\\"') + '"' for x in items)


def render_linker_script(board_name: str, **variables) -> str:
    board = load_board(board_name)
    template_path = board.file(board.linker_script)
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    return env.from_string(template_path.read_text(encoding="utf-8")).render(**variables)


def qemu_link_variables(ram_bytes: int | None = None, stack_bytes: int | None = None) -> dict:
    """The linker variables of a program without a plan on the QEMU board:
    its code region and its data RAM (ram_bytes of it) for stack and statics."""
    board = load_board("qemu-mps2-an500")
    ram = board.memory.region("ram")
    if ram_bytes is not None:
        ram = replace(ram, size=ram_bytes)
    return static_link_layout(board, ram, board.stack_bytes if stack_bytes is None else stack_bytes).variables()


def write_board_config(board, where: Path) -> None:
    """board_config.h as compile emits it (the defines, without the banner)."""
    (where / "board_config.h").write_text("".join(f"#define {c.name} {c.value}\n" for c in config_header(board)))


def build(board_name: str, src: Path, build_dir: Path) -> Path:
    """Configure and build main.c for a board with CMake; return the executable."""
    board = load_board(board_name)
    linker_script = ""
    args = ["cmake", "-S", str(src), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE="]
    write_board_config(board, src)
    if board.is_arm:
        ld = src / "fw.ld"
        ld.write_text(render_linker_script(board_name, **qemu_link_variables()), encoding="utf-8")
        linker_script = _cmake_list([ld])
        args.append(f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}")
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    (src / "CMakeLists.txt").write_text(
        CMAKELISTS.format(
            firmware_dir=_cmake_list([FIRMWARE_DIR]),
            sources=_cmake_list(board.source_paths()),
            cflags=_cmake_list(board.cflags),
            ldflags=_cmake_list(board.ldflags) or '""',
            libs=_cmake_list(board.libs) or '""',
            linker_script=linker_script or '""',
        ),
        encoding="utf-8",
    )
    for cmd in (args, ["cmake", "--build", str(build_dir)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    exe = build_dir / ("fw.elf" if linker_script else "fw")
    assert exe.is_file()
    return exe


def make_request(payload: bytes) -> bytes:
    return b"TLRQ" + struct.pack("<I", 8 + len(payload)) + payload


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


@pytest.fixture
def project(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text(TEST_MAIN, encoding="utf-8")
    request = make_request(bytes(range(256)) * 3 + b"tail")
    request_bin = tmp_path / "request.bin"
    request_bin.write_bytes(request)
    return src, request, request_bin


# ---------------------------------------------------------------- no tools needed


def test_board_names_and_unknown_board():
    assert board_names() == ["host", "qemu-mps2-an500", "stm32h750b-dk", "weact-h750"]
    with pytest.raises(UserError, match="unknown board 'x': choose one of host, qemu-mps2-an500, stm32h750b-dk"):
        load_board("x")
    with pytest.raises(UserError):
        load_board("../boards")


def test_qemu_command_shape(tmp_path: Path):
    board = load_board("qemu-mps2-an500")
    w = tmp_path / "w.bin"
    w.write_bytes(b"\0" * 16)
    r = tmp_path / "r.bin"
    r.write_bytes(make_request(b"x"))
    cmd = qemu.qemu_command(tmp_path / "fw.elf", board, w, r, tmp_path / "uart.txt")
    joined = " ".join(cmd)
    assert cmd[0] == "qemu-system-arm"
    for part in ("-M mps2-an500", "-cpu cortex-m7", "-nographic", "-monitor none",
                 "-semihosting-config enable=on,target=native", "-icount shift=0"):
        assert part in joined
    assert f"loader,file={w},addr=0x60000000,force-raw=on" in joined
    assert f"loader,file={r},addr=0x60FFC000,force-raw=on" in joined
    assert cmd[-2:] == ["-kernel", str(tmp_path / "fw.elf")]
    assert "-icount" not in qemu.qemu_command(tmp_path / "fw.elf", board, None, None,
                                             tmp_path / "u.txt", count=False)
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (board.request.max_bytes + 1))
    with pytest.raises(UserError, match="room for 16384 bytes"):
        qemu.qemu_command(tmp_path / "fw.elf", board, None, big, tmp_path / "u.txt")


def test_linker_template_is_strict():
    with pytest.raises(jinja2.UndefinedError):
        render_linker_script("qemu-mps2-an500", stack_bytes=4096)
    a = render_linker_script("qemu-mps2-an500", **qemu_link_variables())
    assert a == render_linker_script("qemu-mps2-an500", **qemu_link_variables())
    assert "LENGTH = 4194304" in a and f"__stack_size__ = {load_board('qemu-mps2-an500').stack_bytes};" in a


# ---------------------------------------------------------------- host


@pytest.mark.host
@needs_cmake
@pytest.mark.skipif(not HAVE_HOST_CC, reason="no host C compiler")
def test_host_board(project, tmp_path: Path):
    src, request, request_bin = project
    exe = build("host", src, tmp_path / "build-host")
    res = host.run_host(exe, request_bin)
    assert not res.timed_out
    assert res.exit_code == 7, res
    assert res.output == (
        "hello\n"
        f"request len={len(request)} fnv={fnv1a(request):08x}\n"
        "stdio ok\n"
        "can_count=0\n"
        "instret=0\n"
    )
    res = host.run_host(exe, None)
    assert (res.exit_code, res.output) == (3, "hello\nno request\n")


# ---------------------------------------------------------------- QEMU


@pytest.mark.emu
@needs_cmake
@needs_arm
@needs_qemu
def test_qemu_board(project, tmp_path: Path):
    src, request, request_bin = project
    elf = build("qemu-mps2-an500", src, tmp_path / "build-qemu")
    board = load_board("qemu-mps2-an500")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(struct.pack("<I", WEIGHTS_WORD) + bytes(60))

    res = qemu.run_qemu(elf, board, weights, request_bin, timeout_s=BACKSTOP_S)
    assert not res.timed_out, res
    assert res.exit_code == 7, res
    lines = res.output.splitlines()
    assert lines[:4] == [
        "hello",
        f"request len={len(request)} fnv={fnv1a(request):08x}",
        "stdio ok",
        f"weights={WEIGHTS_WORD:08x}",
    ], res.output
    # TIMER0 under -icount shift=0 ticks once per 40 instructions.
    loop = int(lines[4].removeprefix("loop="))
    assert abs(loop - 2 * LOOP_ITERS) <= 80, lines[4]
    assert lines[5] == "can_count=1"
    instret = int(lines[6].removeprefix("instret="))
    assert 2 * LOOP_ITERS <= instret < 2 * LOOP_ITERS + 200_000
    assert len(lines) == 7

    # Counting is deterministic: a second run prints exactly the same.
    again = qemu.run_qemu(elf, board, weights, request_bin, timeout_s=BACKSTOP_S)
    assert again.output == res.output and again.exit_code == 7

    # No request placed: PSRAM reads as zero, so the board returns NULL.
    res = qemu.run_qemu(elf, board, None, None, timeout_s=BACKSTOP_S)
    assert (res.exit_code, res.output) == (3, "hello\nno request\n")

    # Faults print one line on the UART and exit with their own status.
    for payload, code, name in ((b"fault:div0", 253, "UsageFault"),
                                (b"fault:stack", 251, "MemManage")):
        rq = tmp_path / "fault.bin"
        rq.write_bytes(make_request(payload))
        res = qemu.run_qemu(elf, board, None, rq, timeout_s=BACKSTOP_S)
        assert res.exit_code == code, res
        assert f"*** {name} " in res.output, res.output


@pytest.mark.emu
@needs_arm
def test_link_fails_when_ram_budget_is_too_small(tmp_path: Path):
    board = load_board("qemu-mps2-an500")
    main = tmp_path / "main.c"
    main.write_text(
        '#include "tllm_board.h"\n'
        "static volatile unsigned char big[256 * 1024];\n"
        "int tllm_main(void) { big[1] = 1; return big[1]; }\n",
        encoding="utf-8",
    )

    def link(ram_bytes: int) -> subprocess.CompletedProcess:
        ld = tmp_path / f"fw-{ram_bytes}.ld"
        ld.write_text(render_linker_script(
            "qemu-mps2-an500", **qemu_link_variables(ram_bytes=ram_bytes, stack_bytes=16384)))
        write_board_config(board, tmp_path)
        cmd = ["arm-none-eabi-gcc", *board.cflags, "-Wall", "-Wextra", "-Werror",
               f"-I{FIRMWARE_DIR}", f"-I{tmp_path}", str(main), *map(str, board.source_paths()),
               "--specs=nano.specs", *board.ldflags, f"-T{ld}",
               "-o", str(tmp_path / f"fw-{ram_bytes}.elf"), "-lm"]
        return subprocess.run(cmd, capture_output=True, text=True)

    ok = link(512 * 1024)
    assert ok.returncode == 0, ok.stderr
    bad = link(256 * 1024)  # 256 KiB .bss + 16 KiB stack does not fit
    assert bad.returncode != 0
    assert "RAM" in bad.stderr, bad.stderr
