"""The STM32H750's weight-streaming hook (boards/stm32h750/mdma.c) on
the Unicorn model of the board: the same test main as the host and QEMU
tiers (tests/copy_hook_main.py), built for each H750 board with its startup,
bring-up and linker script; the MDMA model (peripherals.MdmaModel) performs
the copies, counts the bytes, and stops the run at the first broken rule."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

from copy_hook_main import BIG, SMALL, expected_ok_output, main_c, request, source_blob
from test_board_smoke import CMAKELISTS, TOOLCHAIN_FILE, _cmake_list, write_board_config
from tinyllm_gen.board import load_board
from tinyllm_gen.kernels.c_names import ident
from tinyllm_gen.emit.link_layout import LinkArena, link_layout
from tinyllm_gen.resources import firmware_dir
from tinyllm_gen.run.unicorn import run_unicorn
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu

AXI_SECTION = ".tllm_arena.axi"


def _linker_script(board) -> str:
    """The board's linker script with one planned arena: BIG bytes in AXI SRAM."""
    mem = board.memory
    arenas = (LinkArena(AXI_SECTION, ident("axi"), BIG, "__tllm_arena_axi_start__", "__tllm_arena_axi_end__"),)
    layout = link_layout(mem.regions, mem.stack_region, stack_bytes=board.stack_bytes, runtime_static_bytes=64 << 10,
                         budget_bytes=1 << 20, arenas=arenas)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(board.file(board.linker_script).read_text()).render(**layout.variables())


def build_h750(board_name: str, root: Path) -> Path:
    for tool in ("arm-none-eabi-gcc", "cmake"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    board = load_board(board_name)
    src, out = root / "src", root / "build"
    src.mkdir(parents=True)
    (src / "main.c").write_text(main_c(f"(const uint32_t *)0x{board.weights.address:08X}u", AXI_SECTION))
    write_board_config(board, src)
    (src / "fw.ld").write_text(_linker_script(board))
    (src / "CMakeLists.txt").write_text(CMAKELISTS.format(
        firmware_dir=_cmake_list([firmware_dir()]), sources=_cmake_list(board.source_paths()),
        cflags=_cmake_list(board.cflags), ldflags=_cmake_list(board.ldflags), libs=_cmake_list(board.libs),
        linker_script=_cmake_list([src / "fw.ld"])))
    args = ["cmake", "-S", str(src), "-B", str(out), f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN_FILE}"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    for cmd in (args, ["cmake", "--build", str(out)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "fw.elf"




@pytest.fixture(scope="module")
def weact(tmp_path_factory):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    root = tmp_path_factory.mktemp("mdma")
    elf = build_h750("weact-h750", root)
    weights = root / "weights.bin"
    weights.write_bytes(source_blob())
    return elf, load_board("weact-h750"), weights, root


def _run(weact, mode: bytes, **kw):
    elf, board, weights, root = weact
    req = root / f"req-{mode.decode()}.bin"
    req.write_bytes(request(mode))
    return run_unicorn(elf, board, weights, req, timeout_s=BACKSTOP_S, **kw)


def test_mdma_copies_into_dtcm_and_axi_sram(weact):
    res = _run(weact, b"ok")
    assert res.error == "" and res.exit_code == 0, res.error or res.output
    assert res.output.decode().startswith(expected_ok_output())
    assert res.violations == []
    assert res.mdma.bytes_moved == SMALL + BIG and res.mdma.transfers == 2
    # the link runs at the clock board.json states (bringup.c's PLL2R, prescaler from board_config.h)
    q = weact[1].qspi_flash
    assert res.clock.qspi_kernel_hz() == (q.kernel_hz, []) and res.qspi.regs[0] >> 24 == q.prescaler - 1


def test_mdma_cpu_read_before_wait_stops_the_run(weact):
    res = _run(weact, b"peek")
    assert res.exit_code is None and res.error.startswith("MDMA: MDMA channel 0: CPU read 0x2")
    assert "whose transfer has not completed" in res.error and res.mdma.bytes_moved == 0


def test_mdma_second_start_is_the_contracts_fault(weact):
    res = _run(weact, b"twice")
    assert res.exit_code == 250 and b"started while the previous transfer is in flight" in res.output
    assert res.mdma.violations == []  # the hook refuses before the MDMA sees it


def test_mdma_dk_board_too(tmp_path):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    elf = build_h750("stm32h750b-dk", tmp_path)
    weights = tmp_path / "weights.bin"
    weights.write_bytes(source_blob())
    req = tmp_path / "req.bin"
    req.write_bytes(request(b"ok"))
    res = run_unicorn(elf, load_board("stm32h750b-dk"), weights, req, timeout_s=BACKSTOP_S)
    assert res.exit_code == 0 and res.violations == [] and res.output.decode().startswith(expected_ok_output())
    assert res.mdma.bytes_moved == SMALL + BIG
