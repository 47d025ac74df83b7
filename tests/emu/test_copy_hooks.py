"""The weight-streaming hooks (tllm_board.h: tllm_board_copy_start/wait) on
the host and on QEMU mps2-an500: a synchronous copy behind the same contract
the STM32H750's MDMA keeps (tests/emu/test_mdma_unicorn.py), so every test
tier runs the streaming calls.  Misuse (a second start in flight, a
misaligned destination) stops with one line and status 251."""
from __future__ import annotations

from pathlib import Path

import pytest

from copy_hook_main import expected_ok_output, main_c, request, source_blob
from test_board_smoke import HAVE_HOST_CC, build, needs_arm, needs_cmake, needs_qemu
from tinyllm_gen.run import host, qemu
from tinyllm_gen.board import load_board
from bounds import BACKSTOP_S


def _project(tmp_path: Path, src_expr: str, host: bool) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    text = main_c(src_expr)
    (src / "main.c").write_text(("#define TLLM_HOST_SOURCE 1\n" if host else "") + text)
    return src


def _req(tmp_path: Path, mode: bytes) -> Path:
    p = tmp_path / f"req-{mode.decode()}.bin"
    p.write_bytes(request(mode))
    return p


@pytest.mark.host
@needs_cmake
@pytest.mark.skipif(not HAVE_HOST_CC, reason="no host C compiler")
def test_host_copy_hook(tmp_path: Path):
    exe = build("host", _project(tmp_path, "host_src", host=True), tmp_path / "build")
    res = host.run_host(exe, _req(tmp_path, b"ok"))
    assert (res.exit_code, res.output) == (0, expected_ok_output()), res
    res = host.run_host(exe, _req(tmp_path, b"twice"))
    assert res.exit_code == 251 and "started while the previous transfer is in flight" in res.diagnostics
    res = host.run_host(exe, _req(tmp_path, b"misaligned"))
    assert res.exit_code == 251 and "multiples of 4" in res.diagnostics
    res = host.run_host(exe, _req(tmp_path, b"peek"))  # synchronous: nothing to see
    assert res.exit_code == 9


@pytest.mark.emu
@needs_cmake
@needs_arm
@needs_qemu
def test_qemu_copy_hook(tmp_path: Path):
    board = load_board("qemu-mps2-an500")
    elf = build("qemu-mps2-an500",
                _project(tmp_path, f"(const uint32_t *)0x{board.weights.address:08X}u", host=False),
                tmp_path / "build")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(source_blob())
    res = qemu.run_qemu(elf, board, weights, _req(tmp_path, b"ok"), timeout_s=BACKSTOP_S)
    assert (res.exit_code, res.output) == (0, expected_ok_output()), res
    res = qemu.run_qemu(elf, board, weights, _req(tmp_path, b"twice"), timeout_s=BACKSTOP_S)
    assert res.exit_code == 251 and "started while the previous transfer is in flight" in res.output
