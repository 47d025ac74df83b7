"""`tinyllm-gen run OUT --emulator renode`: boots an STM32H750 build's
OUT/renode/ files (families/stm32h750/renode.py renders them) in Renode and
reads the console like the other runners; write_check adds a token check to
the build's Robot test.

Renode (1.15.1, the last release built with Mono) is in no package registry:
the runner uses `renode` on PATH, else `renode-run` (PyPI; it downloads
Renode when first used: `pip install 'tinyllm-gen[renode]'`), else says in
one line that neither is there. Nothing of Renode is part of this project."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

from ..board import Board, load_board
from ..build.out import read_manifest
from ..errors import UserError
from ..families.stm32h750.renode import (CORE_HZ, MODEL_ERROR, RENODE_DIR, TEMPLATES, renode_board, renode_context,
                                         template_env)
from .protocol import pack_request
from .result import TIMEOUT_EXIT_CODE, RunResult

CHECK_REQUEST = "check_request.bin"
BUDGET_SPENT = "tllm-renode-instruction-budget-spent"  # echoed by the monitor once RunFor's budget is spent
RENODE_HINT = ("install Renode 1.15.1 (https://github.com/renode/renode/releases: no package registry has it) "
               "and put `renode` on PATH, or `pip install 'tinyllm-gen[renode]'` for renode-run, which "
               "downloads it")




def write_check(out: Path, prompt_ids: Sequence[int], max_new_tokens: int, sampling, expected_ids: Sequence[int],
                stop_reason: str, source: str = "tinyllm-gen's reference of the quantized model") -> Path:
    """Adds a test to OUT/renode/tllm.robot: this request (written beside it)
    must give these tokens under Renode. Returns the robot file."""
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    capacity = _request_capacity(out)
    ctx = renode_context(board, capacity)
    ctx.update(expected=[{"index": i, "id": t} for i, t in enumerate(expected_ids)], request_file=CHECK_REQUEST,
               n_prompt=len(prompt_ids), max_new=max_new_tokens, max_seq=manifest["max_seq"],
               temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed, stop_reason=stop_reason,
               expected_source=source)
    d = out / RENODE_DIR
    d.mkdir(exist_ok=True)
    (d / CHECK_REQUEST).write_bytes(pack_request(list(prompt_ids), max_new_tokens, sampling))
    robot = d / "tllm.robot"
    robot.write_text(template_env().get_template(TEMPLATES["tllm.robot"]).render(**ctx))
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


def _read_text(path: Path, fallback: str = "") -> str:
    """The file's text, or fallback where it is not there (not yet created, or between Renode's moves)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return fallback


def _stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """Asks Renode to quit, then ends its whole process group: `renode` is a shell script that starts
    mono as a child, and killing the shell alone would leave mono running the script on, where it
    recreates this build's console file (Renode then moves the next run's console aside, as console.1)."""
    if proc.poll() is None:
        try:
            proc.stdin.write(b"quit\n")
            proc.stdin.flush()
            proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session's leftovers, mono among them
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


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
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                text = _read_text(console, text)
                lines = text.split("\n")
                for line in lines[seen:len(lines) - 1]:
                    if on_line is not None:
                        on_line(line)
                    if line.startswith("@TLLM exit "):
                        code = int(line.split()[2])
                seen = max(seen, len(lines) - 1)
                log = _read_text(log_path, log)
                problem = _log_problem(log)
                spent = BUDGET_SPENT in log.replace(f"echo {BUDGET_SPENT}", "")
                if code is not None or problem is not None or spent:
                    break
                time.sleep(0.05)
        finally:
            _stop(proc)
    log = _read_text(log_path, log)
    text = _read_text(console, text)
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
