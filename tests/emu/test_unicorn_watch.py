"""The Unicorn H750 model without memory hooks (run/unicorn.py): the MDMA's
watch on a buffer in flight is page protection with a fault callback
(run/tllm_uwatch.c, or its Python twin) that refuses an access inside the
pending range and lets the rest of the protected pages through, reads and
writes alike; and a whole run of the bundled model keeps no memory hook on
(the DWT and the SCB's MPU are MMIO pages), which is what keeps Unicorn on
its fast path."""
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
RAM, PENDING, PENDING_LEN = 0x20000000, 0x20000420, 0x100  # the range shares its page with its neighbours
# ldr r1, [r0]; str r2, [r0, #4]; then stop (the run ends at 0x104)
LOAD_STORE = bytes([0x01, 0x68, 0x42, 0x60, 0x00, 0xBF])


def _machine(uc, arm, make_watch):
    mu = uc.Uc(uc.UC_ARCH_ARM, uc.UC_MODE_THUMB | uc.UC_MODE_MCLASS)
    mu.mem_map(0x0, 0x1000)
    mu.mem_map(RAM, 0x10000)
    mu.mem_write(0x100, LOAD_STORE)
    watch = make_watch(uc, mu, [(RAM, RAM + 0x10000 - 1)])
    mu.emu_start(0x101, 0x104)  # translated before any protection: the protection must still reach it
    watch.set(0, PENDING, PENDING + PENDING_LEN)
    page = mu.ctl_get_page_size()
    mu.mem_protect(PENDING // page * page, page, uc.UC_PROT_EXEC)
    return mu, watch


def _run_at(mu, arm, address, stored):
    mu.reg_write(arm.UC_ARM_REG_R0, address)
    mu.reg_write(arm.UC_ARM_REG_R1, 0)
    mu.reg_write(arm.UC_ARM_REG_R2, stored)
    mu.emu_start(0x101, 0x104)


@pytest.mark.parametrize("kind", ["native", "python"])
def test_the_watch_refuses_the_pending_range_and_passes_its_page_neighbours(kind):
    uc = pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    from unicorn import arm_const as arm

    if kind == "native":
        need("gcc")
        make = uc_run.native_watch
    else:
        make = uc_run._PythonWatch
    mu, watch = _machine(uc, arm, make)
    assert watch is not None
    neighbour = PENDING + PENDING_LEN + 0x10  # on the protected page, outside the range
    mu.mem_write(neighbour, (0x12345678).to_bytes(4, "little"))
    _run_at(mu, arm, neighbour, 0xCAFEF00D)
    assert mu.reg_read(arm.UC_ARM_REG_R1) == 0x12345678  # the read went through
    assert bytes(mu.mem_read(neighbour + 4, 4)) == (0xCAFEF00D).to_bytes(4, "little")  # and the write
    assert watch.hit() is None
    with pytest.raises(uc.UcError):
        _run_at(mu, arm, PENDING + 8, 1)
    assert watch.hit() == (PENDING + 8, 4, False)


def test_a_run_keeps_no_memory_hook_on(tmp_path, monkeypatch):
    """Every hook the model adds for a whole generation on the WeAct board
    (no SDRAM, so no FMC guard): none is a UC_HOOK_MEM_READ or _WRITE."""
    uc = pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    board = "weact-h750"
    out = tmp_path / "out"
    write_tree(compile_path(STORY, CompileOptions(board=board)).tree, out)
    build(out)
    request = out / "build" / "request.bin"
    request.write_bytes(pack_request([1, 400, 31, 278], 4, GREEDY, 0))
    kinds = []
    real_add = uc.Uc.hook_add

    def recording_add(self, htype, *args, **kwargs):
        kinds.append(htype)
        return real_add(self, htype, *args, **kwargs)

    monkeypatch.setattr(uc.Uc, "hook_add", recording_add)
    res = uc_run.run_unicorn(out / "build" / "firmware.elf", load_board(board), out / "weights.bin", request,
                             timeout_s=BACKSTOP_S)
    assert res.exit_code == 0 and res.mdma.transfers > 0  # the pinned weights' boot copy ran under the watch
    assert not [k for k in kinds if k & (uc.UC_HOOK_MEM_READ | uc.UC_HOOK_MEM_WRITE)]
    assert b"@TLLM tok" in res.output
