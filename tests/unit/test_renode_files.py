"""The Renode files every STM32H750 build carries (OUT/renode/): the platform
overlay's addresses and sizes are board.json's, the .resc loads the right
files to the right places, the models (RCC, PWR, DBGMCU, QUADSPI with the
board's flash chip, the MDMA, the DWT) answer what the firmware does the way
the chip does, the FPv5 workaround's encodings and thunk plan are right, the
Robot test checks the tokens it is given.  Nothing here needs Renode: the
Python peripherals run on a stand-in for Renode's `request` object and the
few Renode classes they use.  The runs under Renode are tests/emu/test_renode_*.py."""
import re
import shutil
import struct
import subprocess
import sys
import types
import zlib
from pathlib import Path

import pytest

from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.run.protocol import REQUEST_CRC_OFFSET, REQUEST_HEADER
from tinyllm_gen.board import load_board
from tinyllm_gen.families.stm32h750.peripherals import DBGMCU_IDC
from tinyllm_gen.families.stm32h750.renode import (DWT_ADDRESS, FPV5_THUNKS, FPV5_THUNKS_BYTES, MDMA_ADDRESS,
                                                   MODEL_ERROR, PWR_ADDRESS, QSPI_REGS, RCC_ADDRESS, STOCK_MEMORIES,
                                                   STOCK_UARTS, TEMPLATES, renode_files)
from tinyllm_gen.run.renode import find_renode, run_script, write_check
from tinyllm_gen.reference.sampler import SamplingOptions

from tinymodels import make_hf_model

H750_BOARDS = ["weact-h750", "stm32h750b-dk"]
CAPACITY = 232


def repl_entries(text: str) -> dict:
    """name -> {"type", "address", attributes...} of a .repl (the subset we write)."""
    entries, cur = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("//") or line.startswith("using"):
            continue
        if not line.startswith(" "):
            m = re.match(r"^(\w+):\s*(?:([\w.]+)\s*@\s*(\w+)\s*(0x[0-9A-Fa-f]+)?|@ (none))?\s*$", line)
            assert m, f"not a repl entry line: {line!r}"
            cur = entries.setdefault(m.group(1), {})
            if m.group(2):
                cur.update(type=m.group(2), parent=m.group(3), address=m.group(4))
            if m.group(5):
                cur.update(parent="none")
        else:
            k, _, v = line.strip().partition(":")
            cur[k.strip()] = v.strip()
    return entries


@pytest.fixture(params=H750_BOARDS)
def files(request):
    board = load_board(request.param)
    return board, {k: v.decode() for k, v in renode_files(board, CAPACITY).items()}


def test_the_files(files):
    _, f = files
    assert sorted(f) == sorted(f"renode/{name}" for name in TEMPLATES)
    assert sorted(TEMPLATES) == ["h750_dwt.py", "h750_mdma.py", "h750_pwr.py", "h750_qspi.py", "h750_rcc.py",
                                 "stm32h750.repl", "tllm.resc", "tllm.robot", "tllm_fpv5.py"]
    for text in f.values():
        assert "do not edit" in text.splitlines()[0] or "do not edit" in text.splitlines()[1]
    for name, text in f.items():
        if name.endswith(".py"):
            compile(text, name, "exec")  # valid Python (Renode runs them with IronPython 2.7)
            assert not re.search(r"\bf\"|\bf'", text), f"{name}: IronPython 2.7 has no f-strings"


