"""The STM32H750 register models behind the Unicorn runner catch the
sequencing mistakes they exist for (families/stm32h750/peripherals.py)."""
from tinyllm_gen.families.stm32h750.peripherals import (PWR_D3CR, QSPI_CCR, QSPI_CR, QSPI_DCR, QSPI_DR, QSPI_FCR, QSPI_SR,
                                    RCC_CFGR, RCC_CR, RCC_D1CFGR, RCC_PLL1DIVR, RCC_PLLCFGR, RCC_PLLCKSELR,
                                    ClockModel, QspiModel)

PLL_480 = {RCC_PLLCKSELR: 4 << 4, RCC_PLLCFGR: (3 << 2) | (7 << 16), RCC_PLL1DIVR: 59 | (1 << 9) | (3 << 16) | (1 << 24)}


def configured(flash_ws=4, hpre=8, vos0=True):
    c = ClockModel()
    for reg, v in PLL_480.items():
        c.write(reg, v)
    c.write(PWR_D3CR, 3 << 14)
    c.oden = vos0
    c.write(RCC_CR, c.regs[RCC_CR] | 1 << 24)
    c.flash_acr = (2 << 4) | flash_ws
    c.write(RCC_D1CFGR, (4 << 4) | hpre)
    return c


def test_the_bringup_sequence_is_clean_and_runs_480_mhz():
    c = configured()
    assert c.read(RCC_CR) >> 25 & 1  # PLL1RDY follows PLL1ON
    c.write(RCC_CFGR, 3)
    assert (c.read(RCC_CFGR) >> 3 & 7) == 3 and c.violations == [] and c.sysclk_hz() == 480_000_000


def test_clock_rules():
    c = configured(flash_ws=2)
    c.write(RCC_CFGR, 3)
    assert any("flash latency 2" in v for v in c.violations)
    c = configured(hpre=0)
    c.write(RCC_CFGR, 3)
    assert any("AXI/AHB clock 480000000" in v for v in c.violations)
    c = configured(vos0=False)
    c.write(RCC_CFGR, 3)
    assert any("needs VOS0" in v for v in c.violations)
    c = configured()
    c.write(RCC_PLL1DIVR, 49 | (1 << 9))
    assert c.violations == ["RCC 0x030 written while PLL1 is on"]
    c = ClockModel()
    c.write(RCC_CFGR, 3)
    assert "switched to PLL1 before it locked" in c.violations


def qspi_ready(chip="W25Q64JV", chips=1, fsize=22, dfm=False):
    q = QspiModel(chip, chips, 8 << 20 if chips == 1 else 128 << 20)
    q.write(QSPI_CR, (2 << 24) | (1 << 4) | (dfm << 6) | 1)
    q.write(QSPI_DCR, (fsize << 16) | (2 << 8))
    return q


QUAD_6B = (3 << 26) | (3 << 24) | (8 << 18) | (2 << 12) | (1 << 10) | (1 << 8) | 0x6B


def test_w25q_quad_read_needs_qe_first():
    q = qspi_ready()
    assert q.write(QSPI_CCR, QUAD_6B) is False and "6Bh needs the QE bit, never set" in q.violations
    q = qspi_ready()
    q.write(QSPI_CCR, (1 << 8) | 0x50)
    assert q.read(QSPI_SR) & 2  # TCF
    q.write(QSPI_FCR, 2)
    assert not q.read(QSPI_SR) & 2
    q.write(QSPI_CCR, (1 << 24) | (1 << 8) | 0x31)
    q.write(QSPI_DR, 0x02)
    assert q.qe and q.write(QSPI_CCR, QUAD_6B) is True and q.violations == []


def test_qspi_size_chip_and_dual_flash_rules():
    q = qspi_ready(fsize=20)
    q.qe = True
    assert q.write(QSPI_CCR, QUAD_6B) is False and any("FSIZE 20" in v for v in q.violations)
    q = qspi_ready()
    assert q.write(QSPI_CCR, (3 << 26) | (3 << 24) | (6 << 18) | (2 << 12) | (1 << 10) | (1 << 8) | 0x6B) is False
    assert any("does not answer" in v for v in q.violations)  # wrong dummy cycles
    six_c = (3 << 26) | (3 << 24) | (8 << 18) | (3 << 12) | (1 << 10) | (1 << 8) | 0x6C
    q = qspi_ready("MT25QL512ABB", 2, 26, dfm=False)
    assert q.write(QSPI_CCR, six_c) is False and any("dual-flash" in v for v in q.violations)
    q = qspi_ready("MT25QL512ABB", 2, 26, dfm=True)
    assert q.write(QSPI_CCR, six_c) is True and q.violations == []
