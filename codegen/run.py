"""Runners: run firmware on the host, under QEMU, over a serial port or
(run_unicorn.py) under Unicorn, and collect its exit status and console
text.  Which runner a board uses is data (board.json "run", see
build.RUNNERS); the board itself is a typed `Board` (board.py).

Firmware for ``qemu-mps2-an500`` gets its weights and its
request through ``-device loader`` into PSRAM, prints on UART0 (captured to a
file, apart from semihosting and QEMU's own messages) and reports its exit
status through semihosting."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tinyllm_gen.board import Board
from tinyllm_gen.errors import UserError


QEMU_INSTALL_HINT = "sudo apt-get install qemu-system-arm"

# Exit status reported for a run that was killed at its timeout.
TIMEOUT_EXIT_CODE = -9


@dataclass(frozen=True)
class RunResult:
    """What one run produced.

    ``output`` is the console text (UART0 under QEMU, stdout on the host).
    ``diagnostics`` holds everything else the process printed: QEMU's
    messages and semihosting text, or the host program's stderr."""

    exit_code: int
    output: str
    timed_out: bool
    command: list[str]
    diagnostics: str = ""


# ---------------------------------------------------------------- QEMU


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


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def run_qemu(
    elf: Path,
    board: Board,
    weights_bin: Path | None,
    request_bin: Path | None,
    timeout_s: float = 120,
    count: bool = True,
) -> RunResult:
    """Boot ``elf`` under QEMU and wait for its semihosting exit."""
    program = board.emulator.program if board.emulator else "qemu-system-arm"
    if shutil.which(program) is None:
        raise UserError(f"{program} not found on PATH: install it with `{QEMU_INSTALL_HINT}`")
    with tempfile.TemporaryDirectory(prefix="tllm-qemu-") as tmp:
        uart = Path(tmp) / "uart.txt"
        cmd = qemu_command(Path(elf), board, weights_bin, request_bin, uart, count=count)
        timed_out = False
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
            timed_out, code, diag = True, TIMEOUT_EXIT_CODE, e.stdout
        output = _decode(uart.read_bytes()) if uart.exists() else ""
    return RunResult(code, output, timed_out, cmd, _decode(diag))


# ---------------------------------------------------------------- host


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
        return RunResult(TIMEOUT_EXIT_CODE, _decode(e.stdout), True, cmd, _decode(e.stderr))
    return RunResult(proc.returncode, _decode(proc.stdout), False, cmd, _decode(proc.stderr))


def _run_host_streaming(cmd: list[str], stdin_bytes: bytes | None, timeout_s: float, on_line) -> RunResult:
    import threading

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
            on_line(_decode(line).rstrip("\n"))
        err = proc.stderr.read()
        code = proc.wait()
    finally:
        timed_out = not timer.is_alive() and proc.returncode is not None and proc.returncode < 0
        timer.cancel()
    if timed_out:
        return RunResult(TIMEOUT_EXIT_CODE, _decode(bytes(out)), True, cmd, _decode(err))
    return RunResult(code, _decode(bytes(out)), False, cmd, _decode(err))


# ---------------------------------------------------------------- serial

READY_PREFIX = b"@TLLM ready"
DONE_PREFIX = b"@TLLM done status="


def talk_serial(port, request_bin: bytes, timeout_s: float, wait_ready: bool = True,
                on_line=None) -> tuple[int | None, str]:
    """The UART request protocol (firmware/tllm_main.c, tllm_frame.c) over an
    open pyserial port: wait for "@TLLM ready" (unless ``wait_ready`` is
    false: the firmware is known to be waiting), send the request, read until
    the "@TLLM done status=N req=CRC" line that names this request (done lines
    of frames the firmware refused before it, such as junk on the line, are
    skipped with their output). ``on_line(text)`` sees each console line as it
    arrives. Returns (N or None on timeout, console text of this request)."""
    from .protocol import parse_done, request_crc

    mine = request_crc(request_bin)
    deadline = time.monotonic() + timeout_s
    text = bytearray()
    pending = b""
    sent = False

    def send():
        port.write(request_bin)
        port.flush()

    if not wait_ready:
        send()
        sent = True
    while time.monotonic() < deadline:
        chunk = port.readline()
        if not chunk:
            continue
        pending += chunk
        if not pending.endswith(b"\n"):
            continue  # readline() returned at its timeout: the rest of the line is still coming
        line, pending = pending, b""
        text += line
        if on_line is not None and sent:
            on_line(line.decode("utf-8", errors="replace").rstrip("\n"))
        if not sent and line.startswith(READY_PREFIX):
            send()
            sent = True
            text = bytearray(line)
        elif line.startswith(DONE_PREFIX):
            done = parse_done(line.decode("utf-8", errors="replace"))
            if done is not None and sent and done[1] == mine:
                return done[0], text.decode("utf-8", errors="replace")
            text = bytearray()  # another frame's status (junk, a frame dropped before ours): ours is to come
        elif line.startswith(b"@TLLM error") and not sent:
            break
    return None, text.decode("utf-8", errors="replace")


