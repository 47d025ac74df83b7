"""Unicorn's guest instruction counter: the C block hook (run/tllm_ucount.c)
counts exactly what the Python hook it replaced counts, for a whole
generation and at an instruction limit, so every instruction figure and
bound measured under Unicorn is the same with either."""
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from firmware_harness import GREEDY, need
from tinyllm_gen.board import load_board
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.run import unicorn as uc_run
from tinyllm_gen.run.protocol import pack_request

pytestmark = pytest.mark.emu

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
BOARD = "weact-h750"


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    out = tmp_path_factory.mktemp("ucount") / "out"
    write_tree(compile_path(STORY, CompileOptions(board=BOARD)).tree, out)
    build(out)
    request = out / "build" / "request.bin"
    request.write_bytes(pack_request([1, 400, 31, 278], 6, GREEDY, 0))
    return out, request


def _run(firmware, limit=None):
    out, request = firmware
    return uc_run.run_unicorn(out / "build" / "firmware.elf", load_board(BOARD), out / "weights.bin", request,
                              timeout_s=BACKSTOP_S, max_instructions=limit)


@pytest.mark.parametrize("limit", [None, 1_500_000], ids=["whole-run", "at-a-limit"])
def test_the_c_counter_counts_what_the_python_hook_counts(firmware, monkeypatch, limit):
    native = _run(firmware, limit)
    assert uc_run.native_counter.__module__ == uc_run.__name__
    with monkeypatch.context() as m:
        m.setattr(uc_run, "native_counter", lambda *_: None)  # the Python hook
        python = _run(firmware, limit)
    assert native.instructions == python.instructions > 0
    assert native.output == python.output  # the firmware's own per-token counts (DWT_CYCCNT) too
    assert native.timed_out == python.timed_out == (limit is not None)
    if limit is None:
        assert native.exit_code == 0
    else:
        assert limit < native.instructions < limit + 4096  # stopped at the first block past the limit


def test_a_memory_hook_added_after_its_code_ran_fires_without_a_translation_flush():
    """What the SDRAM's guard relies on (run/unicorn.map_fmc, removed at the
    first good access): Unicorn checks memory hooks when the access runs, so
    a hook added over memory that already-translated code reads fires, and
    after its removal stays silent, with no ctl_flush_tb.  (The MDMA's watch
    is page protection now: tests/emu/test_unicorn_watch.py.)"""
    uc = pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    from unicorn import arm_const

    mu = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_THUMB | uc.UC_MODE_MCLASS)
    mu.mem_map(0x0, 0x10000)
    mu.mem_map(0x20000000, 0x10000)
    mu.mem_write(0x100, bytes([0x01, 0x68, 0x01, 0x32]))  # ldr r1, [r0]; adds r2, #1
    mu.reg_write(arm_const.UC_ARM_REG_R0, 0x20000010)
    mu.emu_start(0x101, 0x104)  # translated once, unwatched
    hits = []
    h = mu.hook_add(uc.UC_HOOK_MEM_READ, lambda _mu, _acc, addr, _size, _v, _u: hits.append(addr),
                    begin=0x20000010, end=0x20000013)
    mu.emu_start(0x101, 0x104)
    assert hits == [0x20000010]
    mu.hook_del(h)
    mu.emu_start(0x101, 0x104)
    assert hits == [0x20000010]
