"""The host board's firmware: a native executable, its request as argv[1]
or on standard input (the host's console UART)."""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from .result import TIMEOUT_EXIT_CODE, RunResult, decode


def run_host(exe: Path, request_bin: Path | None, timeout_s: float = 60,
             stdin_bytes: bytes | None = None, on_line=None) -> RunResult:
    """Run a host-board executable, passing the request file as argv[1], or
    (stdin_bytes) the request on standard input, the host's console UART.
    ``on_line(text)`` sees each console line as the program prints it."""
    cmd = [str(Path(exe).absolute())]
    if request_bin is not None:
        cmd.append(str(Path(request_bin).absolute()))
    if on_line is not None:
        return _run_host_streaming(cmd, stdin_bytes, timeout_s, on_line)
    try:
        proc = subprocess.run(
            cmd,
            input=stdin_bytes,
            stdin=None if stdin_bytes is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        return RunResult(TIMEOUT_EXIT_CODE, decode(e.stdout), True, cmd, decode(e.stderr))
    return RunResult(proc.returncode, decode(proc.stdout), False, cmd, decode(proc.stderr))


def _run_host_streaming(cmd: list[str], stdin_bytes: bytes | None, timeout_s: float, on_line) -> RunResult:
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        if stdin_bytes is not None:
            proc.stdin.write(stdin_bytes)
            proc.stdin.close()
        out = bytearray()
        for line in proc.stdout:
            out += line
            on_line(decode(line).rstrip("\n"))
        err = proc.stderr.read()
        code = proc.wait()
    finally:
        timed_out = not timer.is_alive() and proc.returncode is not None and proc.returncode < 0
        timer.cancel()
    if timed_out:
        return RunResult(TIMEOUT_EXIT_CODE, decode(bytes(out)), True, cmd, decode(err))
    return RunResult(code, decode(bytes(out)), False, cmd, decode(err))