def test_overlay_addresses_match_board_json(files):
    board, f = files
    repl = f["renode/stm32h750.repl"]
    assert repl.count('using "platforms/cpus/stm32h743.repl"') == 1
    e = repl_entries(repl)
    regions = {r.name: r for r in board.memory.regions}
    for region, (stock_name, stock_address) in STOCK_MEMORIES.items():
        assert regions[region].address == stock_address  # where the stock platform has it
        assert int(e[stock_name]["size"], 16) == regions[region].size, region
    assert int(e["flash1"]["size"], 16) == 128 * 1024  # the H750's internal flash, not the H743's 2 MiB
    q = e["qspiFlashMemory"]
    assert q["type"] == "Memory.MappedMemory" and q["parent"] == "sysbus"
    assert int(q["address"], 16) == regions["qspi"].address == 0x90000000
    assert int(q["size"], 16) == regions["qspi"].size
    qbase, qsize = int(q["address"], 16), int(q["size"], 16)
    for key, place in (("weights", board.weights), ("request", board.request)):
        assert qbase <= place.address and place.address + place.max_bytes <= qbase + qsize, key
    # the stock QUADSPI (no flash, a Micron model that refuses the W25Q64) and RCC (no clock enables) leave
    assert e["qspi"] == {"parent": "none"} and e["rcc"] == {"parent": "none"}
    assert "Micron" not in repl.replace("SPI.Micron_MT25Q) refuses", "")
    assert "dwt" not in e  # the DWT is h750_dwt.py, registered by the .resc
    assert e["dbgmcu"]["address"] == "0x5C001000"
    assert f'{DBGMCU_IDC["V"]:08X}' in e["dbgmcu"]["script"]
    assert int(e["nvic"]["systickFrequency"]) == 480_000_000
    t = e["fpv5Thunks"]
    assert t["type"] == "Memory.MappedMemory" and int(t["address"], 16) == FPV5_THUNKS
    assert int(t["size"], 16) == FPV5_THUNKS_BYTES


def test_fpv5_thunks_are_nowhere_the_firmware_goes_and_a_branch_reaches_them(files):
    board, _ = files
    lo, hi = FPV5_THUNKS, FPV5_THUNKS + FPV5_THUNKS_BYTES
    for r in board.memory.regions:
        assert hi <= r.address or r.address + r.size <= lo, r.name
    assert lo >= 0x08000000 + 2 * 1024 * 1024  # past the stock platform's 2 MiB flash1
    flash = board.memory.region("flash")
    assert hi - flash.address < 1 << 24  # a B.W from any code in flash reaches every thunk


def test_resc_loads_the_right_files(files):
    board, f = files
    resc = f["renode/tllm.resc"]
    assert "machine LoadPlatformDescription $ORIGIN/stm32h750.repl" in resc
    devices = {m.group(4): (m.group(1), int(m.group(2), 16), int(m.group(3), 16))
               for m in re.finditer(r"machine PyDevFromFile \$ORIGIN/(\S+) (0x[0-9A-F]+) (0x[0-9A-F]+) True \"(\w+)\"",
                                    resc)}
    assert devices == {"rcc_h750": ("h750_rcc.py", RCC_ADDRESS, 0x400), "pwr": ("h750_pwr.py", PWR_ADDRESS, 0x400),
                       "quadspi": ("h750_qspi.py", QSPI_REGS, 0x400), "mdma": ("h750_mdma.py", MDMA_ADDRESS, 0x1000),
                       "dwt": ("h750_dwt.py", DWT_ADDRESS, 0x1000)}
    for file, _, _ in devices.values():
        assert f"renode/{file}" in f
    assert "include $ORIGIN/tllm_fpv5.py" in resc
    assert "$elf?=$ORIGIN/../build/firmware.elf" in resc and "$weights?=$ORIGIN/../weights.bin" in resc
    macro = resc[resc.index('macro reset'):resc.index('runMacro $reset')]
    steps = [line.strip() for line in macro.splitlines()[2:] if line.strip() and line.strip() != '"""']
    assert steps == ["sysbus LoadELF $elf", f"tllm_fpv5_patch $elf 0x{FPV5_THUNKS:08X} 0x{FPV5_THUNKS_BYTES:08X}",
                     f"sysbus LoadBinary $weights 0x{board.weights.address:08X}",
                     f"sysbus.cpu VectorTableOffset 0x{board.memory.region('flash').address:08X}"]
    # Renode 1.15.1's stm32h743 platform names its CPU sysbus.cpu: a bare `cpu` aborts the script
    assert not [line for line in resc.splitlines() if re.match(r"\s*cpu\b", line)]
    assert "sysbus.cpu PerformanceInMips 480" in resc
    uart, base = STOCK_UARTS[board.uart.instance]
    assert board.uart.base == base
    assert f"sysbus.{uart} CreateFileBackend $console true" in resc
    assert f"${{UART}}                 sysbus.{uart}" in f["renode/tllm.robot"]


