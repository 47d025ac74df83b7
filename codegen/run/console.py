"""The UART request protocol from the host's side (firmware/tllm_main.c,
tllm_frame.c): over a flashed board's serial port, or QEMU's UART socket."""
from __future__ import annotations

import time

import serial

from ..errors import UserError
from .protocol import check_line, parse_done, request_crc
from .result import TIMEOUT_EXIT_CODE, RunResult

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
    body = check_line(line.decode("utf-8", errors="replace").rstrip("\r\n"))[0]
    return body[len("@TLLM "):] if body.startswith("@TLLM ") else body


def run_serial(url: str, request_bin: bytes, timeout_s: float = 600, baudrate: int = 115200,
               on_line=None) -> RunResult:
    """Run one request on a board that is already flashed and waiting
    (a /dev/tty* device, or any pyserial URL such as socket://host:port)."""
    try:
        port = serial.serial_for_url(url, baudrate=baudrate, timeout=0.5)
    except (serial.SerialException, ValueError) as e:
        raise UserError(f"cannot open serial port {url}: {e}; check the port name and that the board is connected") \
            from None
    with port:
        status, text = talk_serial(port, request_bin, timeout_s, on_line=on_line)
    return RunResult(status if status is not None else TIMEOUT_EXIT_CODE, text, status is None, [url])
