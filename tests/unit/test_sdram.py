"""The STM32H750B-DK's FMC SDRAM (issue 25.1): board.json's "sdram" parsed
with one-line errors naming the key; the register encodings bringup.c writes
(families/stm32h750/registers.py); the FMC and MPU models of the Unicorn
runner driven register by register (the right sequence makes the SDRAM
usable, every misuse is one line); the planner's --kv-region (the KV cache
alone in SDRAM, outside the RAM budget; auto picks SRAM first; without it
every figure is what it was)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from plans import step_of
from test_region_planner import STORIES260K
from test_region_planner import shape as llama
from tinyllm_gen.board import load_board, parse_board
from tinyllm_gen.errors import UserError
from tinyllm_gen.families import config_header
from tinyllm_gen.families.stm32h750 import registers
from tinyllm_gen.families.stm32h750.peripherals import (FMC_BCR1, FMC_BCR1_FMCEN, FMC_SDCMR, FMC_SDCR1, FMC_SDCR2,
                                                        FMC_SDRTR, FMC_SDTR1, FMC_SDTR2, MPU_CTRL, MPU_RASR, MPU_RBAR,
                                                        MPU_RNR, FmcModel, MpuModel)
from tinyllm_gen.fit.search import FitRequest, Planner, plan_step
from tinyllm_gen.plan.report import plan_json
from tinyllm_gen.resources import boards_dir

DK = "stm32h750b-dk"
KIB = 1024


def dk_json():
    path = boards_dir() / DK / "board.json"
    return path, json.loads(path.read_text())


# ------------------------------------------------------------------ board.json
@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(rows=12), "sdram: unknown key 'rows'"),
    (lambda s: s.pop("cas_latency"), "sdram: missing key 'cas_latency'"),
    (lambda s: s.update(row_bits=13), "sdram.row_bits: columns, rows, banks and data width address 16,777,216 B"),
    (lambda s: s.update(data_bits=12), "sdram.data_bits: must be 8, 16 or 32, got 12"),
    (lambda s: s.update(sdclk_div=4), "sdram.sdclk_div: must be at most 3, got 4"),
    (lambda s: s.update(fmc_bank=1), "sdram.fmc_bank: FMC SDRAM bank 1 is at 0xC0000000, region sdram at 0xD0000000"),
    (lambda s: s.update(region="axi"), "sdram.region: 'axi' is not a memory_regions entry with use \"kv\""),
    (lambda s: s.update(pins=["PD0", "PZ3"]), "sdram.pins: 'PZ3' is not a pin like PD0"),
    (lambda s: s.update(t_rcd_ns=-1), "sdram.t_rcd_ns: expected a positive number"),
    (lambda s: s.update(kernel_clock="hse"), "sdram.kernel_clock: 'hse' is not one of"),
    (lambda s: s.update(kernel_hz_min=300_000_000), "sdram.kernel_hz_min: 300000000 is above kernel_hz"),
])
def test_a_bad_sdram_entry_is_one_line_naming_its_key(edit, message):
    path, doc = dk_json()
    doc = copy.deepcopy(doc)
    edit(doc["sdram"])
    with pytest.raises(UserError) as e:
        parse_board(path, doc)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_the_dk_sdram_is_8_mib_at_bank_2_and_only_a_kv_region():
    b = load_board(DK)
    assert b.sdram.bytes == 8 << 20 and b.sdram.sdclk_hz == 80e6 and b.sdram.bytes_per_s == 160e6
    assert [r.name for r in b.memory.kv_regions] == ["sdram"]
    assert "sdram" not in [r.name for r in b.memory.arena_regions]  # never in the 512 KiB budget's regions
    assert b.memory.sram_bytes == load_board("weact-h750").memory.sram_bytes
    assert load_board("weact-h750").sdram is None and not load_board("weact-h750").memory.kv_regions


# ------------------------------------------------------------------ encodings
def test_register_encodings_follow_the_part_and_rm0433():
    s = load_board(DK).sdram
    t = registers.sdram_timing(s)  # 12.5 ns cycles at 80 MHz
    assert (t.trcd, t.trp, t.tras, t.trc, t.txsr, t.tmrd) == (2, 2, 4, 5, 6, 2)
    assert t.twr == 2  # the part's 12 ns is one cycle; RM0433's TWR >= TRAS - TRCD makes it 2
    assert registers.sdram_sdcr(s) == 0x1DD4  # NC 8, NR 12, MWID 16, NB 4, CAS 3, SDCLK /3, RBURST
    assert registers.sdram_mode_register(s) == 0x230  # ST's BSP: BL 1, sequential, CL 3, single writes
    assert registers.sdram_refresh_count(s) == 1021  # 15.625 us x 66.67 MHz - 20
    assert registers.mpu_rasr(8 << 20) == 0x130B002D  # XN, full access, TEX 1 C 1 B 1, 8 MiB, enabled


def test_sdram_defines_only_when_the_plan_uses_it():
    b = load_board(DK)
    assert not any(c.name.startswith("TLLM_SDRAM") for c in config_header(b))
    on = {c.name: c.value for c in config_header(b, sdram_used=True)}
    assert on["TLLM_SDRAM_BASE"] == "0xD0000000u" and on["TLLM_SDRAM_BANK"] == "2u"
    assert on["TLLM_SDRAM_SDTR"] == f"0x{registers.sdram_timing(b.sdram).sdtr:08X}u"
    assert on["TLLM_SDRAM_PINS"].startswith("{{3, 0}, {3, 1}, {3, 8}") and on["TLLM_SDRAM_PINS"].endswith("{7, 7}}")
    assert not any(c.name.startswith("TLLM_SDRAM") for c in config_header(load_board("weact-h750"), True))


# ------------------------------------------------------------------ FMC model
class Rig:
    """The FMC model with the DK's part, its clock on or off, every line it says collected."""

    def __init__(self, clock=True, kernel_hz=240_000_000):
        self.clock, self.lines, self.ready = clock, [], []
        self.m = FmcModel(load_board(DK).sdram, lambda: self.clock, lambda: (kernel_hz, []),
                          on_violation=self.lines.append, on_ready=lambda: self.ready.append(True))

    def configure(self, sdcr=None, sdtr=None):
        s = load_board(DK).sdram
        sdcr = registers.sdram_sdcr(s) if sdcr is None else sdcr
        sdtr = registers.sdram_timing(s).sdtr if sdtr is None else sdtr
        for reg, v in ((FMC_SDCR1, sdcr), (FMC_SDTR1, sdtr), (FMC_SDCR2, sdcr), (FMC_SDTR2, sdtr)):
            self.m.write(reg, v)
        self.m.write(FMC_BCR1, 0x30DB | FMC_BCR1_FMCEN)

    def command(self, mode, nrfs=1, mrd=0, ctb=1 << 3):
        self.m.write(FMC_SDCMR, mode | ctb | (nrfs - 1) << 5 | mrd << 9)

    def bring_up(self, until=5):
        steps = [lambda: self.command(1), lambda: self.command(2), lambda: self.command(3, nrfs=8),
                 lambda: self.command(4, mrd=0x230), lambda: self.m.write(FMC_SDRTR, 1021 << 1)]
        for step in steps[:until]:
            step()