def run_serial(url: str, request_bin: bytes, timeout_s: float = 600, baudrate: int = 115200,
               on_line=None) -> RunResult:
    """Run one request on a board that is already flashed and waiting
    (a /dev/tty* device, or any pyserial URL such as socket://host:port)."""
    import serial

    try:
        port = serial.serial_for_url(url, baudrate=baudrate, timeout=0.5)
    except (serial.SerialException, ValueError) as e:
        raise UserError(f"cannot open serial port {url}: {e}; check the port name and that the board is connected") \
            from None
    with port:
        status, text = talk_serial(port, request_bin, timeout_s, on_line=on_line)
    return RunResult(status if status is not None else TIMEOUT_EXIT_CODE, text, status is None, [url])


def _free_tcp_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qemu_uart_command(elf: Path, board: dict, weights_bin: Path | None, port_no: int, count: bool = True) -> list[str]:
    """QEMU with UART0 as a TCP server on 127.0.0.1:port_no (the CPU starts
    when the first client connects; QEMU listens again after a disconnect)."""
    cmd = qemu_command(Path(elf), board, weights_bin, None, Path(os.devnull), count=count)
    at = cmd.index("-serial")
    cmd[at - 2:at + 2] = ["-serial", f"tcp:127.0.0.1:{port_no},server=on,wait=on"]  # replaces the file chardev
    return cmd


@contextmanager
def qemu_uart_session(elf: Path, board: Board, weights_bin: Path | None, count: bool = True):
    """QEMU with UART0 on a loopback TCP socket (the CPU starts once we
    connect); yields (pyserial port, QEMU process). A host talks to it
    exactly as to a real board."""
    with qemu_uart_server(elf, board, weights_bin, count, connect=True) as (port, proc):
        yield port, proc


@contextmanager
def qemu_uart_server(elf: Path, board: dict, weights_bin: Path | None, count: bool = True, connect: bool = False):
    """QEMU with UART0 on a loopback TCP socket. With ``connect``, yields
    (pyserial port, process); without, yields (its socket:// URL, process)
    once it listens, for a client of its own (``serve --serial URL``): the
    firmware then runs, and its "@TLLM ready" went to the probe connection."""
    import serial

    program = board.emulator.program if board.emulator else "qemu-system-arm"
    if shutil.which(program) is None:
        raise UserError(f"{program} not found on PATH: install it with `{QEMU_INSTALL_HINT}`")
    port_no = _free_tcp_port()
    url = f"socket://127.0.0.1:{port_no}"
    cmd = qemu_uart_command(Path(elf), board, weights_bin, port_no, count)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(200):  # QEMU listens once it has started
            try:
                port = serial.serial_for_url(url, timeout=0.5)
                break
            except serial.SerialException:
                if proc.poll() is not None:
                    break
                time.sleep(0.05)
        if port is None:
            out = proc.communicate(timeout=5)[0] if proc.poll() is not None else b""
            raise UserError(f"QEMU did not open its serial socket: {_decode(out).strip()[-200:]}")
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
                    timeout_s: float = 600, on_line=None) -> RunResult:
    """One request over the UART, the way a host talks to a real board."""
    with qemu_uart_session(elf, board, weights_bin) as (port, proc):
        status, text = talk_serial(port, request_bin, timeout_s, on_line=on_line)
        code = proc.wait(timeout=30) if status is not None else TIMEOUT_EXIT_CODE
    return RunResult(code, text, status is None, list(proc.args))


# ---------------------------------------------------------------- Unicorn


def run_unicorn_board(elf: Path, board: Board, weights_bin: Path | None, request_bin: Path,
                      uart_request: bytes = b"", timeout_s: float = 600, on_line=None) -> RunResult:
    """Run STM32H750 firmware under the Unicorn model (run_unicorn.py): the
    request in its block next to the weights, or (uart_request) sent over
    the console USART instead."""
    from .run_unicorn import run_unicorn

    res = run_unicorn(elf, board, weights_bin, None if uart_request else request_bin, uart_rx=uart_request,
                      timeout_s=timeout_s, on_line=on_line)
    command = ["unicorn", board.name, str(elf)]
    if res.error:
        why = f" ({'; '.join(res.violations)})" if res.violations else ""
        raise UserError(f"the {board.name} firmware stopped under Unicorn: {res.error}{why}; the console said: "
                        f"{_decode(res.output).strip()[-200:]!r}")
    if res.violations:
        raise UserError(f"the {board.name} firmware broke a hardware rule under Unicorn: "
                        f"{'; '.join(res.violations)}")
    code = TIMEOUT_EXIT_CODE if res.exit_code is None else res.exit_code
    return RunResult(code, _decode(res.output), res.timed_out, command,
                     f"{res.instructions} instructions under Unicorn")
