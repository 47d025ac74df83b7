"""STM32H750 boards compile and LINK (arm-none-eabi-gcc): the generated linker
script puts every section where the board's memory map says, the weights are
a NOLOAD section in QSPI, and the report sets arm-none-eabi-size beside the
plan.  Nothing here can run: no emulator models the H7 (see board.json)."""
import json
import subprocess

import pytest

from firmware_harness import build_case, need, prompt_for
from tinyllm_gen.build import run_firmware
from tinyllm_gen.errors import UserError
from tinyllm_gen.sampler import SamplingOptions

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
    plan = json.loads((built.out / "plan.json").read_text())
    assert secs[".vectors"][1] == 0x08000000
    assert secs[".stack"][1] == 0x20000000 and secs[".stack"][2] == plan["stack_bytes"]
    for r in plan["region_detail"]:
        if r["arena_bytes"]:
            typ, addr, size = secs[f".tllm_arena.{r['name']}"]
            assert typ == "NOBITS" and size == r["arena_bytes"]
            assert int(r["address"], 16) <= addr < int(r["address"], 16) + r["size"]
    assert {"dtcm", "axi"} <= set(plan["regions"])
    typ, addr, size = secs[".tllm_weights"]
    weights = (built.out / "weights.bin").stat().st_size
    assert (typ, addr, size) == ("NOBITS", 0x90000000, weights)
    assert all(not (0x90000000 <= a < 0xA0000000 and n) for a, n in load_segments(elf))  # never loaded
    report = json.loads((built.out / "report.json").read_text())
    assert report["elf"]["ram_regions"]["axi"] == plan["region_detail"][1]["arena_bytes"]
    md = (built.out / "report.md").read_text()
    assert "arm-none-eabi-size beside the plan" in md and "memory_map.svg" in md
    assert (built.out / "memory_map.svg").read_text().startswith("<svg")


def test_h750_runs_are_refused_with_the_reason(root):
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, "weact-h750")
    with pytest.raises(UserError, match="does not run under an emulator: no emulator models the STM32H750"):
        run_firmware(built.out, prompt_for(built.model_dir), 4, SamplingOptions())