def test_the_bsp_sequence_makes_the_sdram_ready():
    rig = Rig()
    rig.configure()
    assert rig.m.cpu_access(0xD0000000, False) is not None  # before any command
    rig.lines.clear()
    rig.bring_up()
    assert rig.m.ready and rig.ready == [True] and rig.lines == []
    assert rig.m.cpu_access(0xD0000000, True) is None and rig.m.read(0x158) == 0  # SDSR: normal mode, no busy flag


@pytest.mark.parametrize("misuse, line", [
    (lambda r: (r.configure(), r.bring_up(4), r.m.cpu_access(0xD0000010, False)),
     "FMC: CPU read 0xD0000010 in the SDRAM before its bring-up (the refresh rate (SDRTR) not done)"),
    (lambda r: (r.configure(), r.command(2)), "FMC SDRAM precharge all out of order: clock enable comes next"),
    (lambda r: (r.configure(), r.bring_up(1), r.command(3, nrfs=8)),
     "FMC SDRAM auto-refresh out of order: precharge all comes next"),
    (lambda r: (r.configure(), r.bring_up(3), r.m.write(FMC_SDRTR, 1021 << 1)),
     "FMC SDRTR written before the load mode register command"),
    (lambda r: (r.configure(), r.bring_up(3), r.command(4, mrd=0x220)),
     "FMC SDRAM mode register 0x220: CAS latency 2, SDCR has 3"),
    (lambda r: (r.configure(), r.bring_up(3), r.command(4, mrd=0x233)), "burst length is not 1"),
    (lambda r: (r.configure(), r.bring_up(2), r.command(3, nrfs=1)), "auto-refresh x1: the MT48LC4M32B2B5-6A needs two"),
    (lambda r: (r.configure(), r.command(1, ctb=1 << 4)), "FMC SDCMR targets bank 1; the SDRAM is on bank 2 only"),
    (lambda r: (r.configure(sdcr=0x1DD0), r.command(1)), "FMC: SDCR2.NR is 0, the MT48LC4M32B2B5-6A as wired needs 1"),
    (lambda r: (r.configure(sdcr=0x11D4), r.command(1)), "FMC: SDCR1.SDCLK is not 2 or 3"),
    (lambda r: (r.configure(), r.bring_up(4), r.m.write(FMC_SDRTR, 1300 << 1)),
     "FMC SDRTR.COUNT 1300: a row every 16.50 us at SDCLK 80 MHz, the MT48LC4M32B2B5-6A needs 15.625 us"),
    (lambda r: (r.configure(), r.bring_up(4), r.m.write(FMC_SDRTR, 30 << 1)), "FMC SDRTR.COUNT 30 is below 41"),
    (lambda r: r.m.write(FMC_SDCR1, 0x1DD4), "FMC SDCR1 written while the FMC clock is off (RCC AHB3ENR.FMCEN)"),
])
def test_each_misuse_is_one_line(misuse, line):
    rig = Rig(clock="clock is off" not in line)
    misuse(rig)
    assert rig.lines and line in rig.lines[0] and "\n" not in rig.lines[0]
    assert not rig.m.ready


