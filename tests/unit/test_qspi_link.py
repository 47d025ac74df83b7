"""The QUADSPI link as board data (board.json "qspi_flash", board.QspiFlash):
the values bringup.c gets through board_config.h, the link rate the timing
model uses, bad values as one-line errors, and the Unicorn chip models
checking the dummy cycles against the chip's table for the configured clock."""
import copy
import json

import pytest

from tinyllm_gen.board import load_board, parse_board
from tinyllm_gen.errors import UserError
from tinyllm_gen.families.stm32h750.peripherals import QSPI_CCR, QSPI_CR, QSPI_DCR, QspiModel
from tinyllm_gen.resources import boards_dir
from tinyllm_gen.families import config_header


def test_both_h750_boards_run_the_link_at_132_mhz_sdr():
    for name, instr, rate in (("weact-h750", "0x6Bu", 66e6), ("stm32h750b-dk", "0x6Cu", 132e6)):
        b = load_board(name)
        q = b.qspi_flash
        assert q.clock_hz == 132e6 and q.kernel_clock == "pll2_r" and not q.ddr and q.bytes_per_s == rate
        d = {c.name: c.value for c in config_header(b)}
        assert d["TLLM_QSPI_KERNEL_SEL"] == "2u" and d["TLLM_QSPI_PRESCALER"] == "0u" and d["TLLM_QSPI_DCYC"] == "8u" and d["TLLM_QSPI_CSHT"] == "2u"
        assert d["TLLM_QSPI_READ_INSTR"] == instr
        assert "datasheet" in q.note and "DS12556" in q.note  # every limit names its source
    # instruction 8 + address 24 (one line) + 8 dummy + 3 CS-high cycles before the WeAct's first byte
    assert load_board("weact-h750").qspi_flash.burst_overhead_cycles == 43
    assert load_board("stm32h750b-dk").qspi_flash.burst_overhead_cycles == 51


@pytest.mark.parametrize("key,value,why", [
    ("prescaler", 0, "at least 1"), ("dummy_cycles", 32, "at most 31"), ("data_lines", 3, "1, 2 or 4"),
    ("ddr", "yes", "true or false"), ("ddr", True, "DDR needs DTR read commands"), ("speed", 1, "unknown key"),
    ("kernel_clock", "pll3_r", "not one of"),
])
def test_bad_link_values_are_one_line_errors(key, value, why):
    path = boards_dir() / "weact-h750" / "board.json"
    doc = copy.deepcopy(json.loads(path.read_text()))
    doc["qspi_flash"][key] = value
    with pytest.raises(UserError, match=why):
        parse_board(path, doc)


def mapped(chip, prescaler, instr, dcyc, abytes, kernel_hz=240_000_000, dmode=3):
    q = QspiModel(chip, 1 if chip == "W25Q64JV" else 2, 8 << 20 if chip == "W25Q64JV" else 128 << 20,
                  kernel_hz=lambda: kernel_hz)
    q.qe = True
    q.write(QSPI_CR, ((prescaler - 1) << 24) | (1 << 4) | ((chip != "W25Q64JV") << 6) | 1)
    q.write(QSPI_DCR, ((22 if chip == "W25Q64JV" else 26) << 16) | (2 << 8))
    ok = q.write(QSPI_CCR, (3 << 26) | (dmode << 24) | (dcyc << 18) | ((abytes - 1) << 12) | (1 << 10) | (1 << 8) | instr)
    return ok, q.violations


def test_chip_models_check_the_clock_against_the_datasheet_tables():
    assert mapped("W25Q64JV", 2, 0x6B, 8, 3) == (True, [])  # 120 MHz, 8 dummy cycles: allowed
    assert mapped("MT25QL512ABB", 2, 0x6C, 8, 4) == (True, [])
    ok, v = mapped("W25Q64JV", 1, 0x6B, 8, 3)  # 240 MHz
    assert not ok and v == ["QUADSPI clock 240 MHz above the H750's 133 MHz in SDR (DS12556)"]
    ok, v = mapped("W25Q64JV", 2, 0x03, 0, 3, dmode=1)  # Read Data 03h is a 50 MHz command
    assert not ok and v == ["W25Q64JV read 03h with 0 dummy cycles runs at most 50 MHz; QUADSPI clock is 120 MHz"]
    assert mapped("W25Q64JV", 5, 0x03, 0, 3, dmode=1) == (True, [])  # 48 MHz


def test_pll2r_kernel_clock_in_the_clock_model():
    from tinyllm_gen.families.stm32h750.peripherals import RCC_CR, RCC_D1CCIPR, RCC_PLL2DIVR, RCC_PLLCFGR, RCC_PLLCKSELR, ClockModel

    c = ClockModel()
    c.write(RCC_D1CCIPR, 2 << 4)
    assert c.qspi_kernel_hz() == (0, ["QUADSPI kernel clock PLL2R selected while PLL2 is off"])
    c.write(RCC_PLLCKSELR, (4 << 12) | (4 << 4))
    c.write(RCC_PLLCFGR, 0x01FF0000 | (3 << 6) | (3 << 2) | (1 << 21))
    c.write(RCC_PLL2DIVR, 32 | (1 << 9) | (1 << 16) | (3 << 24))
    c.write(RCC_CR, c.regs[RCC_CR] | 1 << 26)
    assert c.read(RCC_CR) >> 27 & 1 and c.qspi_kernel_hz() == (132_000_000, [])
    c.write(RCC_PLL2DIVR, 40 | (3 << 24))
    assert c.violations == ["RCC 0x038 written while PLL2 is on"]
    c.write(RCC_D1CCIPR, 0)
    assert c.qspi_kernel_hz()[0] == 64_000_000  # hclk3 while the core still runs from HSI
