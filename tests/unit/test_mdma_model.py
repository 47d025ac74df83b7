"""The MDMA model of the Unicorn runner (peripherals.MdmaModel), driven
register by register: a correct transfer moves the bytes when the poll finds
it done and counts them; each rule the model exists for is broken on purpose
and gives its one line."""
from __future__ import annotations

import pytest

from tinyllm_gen.board import load_board
from tinyllm_gen.families.stm32h750.peripherals import (MDMA_CBNDTR, MDMA_CBRUR, MDMA_CCR, MDMA_CDAR, MDMA_CIFCR, MDMA_CISR, MDMA_CSAR,
                                    MDMA_CTBR, MDMA_CTCR, MdmaModel, h750_bus_targets)

QSPI, DTCM, AXI, FLASH = 0x90000000, 0x20000000, 0x24000000, 0x08000000
# What mdma.c programs: words, +4 both sides, 16-beat bursts, 128-byte buffer, repeated blocks, software request
TCR_OK = (2 << 0) | (2 << 2) | (2 << 4) | (2 << 6) | (2 << 8) | (2 << 10) | (3 << 12) | (3 << 15) | (127 << 18) | \
    (2 << 28) | (1 << 30)
DBUS_TCM = 1 << 17


class Rig:
    def __init__(self, clock=True, mapped=True, busy_polls=1):
        self.mem: dict[int, int] = {}
        self.clock = clock
        self.started, self.done, self.lines = [], [], []
        self.m = MdmaModel(h750_bus_targets(load_board("weact-h750").memory.regions), lambda: self.clock,
                           self.copy, lambda a: mapped if QSPI <= a < QSPI + (8 << 20) else None, busy_polls,
                           on_start=self.started.append, on_done=self.done.append, on_violation=self.lines.append)

    def copy(self, dst, src, n):
        for i in range(n):
            self.mem[dst + i] = (src + i) & 0xFF

    def w(self, reg, value, ch=0):
        self.m.write(0x40 + 0x40 * ch + reg, value)

    def r(self, reg, ch=0):
        return self.m.read(0x40 + 0x40 * ch + reg)

    def program(self, dst=DTCM + 0x1000, src=QSPI, bndt=4096, brc=0, tcr=TCR_OK, tbr=DBUS_TCM, ch=0):
        self.w(MDMA_CIFCR, 0x1F, ch)
        self.w(MDMA_CTCR, tcr, ch)
        self.w(MDMA_CBNDTR, bndt | (brc << 20), ch)
        self.w(MDMA_CSAR, src, ch)
        self.w(MDMA_CDAR, dst, ch)
        self.w(MDMA_CBRUR, 0, ch)
        self.w(MDMA_CTBR, tbr, ch)

    def go(self, ch=0):
        self.w(MDMA_CCR, 1, ch)
        self.w(MDMA_CCR, 1 | (1 << 16), ch)

    def poll(self, ch=0):
        while not self.r(MDMA_CISR, ch) & 3:
            pass
        return self.r(MDMA_CISR, ch)


def test_a_transfer_moves_its_bytes_when_the_poll_finds_it_done():
    rig = Rig(busy_polls=2)
    rig.program(bndt=4096, brc=3)  # 4 blocks of 4 KiB, one request
    rig.go()
    assert rig.m.violations == [] and len(rig.started) == 1 and rig.mem == {}
    assert rig.r(MDMA_CISR) & (1 << 16) and not rig.r(MDMA_CISR) & 2  # CRQA, still busy (2 busy polls)
    isr = rig.poll()
    assert isr & 2 and not isr & 1 and rig.m.bytes_moved == 16384 and rig.m.transfers == 1
    assert rig.mem[DTCM + 0x1000] == 0 and rig.mem[DTCM + 0x1000 + 16383] == 0xFF and len(rig.mem) == 16384
    assert not rig.r(MDMA_CCR) & 1  # EN clears at the end of the channel transfer
    assert rig.m.cpu_access(DTCM + 0x1000, 4, False) is None  # done: the CPU may read it
    rig.w(MDMA_CIFCR, 0x1F)
    assert rig.r(MDMA_CISR) & 0x1F == 0
    rig.program(dst=AXI, tbr=0)  # AXI SRAM over the AXI bus
    rig.go()
    rig.poll()
    assert rig.m.bytes_moved == 16384 + 4096 and rig.m.violations == []