def test_a_command_before_the_fmc_is_enabled_is_refused():
    rig = Rig()
    rig.configure()
    rig.m.write(FMC_BCR1, 0x30DB)
    rig.command(1)
    assert rig.lines == ["FMC SDRAM command while the FMC is disabled (BCR1.FMCEN)"]


def test_timings_are_checked_at_the_sdclk_in_use():
    """The same SDTR at a faster kernel clock (SDCLK 120 MHz: 8.3 ns cycles) is too short for the part."""
    rig = Rig(kernel_hz=360_000_000)
    rig.configure()
    rig.command(1)
    assert rig.lines and rig.lines[0].startswith("FMC: SDTR.TXSR 6 cycles = 50.0 ns at SDCLK 120 MHz, the "
                                                 "MT48LC4M32B2B5-6A needs 70 ns")


# ------------------------------------------------------------------ MPU model
def test_the_mpu_model_says_when_the_sdram_is_device_memory():
    mpu = MpuModel()
    assert "the MPU is off" in mpu.normal_memory_problem(0xD0000000)
    mpu.write(MPU_RNR, 0)
    mpu.write(MPU_RBAR, 0xD0000000)
    mpu.write(MPU_RASR, registers.mpu_rasr(8 << 20))
    mpu.write(MPU_CTRL, 5)
    assert mpu.normal_memory_problem(0xD0000000) is None and mpu.normal_memory_problem(0xD07FFFFC) is None
    assert "no enabled MPU region covers 0xD0800000" in mpu.normal_memory_problem(0xD0800000)
    mpu.write(MPU_RASR, (registers.mpu_rasr(8 << 20) & ~(7 << 19 | 3 << 16)) | 1 << 16)  # TEX 0 C 0 B 1: device
    assert "Device or strongly-ordered (TEX 0 C 0 B 1)" in mpu.normal_memory_problem(0xD0000000)


# ------------------------------------------------------------------ planner
SMOLLM2 = (576, 1536, 30, 9, 3, 49152, 8192)


def fitted(src, seq, kv_region, budget=512 * KIB, board=DK):
    b = load_board(board)
    req = FitRequest(b, budget, seq, kv_region=kv_region)
    return plan_step(Planner(b, budget), step_of(src), src, req, seq)


