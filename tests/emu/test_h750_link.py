"""STM32H750 boards compile and link (arm-none-eabi-gcc): the generated linker
script puts every section where the board's memory map says, the weights are
a NOLOAD section in QSPI, and the report sets arm-none-eabi-size beside the
plan.  Then the linked images run under the Unicorn model of the board
(run_unicorn.py: the H750's memory map, weights and request in the QSPI
window, the console USART) and must produce the reference's tokens."""
import json
from dataclasses import replace
import subprocess

import pytest

from firmware_harness import GREEDY, TOP_P, assert_identical, build_case, need, prompt_for
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.errors import UserError
from tinyllm_gen.board import load_board
from tinyllm_gen.run.protocol import pack_request
from tinyllm_gen.run.unicorn import _thumb_widths, run_unicorn
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("h750")


def sections(elf):
    out = subprocess.run(["arm-none-eabi-readelf", "-SW", str(elf)], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 6 and parts[0].startswith("[") and parts[1].startswith("."):
            rows[parts[1]] = (parts[2], int(parts[3], 16), int(parts[5], 16))  # type, address, size
    return rows


def symbols(elf):
    out = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    return {p[2]: int(p[0], 16) for p in (ln.split() for ln in out.splitlines()) if len(p) == 3}


def load_segments(elf):
    out = subprocess.run(["arm-none-eabi-readelf", "-lW", str(elf)], capture_output=True, text=True, check=True).stdout
    return [(int(p[2], 16), int(p[4], 16)) for p in (ln.split() for ln in out.splitlines())
            if p and p[0] == "LOAD"]  # (virtual address, file size)


@pytest.mark.parametrize("board", ["stm32h750b-dk", "weact-h750"])
@pytest.mark.parametrize("kv_bits", [8, 4])
def test_h750_links_with_regions_where_the_plan_says(root, board, kv_bits):
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, board, kv_bits=kv_bits)
    elf = built.out / "build" / "firmware.elf"
    secs = sections(elf)
    plan = json.loads((built.out / "report.json").read_text())
    assert secs[".vectors"][1] == 0x08000000
    assert secs[".stack"][1] == 0x20000000 and secs[".stack"][2] == plan["stack_bytes"]
    for r in plan["region_detail"]:
        if r["arena_bytes"]:
            typ, addr, size = secs[f".tllm_arena.{r['name']}"]
            assert typ == "NOBITS" and size == r["arena_bytes"]
            assert int(r["address"], 16) <= addr < int(r["address"], 16) + r["size"]
    assert {"dtcm", "axi"} <= set(plan["regions"])
    weights = (built.out / "weights.bin").stat().st_size
    syms = symbols(elf)
    assert syms["__tllm_weights_start__"] == 0x90000000
    assert syms["__tllm_weights_end__"] - syms["__tllm_weights_start__"] == weights
    assert all(not 0x90000000 <= a < 0xA0000000 for a, _ in load_segments(elf))  # no segment there: never loaded
    report = json.loads((built.out / "report.json").read_text())
    assert report["elf"]["ram_regions"]["axi"] == plan["region_detail"][1]["arena_bytes"]
    md = (built.out / "report.md").read_text()
    assert "arm-none-eabi-size beside the plan" in md and "memory_map.svg" in md
    assert (built.out / "memory_map.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("board", ["stm32h750b-dk", "weact-h750"])
@pytest.mark.parametrize("kv_bits", [8, 4])
def test_h750_firmware_matches_reference_under_unicorn(root, board, kv_bits):
    """The image a flasher writes, on the H750's memory map: DTCM/AXI arenas,
    .data copied from flash, weights and request read from QSPI."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, board, kv_bits=kv_bits)
    counts = assert_identical(built, 32, GREEDY)
    assert_identical(built, 32, TOP_P)
    assert all(n > 0 for n in counts)  # DWT's cycle counter reads the instruction count


@pytest.mark.parametrize("board,chip_read", [("stm32h750b-dk", 0x6C), ("weact-h750", 0x6B)])
def test_h750_bringup_from_reset(root, board, chip_read):
    """bringup.c from reset on the register models: 480 MHz without breaking
    a sequencing rule, QUADSPI memory-mapped with the chip's quad read, both
    caches on, and the console divisor for the 120 MHz APB clock."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, board)
    b = load_board(board)
    request = built.out / "build" / "request.bin"
    request.write_bytes(pack_request(prompt_for(built.model_dir), 2, GREEDY, 0))
    res = run_unicorn(built.out / "build" / "firmware.elf", b, built.out / "weights.bin", request, timeout_s=BACKSTOP_S)
    assert res.exit_code == 0 and not res.error and res.violations == []
    assert res.clock.sysclk_hz() == 480_000_000
    assert res.qspi.mapped is not None and res.qspi.mapped.instr == chip_read and res.qspi.mapped.dmode == 3
    assert res.scb_ccr >> 16 & 3 == 3
    assert res.usart_brr == round(120_000_000 / b.uart.baud)
    # revision Y silicon has no VOS0: 400 MHz at VOS1, the USART divisor follows
    res = run_unicorn(built.out / "build" / "firmware.elf", b, built.out / "weights.bin", request, timeout_s=BACKSTOP_S,
                      revision="Y")
    assert res.exit_code == 0 and res.violations == [] and res.clock.sysclk_hz() == 400_000_000
    assert not res.clock.oden and res.usart_brr == round(100_000_000 / b.uart.baud)


def test_h750_request_over_the_console_usart(root):
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, "weact-h750")
    ids = prompt_for(built.model_dir)
    memory = run_firmware(built.out, ids, 8, TOP_P)
    uart = run_firmware(built.out, ids, 8, TOP_P, transport="uart")
    assert uart.output.generated_ids == memory.output.generated_ids and len(uart.output.generated_ids) == 8
    assert "@TLLM ready" in uart.result.output


def test_h750_bad_access_is_a_one_line_error(root, tmp_path):
    """A firmware that reads outside the board's memory map stops with the
    address, as a bus fault would on the chip (here the QSPI window is cut to
    1 MiB, below the request block the firmware reads at 0x907FC000)."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, "weact-h750")
    full = load_board("weact-h750")
    small = tuple(replace(r, size=1 << 20) if r.name == "qspi" else r for r in full.memory.regions)
    board = replace(full, memory=replace(full.memory, regions=small))
    res = run_unicorn(built.out / "build" / "firmware.elf", board, built.out / "weights.bin", None, timeout_s=BACKSTOP_S)
    assert res.exit_code is None and "UC_ERR_READ_UNMAPPED" in res.error and "pc=0x08" in res.error
    assert res.qspi.mapped is not None and res.violations == []


def test_thumb_instruction_widths():
    # movs r0,#1 (16) ; bl (32) ; vmla.f32 (32) ; bx lr (16)
    code = bytes.fromhex("0120") + bytes.fromhex("00f000f8") + bytes.fromhex("00ee000a") + bytes.fromhex("7047")
    assert _thumb_widths(code) == 4
    assert _thumb_widths(bytes.fromhex("0120" * 5)) == 5


def test_h750_runs_need_unicorn(root, monkeypatch):
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, "weact-h750")
    monkeypatch.setitem(__import__("sys").modules, "unicorn", None)  # as if not installed
    with pytest.raises(UserError, match="needs the unicorn emulator: pip install unicorn"):
        run_firmware(built.out, prompt_for(built.model_dir), 4, GREEDY)
