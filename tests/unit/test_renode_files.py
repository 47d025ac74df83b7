"""The Renode files every STM32H750 build carries (OUT/renode/): the platform
overlay's addresses and sizes are board.json's, the .resc loads the right
files to the right places, the PWR and DBGMCU models answer what bringup.c
waits for, the Robot test checks the tokens it is given; and the runs
themselves, which skip where Renode is absent (it is in no package registry)."""
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tinyllm_gen.compile import CompileOptions, compile_path, write_tree
from tinyllm_gen.run.protocol import REQUEST_CRC_OFFSET, REQUEST_HEADER
from tinyllm_gen.board import load_board
from tinyllm_gen.run_renode import (PWR_ADDRESS, STOCK_MEMORIES, STOCK_UARTS, find_renode, renode_files,
                                    renode_missing_reason, run_script, write_check)
from tinyllm_gen.run.unicorn import DBGMCU_IDC
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
            m = re.match(r"^(\w+):\s*(?:([\w.]+)\s*@\s*(\w+)\s*(0x[0-9A-Fa-f]+)?)?\s*$", line)
            assert m, f"not a repl entry line: {line!r}"
            cur = entries.setdefault(m.group(1), {})
            if m.group(2):
                cur.update(type=m.group(2), parent=m.group(3), address=m.group(4))
        else:
            k, _, v = line.strip().partition(":")
            cur[k.strip()] = v.strip()
    return entries


@pytest.fixture(params=H750_BOARDS)
def files(request):
    board = load_board(request.param)
    return board, {k: v.decode() for k, v in renode_files(board, CAPACITY).items()}


def test_the_four_files(files):
    _, f = files
    assert sorted(f) == ["renode/h750_pwr.py", "renode/stm32h750.repl", "renode/tllm.resc", "renode/tllm.robot"]
    for text in f.values():
        assert "do not edit" in text.splitlines()[0] or "do not edit" in text.splitlines()[1]


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
    flash = e["qspiFlash"]
    assert flash["type"] == "SPI.Micron_MT25Q" and flash["parent"] == "qspi"
    assert flash["underlyingMemory"] == "qspiFlashMemory"
    assert e["dwt"]["type"] == "Miscellaneous.DWT" and int(e["dwt"]["address"], 16) == 0xE0001000
    assert e["dbgmcu"]["address"] == "0x5C001000"
    assert f'{DBGMCU_IDC["V"]:08X}' in e["dbgmcu"]["script"]
    assert int(e["nvic"]["systickFrequency"]) == int(e["dwt"]["frequency"]) == 480_000_000


def test_resc_loads_the_right_files(files):
    board, f = files
    resc = f["renode/tllm.resc"]
    assert "machine LoadPlatformDescription $ORIGIN/stm32h750.repl" in resc
    m = re.search(r"machine PyDevFromFile \$ORIGIN/(\S+) (0x[0-9A-F]+) (0x[0-9A-F]+) True \"pwr\"", resc)
    assert m and m.group(1) == "h750_pwr.py" and f"renode/{m.group(1)}" in f
    assert int(m.group(2), 16) == PWR_ADDRESS and int(m.group(3), 16) == 0x400
    assert "$elf?=$ORIGIN/../build/firmware.elf" in resc and "sysbus LoadELF $elf" in resc
    assert "$weights?=$ORIGIN/../weights.bin" in resc
    assert re.search(r"sysbus LoadBinary \$weights (0x[0-9A-F]+)", resc).group(1) == \
        f"0x{board.weights.address:08X}"
    flash = board.memory.region("flash")
    assert f"cpu VectorTableOffset 0x{flash.address:08X}" in resc
    uart, base = STOCK_UARTS[board.uart.instance]
    assert board.uart.base == base
    assert f"sysbus.{uart} CreateFileBackend $console true" in resc
    assert f"${{UART}}                 sysbus.{uart}" in f["renode/tllm.robot"]


def test_run_script_has_absolute_paths_and_the_request(tmp_path):
    board = load_board("weact-h750")
    script = run_script(tmp_path / "out", board, tmp_path / "req.bin", tmp_path / "console.txt")
    lines = script.splitlines()
    assert lines[0] == f"$elf=@{(tmp_path / 'out' / 'build' / 'firmware.elf').resolve()}"
    assert lines[3] == f"include @{(tmp_path / 'out' / 'renode' / 'tllm.resc').resolve()}"
    assert lines[4] == f"sysbus LoadBinary @{(tmp_path / 'req.bin').resolve()} 0x907FC000"
    assert lines[-1] == "start"