def test_run_script_has_absolute_paths_the_request_and_the_budget(tmp_path):
    board = load_board("weact-h750")
    script = run_script(tmp_path / "out", board, tmp_path / "req.bin", tmp_path / "console.txt")
    lines = script.splitlines()
    assert lines[0] == f"$elf=@{(tmp_path / 'out' / 'build' / 'firmware.elf').resolve()}"
    assert lines[3] == f"include @{(tmp_path / 'out' / 'renode' / 'tllm.resc').resolve()}"
    assert lines[4] == f"sysbus LoadBinary @{(tmp_path / 'req.bin').resolve()} 0x907FC000"
    assert lines[-1] == "start"
    bounded = run_script(tmp_path / "out", board, None, tmp_path / "console.txt", max_instructions=960_000_000)
    assert bounded.splitlines()[-2:] == ['emulation RunFor "2.000000000"',
                                        "echo tllm-renode-instruction-budget-spent"]


# ------------------------------------------------------------- the models
class Request:
    """The `request` object Renode hands a Python peripheral."""

    def __init__(self, kind, offset=0, value=0, length=4):
        self.isInit, self.isRead, self.isWrite = kind == "init", kind == "read", kind == "write"
        self.offset, self.value, self.length = offset, value, length


class FakeRenode:
    """The Renode classes the models import: Logger (errors recorded), and
    EmulationManager down to a machine whose sysbus has memory and a CPU."""

    def __init__(self):
        self.errors, self.memory, self.executed = [], {}, 0
        renode = self
        logging = types.ModuleType("Antmicro.Renode.Logging")
        logging.LogLevel = types.SimpleNamespace(Error="Error")
        logging.Logger = types.SimpleNamespace(Log=lambda level, msg: renode.errors.append(msg))

        class Cpu:
            @property
            def ExecutedInstructions(self):
                return renode.executed

        class Bus:
            def GetCPUs(self):
                return [Cpu()]

            def ReadDoubleWord(self, a):
                return int.from_bytes(bytes(renode.memory.get(a + k, 0) for k in range(4)), "little")

            def ReadBytes(self, a, n):
                return bytes(renode.memory.get(a + k, 0) for k in range(n))

            def WriteBytes(self, data, a):
                for k, b in enumerate(data):
                    renode.memory[a + k] = b

        machine = types.SimpleNamespace(SystemBus=Bus())
        emulation = types.SimpleNamespace(TryGetMachineForPeripheral=lambda p: (True, machine))
        core = types.ModuleType("Antmicro.Renode.Core")
        core.EmulationManager = types.SimpleNamespace(Instance=types.SimpleNamespace(CurrentEmulation=emulation))
        self.modules = {"Antmicro": types.ModuleType("Antmicro"),
                        "Antmicro.Renode": types.ModuleType("Antmicro.Renode"),
                        "Antmicro.Renode.Logging": logging, "Antmicro.Renode.Core": core}


@pytest.fixture
def renode(monkeypatch):
    fake = FakeRenode()
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return fake


def py_peripheral(source: str):
    env = {"self": object()}

    def access(kind, offset=0, value=0, length=4):
        env["request"] = r = Request(kind, offset, value, length)
        exec(source, env)
        return r.value
    access("init")
    return access


def test_pwr_model_answers_what_bringup_waits_for(files):
    _, f = files
    pwr = py_peripheral(f["renode/h750_pwr.py"])
    assert not pwr("read", 0x04) & (1 << 13)  # ACTVOSRDY: not before the supply is configured
    cr3 = pwr("read", 0x0C)
    pwr("write", 0x0C, (cr3 & ~0x5) | 0x2)  # bringup.c: LDO on, SCUEN and BYPASS off
    assert pwr("read", 0x0C) == (cr3 & ~0x5) | 0x2
    assert pwr("read", 0x04) & (1 << 13)
    d3cr = pwr("read", 0x18)
    pwr("write", 0x18, (d3cr & ~(3 << 14)) | (3 << 14))  # VOS scale 1
    assert pwr("read", 0x18) & (1 << 13) and (pwr("read", 0x18) >> 14) & 3 == 3
    assert (pwr("read", 0x04) >> 14) & 3 == 3  # ACTVOS follows


def test_rcc_model_holds_enables_and_answers_ready_flags(files):
    _, f = files
    rcc = py_peripheral(f["renode/h750_rcc.py"])
    assert rcc("read", 0x00) & 0x5 == 0x5  # HSION, HSIRDY at reset
    rcc("write", 0x00, 0x1 | 1 << 24 | 1 << 26)  # HSI, PLL1, PLL2 on
    cr = rcc("read", 0x00)
    assert cr & (1 << 25 | 1 << 27 | 1 << 2) == 1 << 25 | 1 << 27 | 1 << 2 and not cr & 1 << 29
    rcc("write", 0x00, 0x1)
    assert not rcc("read", 0x00) & (1 << 25 | 1 << 27)  # PLL ready flags drop with their enables
    rcc("write", 0x10, 3)
    assert (rcc("read", 0x10) >> 3) & 7 == 3  # SWS follows SW
    rcc("write", 0xD4, 1)  # AHB3ENR.MDMAEN: mdma.c enables the clock once, as on the chip
    assert rcc("read", 0xD4) == 1
    assert rcc("read", 0x2C) == 0x01FF0000  # PLLCFGR reset value (RM0433)


