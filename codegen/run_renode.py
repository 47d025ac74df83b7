"""STM32H750 builds under Renode: the platform overlay, the models, the .resc
script and the Robot test every STM32H750 build carries in OUT/renode/, and
the runner behind `tinyllm-gen run OUT --emulator renode`.

Renode (1.15.1, the last release built with Mono) is in no package registry:
the runner uses `renode` on PATH, else `renode-run` (PyPI; it downloads
Renode when first used: `pip install 'tinyllm-gen[renode]'`), else says in
one line that neither is there. Nothing of Renode is part of this project.

What OUT/renode/ adds to Renode's stock `platforms/cpus/stm32h743.repl`
(facts from renode/renode, renode/renode-infrastructure and antmicro/tlib at
1.15.1; docs/renode.md says why each is there):

* the H750's internal flash (128 KiB) and the SRAM sizes from board.json;
  every address is checked against where the stock platform has that memory;
* tllm_fpv5.py: Renode 1.15.1's Cortex-M7 misexecutes the FPv5 (ARMv8)
  floating-point instructions (VMAXNM runs as VDIV, VCVTA rounds wrongly,
  VMINNM faults), which made every token 0; after loading the ELF the .resc
  routes each one through a thunk that computes exactly what the instruction
  does, in memory of its own (`fpv5Thunks`);
* the QUADSPI window at the board's address (0x90000000): memory of its own
  holding the weights blob and the request block; QUADSPI itself is
  h750_qspi.py (the board's flash chip: the stock controller has no flash
  and its only NOR model refuses the W25Q64's commands);
* RCC (h750_rcc.py: the stock model keeps no clock enables, so mdma.c
  re-enabled the MDMA clock before every transfer) and PWR (h750_pwr.py:
  the stock platform only tags PWR, so ACTVOSRDY never comes), DBGMCU_IDC
  reading revision V (else bringup.c takes the 400 MHz path), the MDMA
  (h750_mdma.py, for weight streaming; 1.15.1 has no model) and the DWT
  (h750_dwt.py: CYCCNT counts executed instructions, less the thunks', so
  the per-token counts compare with QEMU's and Unicorn's).

The board-specific Renode data (the stock platform, its names for the
memories and USARTs) lives here until board.json carries it."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jinja2

from . import __version__
from .board import Board, load_board
from .build.out import read_manifest
from .errors import UserError
from .h750_model import CHIP_READS, h750_bus_targets
from .resources import boards_dir
from .run.protocol import pack_request
from .run.result import TIMEOUT_EXIT_CODE, RunResult
from .run.unicorn import DBGMCU_IDC  # one place for the revision's IDC value

RENODE_VERSION = "1.15.1"
STOCK_PLATFORM = "platforms/cpus/stm32h743.repl"
RENODE_DIR = "renode"  # inside OUT
# OUT/renode/<name> from boards/stm32h750-common/renode/<name>.j2
TEMPLATES = {name: f"{name}.j2" for name in (
    "stm32h750.repl", "h750_rcc.py", "h750_pwr.py", "h750_qspi.py", "h750_mdma.py", "h750_dwt.py", "tllm_fpv5.py",
    "tllm.resc", "tllm.robot")}
CHECK_REQUEST = "check_request.bin"

# Where the stock platform (Renode 1.15.1) has each memory board.json names:
# region -> (the platform's name for it, its address).
STOCK_MEMORIES = {
    "itcm": ("itcm", 0x00000000), "dtcm": ("dtcm", 0x20000000), "axi": ("axiSram", 0x24000000),
    "sram1": ("sram1", 0x30000000), "sram2": ("sram2", 0x30020000), "sram3": ("sram3", 0x30040000),
    "sram4": ("sram4", 0x38000000), "flash": ("flash1", 0x08000000),
}
STOCK_UARTS = {"USART1": ("usart1", 0x40011000), "USART2": ("usart2", 0x40004400), "USART3": ("usart3", 0x40004800),
               "UART4": ("uart4", 0x40004C00), "UART5": ("uart5", 0x40005000), "USART6": ("usart6", 0x40011400)}
RCC_ADDRESS = 0x58024400
PWR_ADDRESS = 0x58024800
DBGMCU_ADDRESS = 0x5C001000
QSPI_REGS = 0x52005000
MDMA_ADDRESS = 0x52000000
DWT_ADDRESS = 0xE0001000
# fpv5Thunks: after the H7's 2 MiB flash range (reserved on the H750), within a B.W's 16 MiB of the code.
FPV5_THUNKS, FPV5_THUNKS_BYTES = 0x08200000, 0x10000
# What bringup.c sends each chip (h750_qspi.py checks the same list).
QSPI_COMMANDS = {"W25Q64JV": ("66h then 99h: reset (QE back to 0)", "50h (or 06h) then 31h with one byte: status "
                                                                                  "register 2, whose bit 1 is QE"),
                 "MT25QL512ABB": ("F5h on four lines: leave QPI mode (nothing to a chip in extended SPI)",)}
# The models' error lines start with this (h750_qspi.py, h750_mdma.py, tllm_fpv5.py): the runner and the
# Robot test fail on any.
MODEL_ERROR = "tllm-h750:"
CORE_HZ = 480_000_000  # bringup.c on revision V: PLL1 at 480 MHz
# The robot's Terminal Tester timeout is virtual time: 10 s at the core clock is 4.8 G instructions per
# awaited console line, a bound on a hung firmware that no real line (a token, a prefill) comes near.
ROBOT_LINE_TIMEOUT_S = 10
BUDGET_SPENT = "tllm-renode-instruction-budget-spent"  # echoed by the monitor once RunFor's budget is spent
REVISION = "V"
RENODE_HINT = ("install Renode 1.15.1 (https://github.com/renode/renode/releases: no package registry has it) "
               "and put `renode` on PATH, or `pip install 'tinyllm-gen[renode]'` for renode-run, which "
               "downloads it")


def supports(board: Board) -> bool:
    """STM32H750 boards (the family boards/stm32h750-common serves)."""
    return board.common_dir == "stm32h750-common"


def _hex(v: int) -> str:
    return f"0x{v:08X}"


@dataclass(frozen=True)
class RenodeBoard:
    """What the Renode files say about one board, all from board.json."""
    name: str
    uart: str  # the platform's name for the console USART
    flash: dict
    rams: list[dict]
    qspi: dict
    weights_address: str
    request_address: str
    request_max: int


def renode_board(board: Board) -> RenodeBoard:
    if not supports(board):
        raise UserError(f"board '{board.name}' has no Renode platform (STM32H750 boards only)")
    mems = []
    for region in board.memory.regions:
        stock = STOCK_MEMORIES.get(region.name)
        if stock is None:
            continue
        if region.address != stock[1]:
            raise ValueError(f"board '{board.name}': region {region.name} at {_hex(region.address)} but the "
                             f"Renode platform has {stock[0]} at {_hex(stock[1])}")
        mems.append({"name": region.name, "stock_name": stock[0], "address": _hex(region.address),
                     "size": region.size, "size_hex": _hex(region.size), "size_kib": region.size // 1024})
    flash = next(m for m in mems if m["name"] == "flash")
    uart = board.uart
    stock_uart = STOCK_UARTS.get(uart.instance)
    if stock_uart is None or uart.base != stock_uart[1]:
        raise ValueError(f"board '{board.name}': console {uart.instance} at {_hex(uart.base)} is not a USART "
                         "of the Renode platform")
    q = board.memory.region("qspi")
    chip = board.qspi_flash
    if chip is None or chip.chip not in CHIP_READS or chip.chip not in QSPI_COMMANDS:
        raise ValueError(f"board '{board.name}': no Renode model of its QSPI flash "
                         f"({chip.chip if chip else 'none in board.json'})")
    reads = [{"instr": f"0x{r.instr:02X}", "imode": r.imode, "admode": r.admode, "address_bytes": r.address_bytes,
              "dcyc": r.dcyc, "dmode": r.dmode, "needs_qe": r.needs_qe} for r in CHIP_READS[chip.chip]]
    qspi = {"address": _hex(q.address), "size": q.size, "size_hex": _hex(q.size), "chip": chip.chip,
            "chips": chip.chips, "reads": reads}
    return RenodeBoard(board.name, stock_uart[0], flash, [m for m in mems if m["name"] != "flash"], qspi,
                       _hex(board.weights.address), _hex(board.request.address), board.request.max_bytes)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(boards_dir() / "stm32h750-common" / "renode")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True, autoescape=False)


def _context(board: Board, request_capacity: int) -> dict:
    rb = renode_board(board)
    flash_region = board.memory.region("flash")
    lines = (0, 1, 2, 4)  # the CCR mode encodings
    reads = [f"{r['instr'][2:]}h ({lines[r['imode']]}-{lines[r['admode']]}-{lines[r['dmode']]}, "
             f"{r['address_bytes']}-byte address, {r['dcyc']} dummy cycles{', QE set first' if r['needs_qe'] else ''})"
             for r in rb.qspi["reads"]]
    targets = [{"name": t.name, "start": _hex(t.start), "end": _hex(t.end), "tcm": t.tcm, "writable": t.writable}
               for t in h750_bus_targets(board.memory.regions)]
    return {
        "banner": f"generated by tinyllm-gen {__version__} for {rb.name} (Renode {RENODE_VERSION}); do not edit",
        "renode_version": RENODE_VERSION, "board_name": rb.name, "stock_platform": STOCK_PLATFORM,
        "core_hz": CORE_HZ, "mips": CORE_HZ // 1_000_000, "flash": rb.flash, "rams": rb.rams, "qspi": rb.qspi,
        "revision": REVISION, "dbgmcu_idc": _hex(DBGMCU_IDC[REVISION]), "dbgmcu_address": _hex(DBGMCU_ADDRESS),
        "rcc_address": _hex(RCC_ADDRESS), "pwr_address": _hex(PWR_ADDRESS), "qspi_regs": _hex(QSPI_REGS),
        "mdma_address": _hex(MDMA_ADDRESS),
        "dwt_address": _hex(DWT_ADDRESS), "fpv5": {"base": _hex(FPV5_THUNKS), "size": _hex(FPV5_THUNKS_BYTES)},
        "commands_notes": QSPI_COMMANDS[rb.qspi["chip"]], "reads_notes": reads, "mdma_targets": targets,
        "model_error": MODEL_ERROR, "uart": rb.uart, "weights_address": rb.weights_address,
        "request_address": rb.request_address, "vector_table": _hex(flash_region.address),
        "max_request": request_capacity, "timeout_s": ROBOT_LINE_TIMEOUT_S, "expected": [],
    }


def renode_files(board: Board, request_capacity: int) -> dict[str, bytes]:
    """OUT/renode/* for an STM32H750 build (emit_tree adds them): the
    platform overlay, the Python models (RCC, PWR, QUADSPI with the board's
    flash, MDMA, DWT), the FPv5 workaround, the .resc and a Robot test that
    checks the bring-up reaches "@TLLM ready" (write_check adds a token check)."""
    env, ctx = _env(), _context(board, request_capacity)
    return {f"{RENODE_DIR}/{name}": env.get_template(t).render(**ctx).encode() for name, t in TEMPLATES.items()}


def write_check(out: Path, prompt_ids: Sequence[int], max_new_tokens: int, sampling, expected_ids: Sequence[int],
                stop_reason: str, source: str = "tinyllm-gen's reference of the quantized model") -> Path:
    """Adds a test to OUT/renode/tllm.robot: this request (written beside it)
    must give these tokens under Renode. Returns the robot file."""
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    capacity = _request_capacity(out)
    ctx = _context(board, capacity)
    ctx.update(expected=[{"index": i, "id": t} for i, t in enumerate(expected_ids)], request_file=CHECK_REQUEST,
               n_prompt=len(prompt_ids), max_new=max_new_tokens, max_seq=manifest["max_seq"],
               temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed, stop_reason=stop_reason,
               expected_source=source)
    d = out / RENODE_DIR
    d.mkdir(exist_ok=True)
    (d / CHECK_REQUEST).write_bytes(pack_request(list(prompt_ids), max_new_tokens, sampling))
    robot = d / "tllm.robot"
    robot.write_text(_env().get_template(TEMPLATES["tllm.robot"]).render(**ctx))
    return robot


def _request_capacity(out: Path) -> int:
    plan = json.loads((Path(out) / "report.json").read_text())
    for b in plan.get("buffers", []):
        if b.get("name") == "request":
            return int(b.get("count", b.get("bytes", b.get("size", 0))))
    raise UserError(f"{out}/report.json has no request buffer; recompile OUT")


# ---------------------------------------------------------------- running


def find_renode() -> list[str] | None:
    """The command that starts Renode: `renode`, else `renode-run exec --`."""
    if shutil.which("renode"):
        return ["renode"]
    if shutil.which("renode-run"):
        return ["renode-run", "exec", "--"]
    return None


def renode_missing_reason() -> str:
    return f"Renode is not installed (neither `renode` nor `renode-run` is on PATH): {RENODE_HINT}"


def run_script(out: Path, board: Board, request_bin: Path | None, console: Path,
               max_instructions: int | None = None) -> str:
    """The monitor commands of one run: the .resc with absolute paths, the request, then `start`, or, with
    max_instructions, `emulation RunFor` that many instructions of virtual time (PerformanceInMips is the
    core clock), followed by a line the runner recognises as the end of the budget."""
    out = Path(out).resolve()
    rb = renode_board(board)
    lines = [f"$elf=@{out / 'build' / 'firmware.elf'}", f"$weights=@{out / 'weights.bin'}", f"$console=@{console}",
             f"include @{out / RENODE_DIR / 'tllm.resc'}"]
    if request_bin is not None:
        lines.append(f"sysbus LoadBinary @{Path(request_bin).resolve()} {rb.request_address}")
    if max_instructions is None:
        lines.append("start")
    else:
        lines += [f'emulation RunFor "{max_instructions / CORE_HZ:.9f}"', f"echo {BUDGET_SPENT}"]
    return "\n".join(lines) + "\n"


def renode_command(renode: list[str], script: Path) -> list[str]:
    return [*renode, "--disable-xwt", "--console", "--plain", "-e", f"include @{Path(script).resolve()}"]


def _log_problem(log: str) -> str | None:
    """The first line of Renode's log that means the run cannot be trusted: a model's error (MODEL_ERROR),
    a monitor command that failed (the .resc, the FPv5 patch), an exception."""
    lines = log.splitlines()
    for k, line in enumerate(lines):
        if MODEL_ERROR in line:
            return line[line.index(MODEL_ERROR):].strip()
        if "There was an error executing command" in line or "No such command or device" in line:
            more = " ".join(x.strip() for x in lines[k + 1:k + 3] if x.strip())
            return f"{line.strip()} {more}".strip()
        if "FATAL UNHANDLED EXCEPTION" in line or "Unhandled exception" in line:
            return line.strip()
    return None


def run_renode(out: Path, board: Board, request_bin: Path | None, timeout_s: float = 600, on_line=None,
               max_instructions: int | None = None):
    """Boot the build under Renode with the request in its block and wait for the "@TLLM exit N" line the
    H750 board prints; returns a run.RunResult like the other runners' (the console text, from which
    protocol.parse_output reads the generated ids and the per-token instruction counts).

    max_instructions bounds the run in guest instructions (Renode's virtual time at the core clock): past it
    the result is timed out, however busy the machine; timeout_s is a wall-clock backstop.  A model's error
    line, or a failed monitor command, is a UserError naming it."""
    renode_board(board)  # an STM32H750 build, before asking for Renode
    renode = find_renode()
    if renode is None:
        raise UserError(renode_missing_reason())
    out = Path(out)
    if not (out / RENODE_DIR / "tllm.resc").is_file():
        raise UserError(f"{out}: no {RENODE_DIR}/tllm.resc; recompile OUT with this version of tinyllm-gen")
    if not (out / RENODE_DIR / "tllm_fpv5.py").is_file():
        raise UserError(f"{out}: {RENODE_DIR}/ predates the Renode FPv5 workaround; recompile OUT")
    console = (out / "build" / "renode-console.txt").resolve()
    log_path = (out / "build" / "renode-log.txt").resolve()
    console.unlink(missing_ok=True)
    script = out / "build" / "renode-run.resc"
    script.write_text(run_script(out, board, request_bin, console, max_instructions))
    cmd = renode_command(renode, script)
    deadline = time.monotonic() + timeout_s
    seen, code, spent, problem = 0, None, False, None
    text = log = ""
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                text = console.read_text(errors="replace") if console.exists() else ""
                lines = text.split("\n")
                for line in lines[seen:len(lines) - 1]:
                    if on_line is not None:
                        on_line(line)
                    if line.startswith("@TLLM exit "):
                        code = int(line.split()[2])
                seen = max(seen, len(lines) - 1)
                log = log_path.read_text(errors="replace")
                problem = _log_problem(log)
                spent = BUDGET_SPENT in log.replace(f"echo {BUDGET_SPENT}", "")
                if code is not None or problem is not None or spent:
                    break
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                try:
                    proc.stdin.write(b"quit\n")
                    proc.stdin.flush()
                    proc.wait(timeout=15)
                except (OSError, subprocess.TimeoutExpired):
                    proc.kill()
                    proc.wait()
    log = log_path.read_text(errors="replace")
    text = console.read_text(errors="replace") if console.exists() else text
    problem = problem or _log_problem(log)
    if problem is not None:
        raise UserError(f"under Renode: {problem} (Renode's log: {log_path})")
    if code is None:
        if spent:
            limit = f"{max_instructions:,} guest instructions"
            return RunResult(TIMEOUT_EXIT_CODE, text, True, cmd, f"the firmware did not finish within {limit}", limit)
        if time.monotonic() < deadline:  # Renode ended without the firmware's exit line
            raise UserError(f"Renode stopped before the firmware finished (status {proc.returncode}): "
                            f"{log.strip()[-300:]!r}")
        return RunResult(TIMEOUT_EXIT_CODE, text, True, cmd, log, f"{timeout_s:g} s")
    return RunResult(code, text, False, cmd, log)