def test_cpu_access_to_a_pending_buffer_is_a_violation():
    rig = Rig()
    rig.program()
    rig.go()
    assert rig.m.cpu_access(DTCM, 4, False) is None  # below the buffer
    line = rig.m.cpu_access(DTCM + 0x1FFC, 4, False)
    assert line and "CPU read 0x20001FFC, inside the stream buffer 0x20001000..+4096" in line
    assert "CPU wrote" in rig.m.cpu_access(DTCM + 0x1000, 1, True)
    assert rig.lines == rig.m.violations and len(rig.lines) == 2


def test_mdma_clock_must_be_on():
    rig = Rig(clock=False)
    rig.w(MDMA_CTCR, TCR_OK)
    assert rig.lines == ["MDMA channel 0 CTCR written while the MDMA clock is off (RCC AHB3ENR.MDMAEN)"]


def test_enabled_while_busy():
    rig = Rig()
    rig.program()
    rig.go()
    rig.w(MDMA_CCR, 1)
    assert rig.lines == ["MDMA channel 0 enabled while busy (its transfer of 4096 bytes has not completed)"]
    rig = Rig()
    rig.program()
    rig.go()
    rig.w(MDMA_CCR, 1 | (1 << 16))
    assert rig.lines == ["MDMA channel 0 requested again while busy (its transfer of 4096 bytes has not completed)"]
    rig = Rig()
    rig.program()
    rig.go()
    rig.w(MDMA_CDAR, AXI)
    assert rig.lines == ["MDMA channel 0 CDAR written while the channel is enabled (the write is ignored)"]


@pytest.mark.parametrize("kw,line", [
    (dict(bndt=0), "BNDT is 0"),
    (dict(bndt=4098), "BNDT 4098 is not a multiple of SSIZE 4 and DSIZE 4"),
    (dict(tcr=(TCR_OK & ~(0x7F << 18)) | (125 << 18)), "TLEN+1 = 126 is not a multiple of the data size"),
    (dict(tcr=(TCR_OK & ~(7 << 12)) | (5 << 12)), "a burst is longer than the 128-byte buffer"),
])
def test_length_fields_must_agree(kw, line):
    rig = Rig()
    rig.program(**kw)
    rig.go()
    assert len(rig.lines) == 1 and "length fields inconsistent" in rig.lines[0] and line in rig.lines[0]
    assert rig.m.active == {} and rig.m.bytes_moved == 0


@pytest.mark.parametrize("kw,line", [
    (dict(tbr=0), "destination 0x20001000 is in dtcm, which the AXI bus cannot reach (CTBR.DBUS must select the "
                  "AHB/TCM bus)"),
    (dict(dst=AXI, tbr=DBUS_TCM), "destination 0x24000000 is in axi, which the AHB/TCM bus cannot reach "
                                  "(CTBR.DBUS must select AXI)"),
    (dict(tbr=DBUS_TCM | (1 << 16)), "source 0x90000000 is in qspi, which the AHB/TCM bus cannot reach "
                                     "(CTBR.SBUS must select AXI)"),
    (dict(src=0x40000000), "source 0x40000000..+4096 is not memory the MDMA reaches"),
    (dict(dst=AXI + (512 << 10) - 1024, tbr=0), "destination 0x2407FC00..+4096 is not memory the MDMA reaches"),
    (dict(dst=FLASH, tbr=0), "destination 0x08000000 is in flash, which is read-only"),
    (dict(dst=DTCM + 2), "address not aligned to its data size (source 0x90000000, destination 0x20000002)"),
])
def test_buses_reach_only_their_memories(kw, line):
    rig = Rig()
    rig.program(**kw)
    rig.go()
    assert rig.lines == [f"MDMA channel 0: {line}"]


def test_quadspi_window_before_memory_mapped_mode():
    rig = Rig(mapped=False)
    rig.program()
    rig.go()
    assert rig.lines == ["MDMA channel 0: source 0x90000000 is in the QUADSPI window before memory-mapped mode"]


def test_request_rules():
    rig = Rig()
    rig.program()
    rig.w(MDMA_CCR, 1 << 16)
    assert rig.lines == ["MDMA channel 0 software request with the channel disabled (CCR.EN 0)"]
    rig = Rig()
    rig.program(tcr=TCR_OK & ~(1 << 30))
    rig.go()
    assert "without CTCR.SWRM" in rig.lines[0]


def test_disabling_a_running_channel_aborts_it():
    rig = Rig()
    rig.program()
    rig.go()
    rig.w(MDMA_CCR, 0)
    assert rig.m.active == {} and len(rig.done) == 1 and rig.m.bytes_moved == 0 and rig.lines == []