def test_dbgmcu_reads_revision_v(files):
    _, f = files
    script = repl_entries(f["renode/stm32h750.repl"])["dbgmcu"]["script"].strip('"')
    assert py_peripheral(script)("read") == DBGMCU_IDC["V"]
    assert DBGMCU_IDC["V"] >> 16 == 0x2003  # bringup.c's REV_ID_V


def qspi_bringup(qspi, board, *, skip=(), qe_byte=0x02, dfm=None):
    """The register writes bringup.c's qspi_init makes for the board's chip (skip: command bytes left out)."""
    q = board.qspi_flash
    fsize = (board.memory.region("qspi").size.bit_length() - 1) - 1
    dual = q.chips == 2 if dfm is None else dfm
    qspi("write", 0x00, (q.prescaler - 1) << 24 | 1 << 4 | (1 << 6 if dual else 0))
    qspi("write", 0x04, fsize << 16 | (q.cs_high_cycles - 1) << 8)
    qspi("write", 0x00, qspi("read", 0x00) | 1)

    def command(ccr, byte=None):
        assert not qspi("read", 0x08) & 0x20  # never BUSY
        if byte is not None:
            qspi("write", 0x10, 0)
        qspi("write", 0x14, ccr)
        if byte is not None:
            qspi("write", 0x20, byte, length=1)  # QSPI_DR8
        assert qspi("read", 0x08) & 0x2  # TCF
        qspi("write", 0x0C, 0x2)
        assert not qspi("read", 0x08) & 0x2
    if q.chip == "W25Q64JV":
        for instr in (0x66, 0x99, 0x50):
            if instr not in skip:
                command(1 << 8 | instr)
        if 0x31 not in skip:
            command(1 << 24 | 1 << 8 | 0x31, qe_byte)
    else:
        command(3 << 8 | 0xF5)
    qspi("write", 0x14, 3 << 26 | 3 << 24 | q.dummy_cycles << 18 | (q.address_bytes - 1) << 12 | 1 << 10 | 1 << 8
         | q.read_instr)


def test_qspi_model_takes_the_bringup_of_each_board(files, renode):
    board, f = files
    qspi = py_peripheral(f["renode/h750_qspi.py"])
    qspi_bringup(qspi, board)
    assert renode.errors == []
    assert board.qspi_flash.chip in f["renode/h750_qspi.py"]


@pytest.mark.parametrize("break_it,what", [
    (dict(skip=(0x50,)), "31h) without 50h or 06h"), (dict(qe_byte=0), "needs the QE bit"),
    (dict(dfm=True), "dual-flash mode"), (dict(skip=(0x66,)), "reset (99h) without reset enable")])
def test_qspi_model_logs_what_the_w25q64_would_not_do(renode, break_it, what):
    board = load_board("weact-h750")
    qspi = py_peripheral(renode_files(board, CAPACITY)["renode/h750_qspi.py"].decode())
    qspi_bringup(qspi, board, **break_it)
    assert renode.errors and all(e.startswith(f"{MODEL_ERROR} QUADSPI: ") for e in renode.errors)
    assert any(what in e for e in renode.errors), renode.errors


def test_qspi_model_logs_a_wrong_read_for_the_mt25ql512(renode):
    board = load_board("stm32h750b-dk")
    qspi = py_peripheral(renode_files(board, CAPACITY)["renode/h750_qspi.py"].decode())
    qspi_bringup(qspi, board)
    assert renode.errors == []
    qspi("write", 0x14, 3 << 26 | 3 << 24 | 8 << 18 | 2 << 12 | 1 << 10 | 1 << 8 | 0x6B)  # the W25Q64's 6Bh
    assert len(renode.errors) == 1 and "does not answer the memory-mapped read 6Bh" in renode.errors[0]


MDMA_CH0 = 0x40


