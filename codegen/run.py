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
FRAME_ERROR_PREFIX = b"@TLLM error frame:"
# Errors about one frame: its done line and a new "@TLLM ready" follow. Any
# other error line before our request is sent (weights, no console input)
# means the firmware has stopped.
PER_FRAME_ERRORS = (FRAME_ERROR_PREFIX, b"@TLLM error request:")
# After a done line for another frame (or req=none) and the "@TLLM ready"
# behind it: this long without a line means our request is not in what the
# firmware holds (it lets a request it found print its first line at once).
LOST_QUIET_S = 2.0


class RequestLost(UserError):
    """The board served neither the request nor its one resend (damaged or lost on the link)."""


def _request_fate(done: tuple[int, int | None] | None, mine: int, frame_error: bytes | None) -> str | None:
    """What a done line says of our request: None when it is our answer
    (served, or refused for its fields); "damaged" when our frame arrived with
    a CRC that failed; "other" when the line is another frame's (junk or a cut
    frame before ours, or ours cut short: req=none)."""
    if done is None or done[1] != mine:
        return "other"
    # status 3 (TLLM_EXIT_BAD_REQUEST) after a frame error: tllm_frame.c names a frame's CRC field only
    # once the whole frame arrived, so the only such error is a failed CRC
    if done[0] == 3 and frame_error is not None:
        return "damaged"
    return None


def talk_serial(port, request_bin: bytes, timeout_s: float, wait_ready: bool = True,
                on_line=None, retries: int = 1, quiet_s: float = LOST_QUIET_S) -> tuple[int | None, str]:
    """The UART request protocol (firmware/tllm_main.c, tllm_frame.c) over an
    open pyserial port: wait for "@TLLM ready" (unless ``wait_ready`` is
    false: the firmware is known to be waiting), send the request, read until
    the "@TLLM done status=N req=CRC" line that names this request (done lines
    of frames the firmware refused before it, such as junk on the line or a
    frame a previous host cut off, are skipped with their output).

    The request's CRC is compared with each done line's req=: our request is
    sent again (``retries`` times, at the next "@TLLM ready") when its done
    line follows "@TLLM error frame:" (it arrived damaged), or when a done
    line names another frame (or req=none) and the "@TLLM ready" after it is
    followed by ``quiet_s`` of silence (the firmware searched what it had
    received and found no request: ours was lost). Then :class:`RequestLost`,
    one line. ``on_line(text)`` sees each console line after the first send.
    Returns (N or None on timeout, console text of this request)."""
    from .protocol import parse_done, request_crc

    mine = request_crc(request_bin)
    deadline = time.monotonic() + timeout_s
    text = bytearray()
    pending = b""
    sends = 0
    fates: list[str] = []  # why each send was not served
    frame_error = None  # the "@TLLM error frame:" line of the frame being reported
    resend_at_ready = False  # ours arrived damaged: send again once the firmware is ready
    armed = False  # another frame's done line: the silence after the next "ready" may mean ours was lost
    quiet_since = None

    def send():
        nonlocal sends
        if sends > retries:
            raise RequestLost(f"the board did not serve the request (CRC {mine:08x}) sent {sends} times: "
                              f"{'; '.join(fates)}; check the serial link (baud rate, cable, noise) and that no "
                              "other program writes to the board's port")
        port.write(request_bin)
        port.flush()
        sends += 1

    if not wait_ready:
        send()
    while time.monotonic() < deadline:
        if quiet_since is not None and time.monotonic() - quiet_since >= quiet_s:
            quiet_since = None
            fates.append("lost (the done line named another frame, then the board waited for input)")
            send()
            text = bytearray()
        chunk = port.readline()
        if not chunk:
            continue
        pending += chunk
        if not pending.endswith(b"\n"):
            continue  # readline() returned at its timeout: the rest of the line is still coming
        line, pending = pending, b""
        quiet_since = None  # a line: the firmware is at work (on what we sent, or on what it already held)
        text += line
        if on_line is not None and sends:
            on_line(line.decode("utf-8", errors="replace").rstrip("\n"))
        if not sends:
            if line.startswith(READY_PREFIX):
                send()
                text = bytearray(line)
            elif line.startswith(b"@TLLM error") and not line.startswith(PER_FRAME_ERRORS):
                break  # the firmware stopped before it could take a request
            continue
        if line.startswith(FRAME_ERROR_PREFIX):
            frame_error = line
        elif line.startswith(DONE_PREFIX):
            done = parse_done(line.decode("utf-8", errors="replace"))
            fate = _request_fate(done, mine, frame_error)
            if fate is None:
                return done[0], text.decode("utf-8", errors="replace")
            if fate == "damaged":
                fates.append(f"damaged ({_line_text(frame_error)})")
                resend_at_ready = True
            else:
                armed = True
            frame_error = None
            text = bytearray()  # another frame's status (junk, a frame dropped before ours): ours is to come
        elif line.startswith(READY_PREFIX):
            if resend_at_ready:
                resend_at_ready = armed = False
                send()
                text = bytearray(line)
            elif armed:
                armed = False
                quiet_since = time.monotonic()
        else:
            armed = False
    return None, text.decode("utf-8", errors="replace")


def _line_text(line: bytes) -> str:
    """A console line for a message: its CRC suffix and the "@TLLM " prefix off."""
    from .protocol import check_line

    body = check_line(line.decode("utf-8", errors="replace").rstrip("\r\n"))[0]
    return body[len("@TLLM "):] if body.startswith("@TLLM ") else body


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