class Request:
    """The `request` object Renode hands a Python peripheral."""

    def __init__(self, kind, offset=0, value=0):
        self.isInit, self.isRead, self.isWrite = kind == "init", kind == "read", kind == "write"
        self.offset, self.value = offset, value


def py_peripheral(source: str):
    env = {}

    def access(kind, offset=0, value=0):
        env["request"] = r = Request(kind, offset, value)
        exec(source, env)
        return r.value
    return access


def test_pwr_model_answers_what_bringup_waits_for(files):
    _, f = files
    pwr = py_peripheral(f["renode/h750_pwr.py"])
    pwr("init")
    assert not pwr("read", 0x04) & (1 << 13)  # ACTVOSRDY: not before the supply is configured
    cr3 = pwr("read", 0x0C)
    pwr("write", 0x0C, (cr3 & ~0x5) | 0x2)  # bringup.c: LDO on, SCUEN and BYPASS off
    assert pwr("read", 0x0C) == (cr3 & ~0x5) | 0x2
    assert pwr("read", 0x04) & (1 << 13)
    d3cr = pwr("read", 0x18)
    pwr("write", 0x18, (d3cr & ~(3 << 14)) | (3 << 14))  # VOS scale 1
    assert pwr("read", 0x18) & (1 << 13) and (pwr("read", 0x18) >> 14) & 3 == 3
    assert (pwr("read", 0x04) >> 14) & 3 == 3  # ACTVOS follows


def test_dbgmcu_reads_revision_v(files):
    _, f = files
    script = repl_entries(f["renode/stm32h750.repl"])["dbgmcu"]["script"].strip('"')
    assert py_peripheral(script)("read") == DBGMCU_IDC["V"]
    assert DBGMCU_IDC["V"] >> 16 == 0x2003  # bringup.c's REV_ID_V


def test_robot_waits_for_ready(files):
    _, f = files
    robot = f["renode/tllm.robot"]
    assert "Execute Script      ${RESC}" in robot and "${RESC}                 ${CURDIR}/tllm.resc" in robot
    assert f"Wait For Line On Uart    @TLLM ready max_request={CAPACITY}" in robot
    assert "Generates The Expected Tokens" not in robot


def test_renode_files_are_deterministic():
    board = load_board("weact-h750")
    assert renode_files(board, CAPACITY) == renode_files(board, CAPACITY)


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
    for name in ("stm32h750.repl", "h750_pwr.py", "tllm.resc", "tllm.robot"):
        assert (out / "renode" / name).is_file() and f"renode/{name}" in manifest["files"]
    plan = json.loads((out / "report.json").read_text())
    cap = next(b["count"] for b in plan["buffers"] if b["name"] == "request")
    assert f"@TLLM ready max_request={cap}" in (out / "renode" / "tllm.robot").read_text()
    q = tmp_path / "q"
    write_tree(compile_path(model, CompileOptions(board="qemu-mps2-an500")).tree, q)
    assert not (q / "renode").exists()


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


needs_renode = pytest.mark.skipif(find_renode() is None, reason=renode_missing_reason())


@needs_renode
@pytest.mark.emu
def test_tokens_under_renode_are_the_reference(tmp_path):
    """Renode runs the weact-h750 build: the same tokens as the reference."""
    from firmware_harness import GREEDY, SHAPES_CONTEXT, build_case, need, prompt_for, reference_tokens
    from tinyllm_gen.run.firmware import run_firmware

    need("arm-none-eabi-gcc")
    built = build_case(tmp_path, "llama-tied-gqa", 32, "weact-h750")
    ids = prompt_for(built.model_dir)
    fw = run_firmware(built.out, ids, 8, GREEDY, emulator="renode", timeout_s=600)
    assert fw.output.generated_ids == reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:8]
    assert fw.output.canary_ok


@pytest.mark.emu
@pytest.mark.skipif(shutil.which("renode-test") is None,
                    reason=f"renode-test is not on PATH; {renode_missing_reason()}")
def test_robot_passes_under_renode_test(tmp_path):
    from firmware_harness import GREEDY, SHAPES_CONTEXT, build_case, need, prompt_for, reference_tokens

    need("arm-none-eabi-gcc")
    built = build_case(tmp_path, "llama-tied-gqa", 32, "weact-h750")
    ids = prompt_for(built.model_dir)
    want = reference_tokens(built.model_dir, 32, ids, GREEDY, SHAPES_CONTEXT)[:8]
    robot = write_check(built.out, ids, 8, GREEDY, want, "max_tokens")
    proc = subprocess.run(["renode-test", str(robot)], capture_output=True, text=True, timeout=1800,
                          cwd=Path(built.out))
    assert proc.returncode == 0, proc.stdout[-2000:]


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