def mdma_copy(mdma, src, dst, n, tcm_dst):
    """mdma.c's tllm_board_copy_start (one block of n bytes), then its poll."""
    for reg, value in ((0x04, 0x1F), (0x10, 2 | 2 << 2 | 2 << 4 | 2 << 6 | 2 << 8 | 2 << 10 | 3 << 12 | 3 << 15
                                      | 127 << 18 | 2 << 28 | 1 << 30),
                       (0x14, n), (0x18, src), (0x1C, dst), (0x20, 0), (0x24, 0), (0x28, 1 << 17 if tcm_dst else 0),
                       (0x0C, 2 << 6 | 1), (0x0C, 2 << 6 | 1 | 1 << 16)):
        mdma("write", MDMA_CH0 + reg, value)
    polls = 0
    while not (isr := mdma("read", MDMA_CH0)) & 0x3:
        polls += 1
        assert polls < 10
    return isr, polls


def test_mdma_model_moves_a_block_at_the_second_poll(files, renode):
    _, f = files
    mdma = py_peripheral(f["renode/h750_mdma.py"])
    for k in range(256):
        renode.memory[0x90001000 + k] = k
    isr, polls = mdma_copy(mdma, 0x90001000, 0x20004000, 256, tcm_dst=True)
    assert isr & 0x1F == 0x1E and polls == 1  # CTCIF BRTIF BTIF TCIF, after one busy poll (as Unicorn's model)
    assert bytes(renode.memory[0x20004000 + k] for k in range(256)) == bytes(range(256))
    assert not mdma("read", MDMA_CH0 + 0x0C) & 1  # EN cleared at the end
    mdma("write", MDMA_CH0 + 0x04, 0x1F)
    assert mdma("read", MDMA_CH0) & 0x1F == 0 and renode.errors == []


def test_mdma_model_refuses_a_tcm_through_the_axi_bus(files, renode):
    _, f = files
    mdma = py_peripheral(f["renode/h750_mdma.py"])
    isr, _ = mdma_copy(mdma, 0x90001000, 0x20004000, 256, tcm_dst=False)
    assert isr & 0x1 and 0x20004000 not in renode.memory  # TEIF, nothing moved
    assert len(renode.errors) == 1 and "is in dtcm, which the AXI bus does not reach" in renode.errors[0]


def test_dwt_counts_executed_instructions_less_the_thunks(files, renode):
    _, f = files
    dwt = py_peripheral(f["renode/h750_dwt.py"])
    renode.executed = 1000
    dwt("write", 0x000, dwt("read", 0x000) | 1)  # board.c: CYCCNTENA
    dwt("write", 0x004, 0)
    renode.executed = 1500
    assert dwt("read", 0x004) == 500
    renode.memory.update({FPV5_THUNKS + k: b for k, b in enumerate((40).to_bytes(4, "little"))})
    renode.executed = 2540  # 40 of these were the FPv5 thunks'
    assert dwt("read", 0x004) == 1500
    dwt("write", 0x000, 0)
    renode.executed = 9000
    assert dwt("read", 0x004) == 1500  # stopped
    assert dwt("read", 0x000) >> 28 == 4  # NUMCOMP


# -------------------------------------------------- the FPv5 workaround
def fpv5_module(board_name="weact-h750"):
    text = renode_files(load_board(board_name), CAPACITY)["renode/tllm_fpv5.py"].decode()
    m = types.ModuleType("tllm_fpv5")
    exec(compile(text, "tllm_fpv5.py", "exec"), m.__dict__)
    return m


def expand(imm12: int) -> int:
    """The Arm ARM's ThumbExpandImm."""
    if imm12 >> 10 == 0:
        b, kind = imm12 & 0xFF, imm12 >> 8 & 3
        return [b, b | b << 16, b << 8 | b << 24, b * 0x01010101][kind]
    v, rot = 0x80 | imm12 & 0x7F, imm12 >> 7
    return ((v >> rot) | (v << (32 - rot))) & 0xFFFFFFFF


def test_modified_immediates_encode_their_value():
    f = fpv5_module()
    for v in (0, 1, 0xFF, 0x80000000, 0x3F000000, 0x00C00000, 0x7F800000, 0x3FC00000, 0x00200000, 0x00400000,
              0x00AB00AB, 0xAB00AB00, 0xABABABAB, 0xFF000000, 0x00000104):
        imm = f.thumb_expand_imm(v)
        assert imm is not None and expand(imm) == v, hex(v)
    for v in (0x7FF00000, 0x3FE00000, 0x12345678, 0x00000101):
        assert f.thumb_expand_imm(v) is None, hex(v)