def test_kv_region_sdram_puts_the_kv_cache_alone_there_outside_the_budget():
    src = llama(*STORIES260K)
    sram, sdram = fitted(src, 512, "sram").plan, fitted(src, 512, "sdram").plan
    assert {b.region for b in sram.buffers if b.request.kind == "kv"} <= {"axi", "sram1", "sram2", "sram3", "sram4"}
    assert {b.region for b in sdram.buffers if b.request.kind == "kv"} == {"sdram"}
    assert all(b.region != "sdram" for b in sdram.buffers if b.request.kind != "kv")
    assert sdram.kv_cache_bytes == sram.kv_cache_bytes and sdram.external_bytes == sdram.kv_cache_bytes + 16
    assert sdram.total_bytes == sram.total_bytes - sram.kv_cache_bytes  # the budget counts SRAM only
    doc = plan_json(sdram)
    assert doc["kv_region"] == "sdram" and doc["kv_cache_regions"] == ["sdram"]
    assert [r.get("external", False) for r in doc["region_detail"]][-1] is True


def test_auto_keeps_sram_when_the_context_fits_and_takes_sdram_when_not():
    src = llama(*STORIES260K)
    assert fitted(src, 512, "auto").plan.kv_cache_regions == ("axi",)
    small = fitted(src, 512, "auto", budget=192 * KIB).plan  # 245,760 B of int8 KV cannot fit beside the rest
    assert small.kv_cache_regions == ("sdram",) and small.fits
    with pytest.raises(UserError, match="--kv-region sdram"):  # the fix is named when SRAM is asked for
        fitted(src, 512, "sram", budget=192 * KIB)


def test_defaults_are_unchanged_and_max_seq_auto_reports_both_figures():
    """Without --kv-region the DK plans as the WeAct (the same SRAM): the 512 KiB figures of today."""
    smol = llama(*SMOLLM2, kv_bits=4)
    dk, weact = fitted(smol, "auto", "sram"), fitted(smol, "auto", "sram", board="weact-h750")
    assert dk.plan.max_seq == weact.plan.max_seq and dk.plan.total_bytes == weact.plan.total_bytes
    assert fitted(smol, "auto", "auto").plan.max_seq == dk.plan.max_seq  # auto: SRAM first
    sd = fitted(smol, "auto", "sdram")
    assert sd.plan.max_seq >= 1024 and sd.plan.kv_cache_regions == ("sdram",)
    # int4 KV with g32 scales: 7,200 B a token; each of a layer's 4 buffers rounds up to 16 B
    assert 0 <= sd.plan.kv_cache_bytes - 7200 * sd.plan.max_seq < 30 * 4 * 16
    assert f"; with --kv-region sram (this prefill batch and stream): {dk.plan.max_seq} tokens" in sd.trade_off
    assert f"; with --kv-region sdram (this prefill batch and stream): {sd.plan.max_seq} tokens" in dk.trade_off
    assert "--kv-region" not in weact.trade_off


def test_sdram_on_a_board_without_it_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "compile", "models/story-260k", "--board",
                           "weact-h750", "--kv-region", "sdram", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=boards_dir().parent)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert "board weact-h750 has no SDRAM" in lines[0] and "--board stm32h750b-dk" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_context_too_big_for_both_names_the_context_the_sdram_holds():
    """SmolLM2's 8,192 positions fit neither the SRAM nor the DK's SDRAM: the refusal names the larger
    context the SDRAM does hold (--kv-region sdram --max-seq N, N the largest that fits there) beside the
    SRAM's; the WeAct, without SDRAM, does not."""
    import re

    smol = llama(*SMOLLM2)  # int8 KV
    with pytest.raises(UserError) as e:
        fitted(smol, 8192, "sram")
    sd = re.search(r"--kv-region sdram --max-seq (\d+)", str(e.value))
    sram = re.search(r"or --max-seq (\d+)$", str(e.value))
    assert sd and sram and int(sd.group(1)) > int(sram.group(1)), str(e.value)
    assert fitted(smol, int(sd.group(1)), "sdram").plan.fits
    with pytest.raises(UserError):
        fitted(smol, int(sd.group(1)) + 1, "sdram")
    with pytest.raises(UserError) as e:
        fitted(smol, 8192, "sram", board="weact-h750")
    assert "--kv-region" not in str(e.value)
