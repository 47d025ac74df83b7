"""Firmware under QEMU (mps2-an500, the Cortex-M7 stand-in): weights and
request through `-device loader` into PSRAM, UART0 captured to a file (apart
from semihosting and QEMU's own messages), the exit status through
semihosting; or UART0 on a loopback socket, for the console protocol."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import serial
from serial.urlhandler.protocol_socket import Serial as SocketSerial

from ..board import Board
from ..errors import UserError
from .result import TIMEOUT_EXIT_CODE, RunResult, decode
from .console import talk_serial
from .plugins import ILIMIT_SOURCE, build_plugin

QEMU_INSTALL_HINT = "sudo apt-get install qemu-system-arm"
ILIMIT_EXIT = 124  # tllm_ilimit.c: the run reached its guest-instruction limit
ILIMIT_NOTE = b"tllm_ilimit: stopped after"


def with_instruction_limit(cmd: list[str], max_instructions: int | None) -> list[str]:
    """The QEMU command with the tllm_ilimit plugin ending it after max_instructions (None: unbounded)."""
    if max_instructions is None:
        return cmd
    at = cmd.index("-kernel")
    return cmd[:at] + ["-plugin", f"{build_plugin(ILIMIT_SOURCE)},limit={int(max_instructions)}"] + cmd[at:]


def _qemu_opt(value: str) -> str:
    """Escape a value for a QEMU ``key=value,...`` option list."""
    return value.replace(",", ",,")


def _check_blob(path: Path, what: str, limit: int) -> None:
    if not path.is_file():
        raise UserError(f"{what} file not found: {path}")
    size = path.stat().st_size
    if size > limit:
        raise UserError(
            f"{what} file {path} is {size} bytes; the board has room for {limit} bytes"
        )


def qemu_command(
    elf: Path,
    board: Board,
    weights_bin: Path | None,
    request_bin: Path | None,
    uart_file: Path,
    count: bool = True,
) -> list[str]:
    """The QEMU command line that boots ``elf`` on ``board``.

    Weights and request are placed raw at the board's addresses.  UART0 goes
    to ``uart_file``; semihosting text stays on QEMU's stdout.  With ``count``
    the guest clock is tied to the instruction count (``-icount shift=0``:
    one ns per instruction, so one 25 MHz timer tick per 40 instructions)."""
    emu = board.emulator
    if emu is None:
        raise UserError(f"board '{board.name}' does not run under QEMU" + (f": {board.run.note}" if board.run.note else ""))
    cmd = [emu.program, *emu.args]
    cmd += ["-semihosting-config", "enable=on,target=native"]
    if count:
        cmd += ["-icount", "shift=0"]
    cmd += [
        "-chardev",
        f"file,id=tllm_uart,path={_qemu_opt(str(Path(uart_file).absolute()))}",
        "-serial",
        "chardev:tllm_uart",
    ]
    for blob, what, place in ((weights_bin, "weights", board.weights), (request_bin, "request", board.request)):
        if blob is None:
            continue
        if place.address is None or place.max_bytes is None:
            raise UserError(f"board '{board.name}' has no memory address for the {what}")
        _check_blob(Path(blob), what, place.max_bytes)
        cmd += [
            "-device",
            f"loader,file={_qemu_opt(str(Path(blob).absolute()))},addr=0x{place.address:08X},force-raw=on",
        ]
    cmd += ["-kernel", str(Path(elf).absolute())]
    return cmd


def run_qemu(
    elf: Path,
    board: Board,
    weights_bin: Path | None,
    request_bin: Path | None,
    timeout_s: float = 120,
    count: bool = True,
    max_instructions: int | None = None,
) -> RunResult:
    """Boot ``elf`` under QEMU and wait for its semihosting exit; past
    ``max_instructions`` guest instructions (tllm_ilimit.c) or ``timeout_s``
    seconds of wall clock the run ends as timed out (`RunResult.limit` says which)."""
    program = board.emulator.program if board.emulator else "qemu-system-arm"
    if shutil.which(program) is None:
        raise UserError(f"{program} not found on PATH: install it with `{QEMU_INSTALL_HINT}`")
    with tempfile.TemporaryDirectory(prefix="tllm-qemu-") as tmp:
        uart = Path(tmp) / "uart.txt"
        cmd = with_instruction_limit(qemu_command(Path(elf), board, weights_bin, request_bin, uart, count=count),
                                     max_instructions)
        timed_out, limit = False, ""
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
            code, diag = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            timed_out, code, diag, limit = True, TIMEOUT_EXIT_CODE, e.stdout, f"{timeout_s:g} s"
        if code == ILIMIT_EXIT and ILIMIT_NOTE in (diag or b""):
            timed_out, code, limit = True, TIMEOUT_EXIT_CODE, f"{max_instructions:,} guest instructions"
        output = decode(uart.read_bytes()) if uart.exists() else ""
    return RunResult(code, output, timed_out, cmd, decode(diag), limit)


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listens(pid: int, port_no: int) -> bool | None:
    """Whether process PID holds the socket listening on 127.0.0.1:port_no
    (Linux: /proc/net/tcp and the process's descriptors); None where /proc
    cannot say.  A port _free_tcp_port handed out can be taken by another
    QEMU (a second test run on the machine, the other xdist worker) before
    ours binds it: connecting then reaches the other one, whose console never
    speaks to us."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    want = f"0100007F:{port_no:04X}"
    inodes = {f[9] for f in (ln.split() for ln in lines) if len(f) > 9 and f[1] == want and f[3] == "0A"}
    for fd in fds:
        try:
            if os.readlink(fd) in {f"socket:[{i}]" for i in inodes}:
                return True
        except OSError:
            continue
    return False


def qemu_uart_command(elf: Path, board: Board, weights_bin: Path | None, port_no: int, count: bool = True,
                      max_instructions: int | None = None) -> list[str]:
    """QEMU with UART0 as a TCP server on 127.0.0.1:port_no (the CPU starts
    when the first client connects; QEMU listens again after a disconnect)."""
    cmd = qemu_command(Path(elf), board, weights_bin, None, Path(os.devnull), count=count)
    at = cmd.index("-serial")
    cmd[at - 2:at + 2] = ["-serial", f"tcp:127.0.0.1:{port_no},server=on,wait=on"]  # replaces the file chardev
    return with_instruction_limit(cmd, max_instructions)


@contextmanager
def qemu_uart_session(elf: Path, board: Board, weights_bin: Path | None, count: bool = True,
                      max_instructions: int | None = None):
    """QEMU with UART0 on a loopback TCP socket (the CPU starts once we
    connect); yields (pyserial port, QEMU process). A host talks to it
    exactly as to a real board."""
    with qemu_uart_server(elf, board, weights_bin, count, connect=True, max_instructions=max_instructions) as \
            (port, proc):
        yield port, proc


UART_START_ATTEMPTS = 5
UART_LISTEN_BACKSTOP_S = 120.0  # QEMU starts in well under a second when idle


class BootKeepingPort(SocketSerial):
    """pyserial's socket:// port without the input flush its open() ends
    with. QEMU (``wait=on``) starts the guest the moment the connection is
    accepted, so on a busy machine the firmware's first line ("@TLLM ready")
    can arrive before that flush, which threw it away: the host then waited
    for a ready line that had come and gone, and the firmware for a request."""

    _opening = False

    def open(self):
        self._opening = True
        try:
            super().open()
        finally:
            self._opening = False

    def reset_input_buffer(self):
        if not self._opening:
            super().reset_input_buffer()


def _connect_own(proc: subprocess.Popen, url: str, port_no: int):
    """A pyserial port on QEMU's socket once this QEMU (not another process
    that took the port) listens on it; None when QEMU exited first."""
    deadline = time.monotonic() + UART_LISTEN_BACKSTOP_S
    while time.monotonic() < deadline and proc.poll() is None:
        if _listens(proc.pid, port_no) is not False:
            try:
                return BootKeepingPort(url, timeout=0.5)
            except serial.SerialException:
                pass
        time.sleep(0.05)
    return None


@contextmanager
def qemu_uart_server(elf: Path, board: Board, weights_bin: Path | None, count: bool = True, connect: bool = False,
                     max_instructions: int | None = None):
    """QEMU with UART0 on a loopback TCP socket. With ``connect``, yields
    (pyserial port, process); without, yields (its socket:// URL, process)
    once it listens, for a client of its own (``serve --serial URL``): the
    firmware then runs, and its "@TLLM ready" went to the probe connection."""
    program = board.emulator.program if board.emulator else "qemu-system-arm"
    if shutil.which(program) is None:
        raise UserError(f"{program} not found on PATH: install it with `{QEMU_INSTALL_HINT}`")
    out = b""
    for _ in range(UART_START_ATTEMPTS):  # another port when another process took ours first
        port_no = _free_tcp_port()
        url = f"socket://127.0.0.1:{port_no}"
        cmd = qemu_uart_command(Path(elf), board, weights_bin, port_no, count, max_instructions)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        port = _connect_own(proc, url, port_no)
        if port is not None or proc.poll() is None:
            break
        out = proc.communicate()[0]
        if b"Address already in use" not in out:
            break
    try:
        if port is None:
            raise UserError(f"QEMU did not open its serial socket: {decode(out).strip()[-200:]}")
        if connect:
            with port:
                yield port, proc
        else:
            port.close()
            yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_qemu_serial(elf: Path, board: Board, weights_bin: Path | None, request_bin: bytes,
                    timeout_s: float = 600, on_line=None, max_instructions: int | None = None) -> RunResult:
    """One request over the UART, the way a host talks to a real board."""
    with qemu_uart_session(elf, board, weights_bin, max_instructions=max_instructions) as (port, proc):
        try:
            status, text = talk_serial(port, request_bin, timeout_s, on_line=on_line)
        except serial.SerialException:  # QEMU closed the socket: it ended (its instruction limit) before a done line
            proc.wait(timeout=30)
            status, text = None, ""
        code = proc.wait(timeout=30) if status is not None else TIMEOUT_EXIT_CODE
    limited = status is None and proc.returncode == ILIMIT_EXIT
    return RunResult(code, text, status is None, list(proc.args),
                     limit=f"{max_instructions:,} guest instructions" if limited else
                     f"{timeout_s:g} s" if status is None else "")