def assembled(lines: list[str]) -> list[int]:
    import tempfile

    if shutil.which("arm-none-eabi-as") is None:
        pytest.skip("arm-none-eabi-as is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        src, obj, raw = Path(tmp, "t.s"), Path(tmp, "t.o"), Path(tmp, "t.bin")
        src.write_text(".syntax unified\n.thumb\n.cpu cortex-m7\n.fpu fpv5-d16\n" + "\n".join(lines) + "\n")
        subprocess.run(["arm-none-eabi-as", "-o", str(obj), str(src)], check=True)
        subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
        data = raw.read_bytes()
    return list(struct.unpack(f"<{len(data) // 2}H", data))


def test_thunk_encodings_are_the_assemblers():
    f = fpv5_module()
    cases = [("and.w r0, r0, #0x80000000", f.and_imm(0, 0, 0x80000000)),
             ("bic.w r2, r0, #0x80000000", f.bic_imm(2, 0, 0x80000000)),
             ("orr.w r0, r1, #0x00C00000", f.orr_imm(0, 1, 0x00C00000)),
             ("orr.w r2, r2, #0x3FC00000", f.orr_imm(2, 2, 0x3FC00000)),
             ("tst.w r1, #0x00400000", f.tst_imm(1, 0x400000)), ("add.w r1, r1, #201", f.add_imm(1, 1, 201)),
             ("cmp.w r3, #0x7F800000", f.cmp_imm(3, 0x7F800000)), ("eor.w r2, r2, r0", f.eor_reg(2, 2, 0)),
             ("mov.w r0, r1", f.mov_reg(0, 1)), ("asr.w r3, r1, #31", f.asr_imm(3, 1, 31)),
             ("cmp.w r2, r3", f.cmp_reg(2, 3)), ("mov.w r0, #0", f.mov_zero(0)),
             ("push.w {r0, r1, r2, r3, r4}", f.push([0, 1, 2, 3, 4])), ("pop.w {r0, r1}", f.pop([0, 1])),
             ("ldr.w r1, [r0]", f.ldr_imm(1, 0)), ("str.w r1, [r0]", f.str_imm(1, 0)),
             ("mrs r4, APSR", f.mrs_apsr(4)), ("msr APSR_nzcvqg, r4", f.msr_apsr(4)),
             ("vmrs r1, fpscr", f.vmrs(1)), ("vmsr fpscr, r0", f.vmsr(0)),
             ("vmov r0, s15", f.vmov_to_core(0, 15)), ("vmov s30, r0", f.vmov_from_core(30, 0)),
             ("vmov r0, r2, d9", f.vmov_to_core2(0, 2, 9)), ("vmov d14, r0, r2", f.vmov_from_core2(14, 0, 2)),
             ("vadd.f32 s1, s15, s1", f.vadd(0, 1, 15, 1)), ("vadd.f64 d12, d7, d2", f.vadd(1, 12, 7, 2)),
             ("vcvt.s32.f32 s15, s0", f.vcvt_to_int(1, 1, 0, 15, 0)),
             ("vcvt.u32.f64 s14, d3", f.vcvt_to_int(0, 1, 1, 14, 3)),
             ("vcvtr.s32.f32 s31, s15", f.vcvt_to_int(1, 0, 0, 31, 15)),
             ("vcvtr.u32.f64 s9, d7", f.vcvt_to_int(0, 0, 1, 9, 7)),
             ("vpush {s17}", f.vpush(0, 17)), ("vpop {s17}", f.vpop(0, 17)), ("vpush {d1}", f.vpush(1, 1)),
             ("vpop {d15}", f.vpop(1, 15)), ("it lo", f.it("lo")), ("movlo r0, r1", f.mov16(0, 1))]
    want = assembled([c for c, _ in cases])
    got = [hw for _, code in cases for hw in code]
    assert got == want


def test_branch_encodings_are_the_assemblers():
    f = fpv5_module()
    lines = [".org 0x1000", "b.w far", "bhi.w near", "beq.w back", "ldr.w r0, lit", ".org 0x1104", "near: nop",
             ".org 0x1200", "lit: .word 0", ".org 0x41000", "far: nop"]
    hw = assembled(["back: nop", *lines])
    at = lambda a: hw[a // 2:a // 2 + 2]  # noqa: E731
    assert at(0x1000) == f.b_w(0x1000, 0x41000)
    assert at(0x1004) == f.b_cond_w(0x1004, 0x1104, "hi")
    assert at(0x1008) == f.b_cond_w(0x1008, 0x0, "eq")
    assert at(0x100C) == f.ldr_lit(0, 0x100C, 0x1200)
    backwards = assembled([".org 0x1000", "back: nop", ".org 0x41000", "b.w back"])
    assert f.b_w(0x41000, 0x1000) == backwards[0x41000 // 2:0x41000 // 2 + 2]


def test_decode_names_every_fpv5_instruction_and_nothing_else():
    f = fpv5_module()
    insns = ["vmaxnm.f32 s15, s15, s14", "vminnm.f32 s1, s2, s3", "vcvta.s32.f32 s15, s15", "vcvtn.u32.f32 s0, s31",
             "vcvtp.s32.f64 s3, d9", "vcvtm.u32.f64 s30, d1", "vmaxnm.f64 d1, d2, d3", "vrinta.f32 s1, s2",
             "vrintz.f32 s1, s2", "vrintx.f64 d1, d2", "vrintr.f32 s4, s5", "vselgt.f32 s1, s2, s3",
             "vdiv.f32 s15, s15, s14", "vadd.f32 s0, s1, s2", "vcvt.s32.f32 s0, s1", "vcvtb.f32.f16 s0, s1",
             "vmla.f32 s0, s1, s2", "vsqrt.f32 s0, s1"]
    hw = assembled(insns)
    names = [f.decode_fpv5(hw[2 * k], hw[2 * k + 1]) for k in range(len(insns))]
    assert [n and n[0] for n in names] == [
        "VMAXNM.F32", "VMINNM.F32", "VCVTA.S32.F32", "VCVTN.U32.F32", "VCVTP.S32.F64", "VCVTM.U32.F64", "VMAXNM.F64",
        "VRINTA.F32", "VRINTZ.F32", "VRINTX.F64", "VRINTR.F32", "VSEL", None, None, None, None, None, None]
    thunked = [n[0] for n in names if n and n[1] is not None]
    assert thunked == ["VMAXNM.F32", "VMINNM.F32", "VCVTA.S32.F32", "VCVTN.U32.F32", "VCVTP.S32.F64", "VCVTM.U32.F64"]


def test_every_thunk_path_is_counted():
    f = fpv5_module()
    for t in (f.thunk_vminmaxnm(0, 15, 15, 14), f.thunk_vminmaxnm(1, 1, 2, 3), f.thunk_vcvt(0, 1, 0, 15, 15),
              f.thunk_vcvt(0, 0, 1, 3, 9), f.thunk_vcvt(2, 1, 0, 0, 31)):
        code, size = t.assemble(FPV5_THUNKS + 16, 0x08001234, FPV5_THUNKS)
        counts = t._path_counts()
        assert counts and all(10 <= n <= 40 for n in counts.values())
        assert size % 4 == 0 and size == 2 * len(code)
        assert code[-2:] == [FPV5_THUNKS & 0xFFFF, FPV5_THUNKS >> 16]  # the counter's address, last


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("renode")
    model = make_hf_model(root / "m", context=64, seed=5)
    out = root / "out"
    write_tree(compile_path(model, CompileOptions(board="weact-h750")).tree, out)
    return model, out


def test_h750_builds_carry_the_files_and_qemu_builds_do_not(compiled, tmp_path):
    model, out = compiled
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    for name in TEMPLATES:
        assert (out / "renode" / name).is_file() and f"renode/{name}" in manifest["files"]
    plan = json.loads((out / "report.json").read_text())
    cap = next(b["count"] for b in plan["buffers"] if b["name"] == "request")
    assert f"@TLLM ready max_request={cap}" in (out / "renode" / "tllm.robot").read_text()
    q = tmp_path / "q"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500")).tree, q)
    assert not (q / "renode").exists()


def test_robot_waits_for_ready_and_checks_the_models(files):
    _, f = files
    robot = f["renode/tllm.robot"]
    assert "Execute Script      ${RESC}" in robot and "${RESC}                 ${CURDIR}/tllm.resc" in robot
    assert f"Wait For Line On Uart    @TLLM ready max_request={CAPACITY}" in robot
    assert "Create Log Tester" in robot and f"Should Not Be In Log    {MODEL_ERROR}" in robot
    assert "Generates The Expected Tokens" not in robot
    # its own console: Renode moves an existing console file aside (console.1), so a robot run and a
    # `run --emulator renode` of one build must never share one
    assert "$console=@${CURDIR}/../build/renode-robot-console.txt" in robot
    assert robot.index("$console=") < robot.index("Execute Script")


def test_stopping_renode_ends_its_whole_process_group():
    """`renode` is a shell script running mono as its child: the runner ends the group, not the shell
    alone, so no mono runs on after its run (burning a core, recreating the console file)."""
    import os
    from tinyllm_gen.run.renode import _stop
    proc = subprocess.Popen(["sh", "-c", "sleep 600; :"], stdin=subprocess.PIPE, start_new_session=True)
    _stop(proc, grace_s=0.2)
    assert proc.returncode is not None
    with pytest.raises(ProcessLookupError):  # nothing of the group is left, the sleep among them
        for _ in range(100):
            os.killpg(proc.pid, 0)
            __import__("time").sleep(0.05)


def test_renode_files_are_deterministic():
    board = load_board("weact-h750")
    assert renode_files(board, CAPACITY) == renode_files(board, CAPACITY)


def test_write_check_adds_a_token_test(compiled):
    _, out = compiled
    sampling = SamplingOptions(0.9, 0.85, 1234)
    robot = write_check(out, [0, 5, 7], 3, sampling, [11, 12, 13], "max_tokens").read_text()
    assert "Generates The Expected Tokens" in robot
    assert "Execute Command     sysbus LoadBinary @${REQUEST} 0x907FC000" in robot
    toks = re.findall(r'Wait For Line On Uart    \^@TLLM tok (\d+) (\d+) \\\\d\+ "    treatAsRegex=true', robot)
    assert toks == [("0", "11"), ("1", "12"), ("2", "13")]
    assert "@TLLM begin n_prompt=3 max_new=3 max_seq=64" in robot
    assert "@TLLM end reason=max_tokens n=3" in robot and "@TLLM exit 0" in robot
    assert robot.count(f"Should Not Be In Log    {MODEL_ERROR}") == 1  # in the keyword both tests use
    assert robot.count("The Models Saw Nothing Wrong") == 3
    req = (out / "renode" / "check_request.bin").read_bytes()
    fields = REQUEST_HEADER.unpack_from(req)
    assert fields[0] == b"TLRQ" and fields[4] == 3 and fields[5] == 3 and fields[8] == 1234
    body = bytearray(req)
    struct.pack_into("<I", body, REQUEST_CRC_OFFSET, 0)
    assert zlib.crc32(body) == fields[9]


def test_run_without_renode_says_so_in_one_line(compiled, tmp_path):
    if find_renode() is not None:
        pytest.skip("Renode is installed here")
    _, out = compiled
    (out / "build").mkdir(exist_ok=True)
    (out / "build" / "firmware.elf").write_bytes(b"")  # not built here: Renode is asked for first
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "run", str(out), "--emulator", "renode",
                           "--max-new-tokens", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Renode is not installed" in lines[0] and "renode-run" in lines[0], proc.stderr


def test_run_renode_check_on_a_qemu_build_is_refused_before_running(tmp_path):
    model = make_hf_model(tmp_path / "m", context=64, seed=5)
    out = tmp_path / "q"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500")).tree, out)
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "run", str(out), "--renode-check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "has no Renode platform" in proc.stderr


@pytest.mark.emu
def test_renode_check_from_a_unicorn_run_holds_the_reference_tokens(tmp_path):
    pytest.importorskip("unicorn")
    from firmware_harness import GREEDY, SHAPES_CONTEXT, build_case, need, reference_tokens
    from tinyllm_gen.run.backends import ModelInfo

    need("arm-none-eabi-gcc")
    built = build_case(tmp_path, "llama-tied-gqa", 32, "weact-h750")
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "run", str(built.out), "--prompt",
                           "Once upon a time", "--max-new-tokens", "5", "--renode-check"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    ids = ModelInfo.load(built.out).tokenizer.encode("Once upon a time")
    want = reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:5]
    robot = (built.out / "renode" / "tllm.robot").read_text()
    assert [int(t) for _, t in re.findall(r"\^@TLLM tok (\d+) (\d+) ", robot)] == want
    assert f"@TLLM begin n_prompt={len(ids)} max_new=5" in robot
