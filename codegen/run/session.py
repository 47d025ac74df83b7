"""Multi-turn KV reuse from the host's side: a device that keeps its
conversation between requests (firmware/tllm_api.h tllm_continue, the
request's continue form in tllm_request.h).

:class:`DeviceSession` talks the UART protocol (console.talk_serial) to one
firmware that stays up between requests: a flashed board, QEMU's UART on a
socket, or the host build on its standard input (:class:`HostPort`).  It
remembers what the board holds (every id it sent and every token it got
since the last fresh request) and, given a prompt, sends only what extends
that:

* the prompt starts with everything held (a token-for-token prefix match):
  a continue with the rest, named by the held tokens' count and CRC;
* anything else: a fresh request (the board's cache starts over);
* a continue the board refuses (status 6: it holds another history, 7: the
  conversation would not fit): one line through ``note``, and the same
  prompt again as a fresh request.

The tokens are a fresh request's in every case (reference/session.py is the
definition); only the prefill's cost differs.  After each generation the
board's own count and CRC ("@TLLM end ... history=N history_crc=C") are
compared with the host's: any difference forgets the history, so the next
prompt goes fresh."""
from __future__ import annotations

import queue
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..abi import EXIT_CODES
from ..reference.sampler import SamplingOptions
from .console import talk_serial
from .protocol import FirmwareOutput, history_crc, pack_request, parse_output

STATUS_HISTORY, STATUS_CONTEXT_FULL = 6, 7  # abi.EXIT_STATUSES: TLLM_EXIT_HISTORY, TLLM_EXIT_CONTEXT_FULL
assert EXIT_CODES[STATUS_HISTORY].startswith("continue refused") and EXIT_CODES[STATUS_CONTEXT_FULL].startswith(
    "continue refused")


@dataclass(frozen=True)
class SessionTurn:
    status: int | None  # the done line's status (None: no answer in time)
    output: FirmwareOutput
    reused: int  # held tokens the board did not run again (0: a fresh prefill)
    sent: int  # ids the request carried
    refused: str | None = None  # the refused continue's error line, when the turn fell back to a fresh prefill


def _stderr_note(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class DeviceSession:
    """The conversation one firmware holds, as the host tracks it (see the module docstring).  ``port``:
    anything with pyserial's write/flush/readline; ``wait_ready``: the firmware has not printed its first
    "@TLLM ready" yet (a fresh boot) or it already has (a board that waits)."""

    def __init__(self, port, timeout_s: float = 600, wait_ready: bool = True,
                 note: Callable[[str], None] = _stderr_note):
        self.port, self.timeout_s, self.note = port, timeout_s, note
        self._wait_ready = wait_ready
        self.held: list[int] = []  # what the board holds: [] none, or since the last fresh request

    def forget(self) -> None:
        """The next prompt goes fresh (a /reset, a failed link)."""
        self.held = []

    def _talk(self, request: bytes, on_line) -> tuple[int | None, FirmwareOutput]:
        status, text = talk_serial(self.port, request, self.timeout_s, wait_ready=self._wait_ready, on_line=on_line)
        self._wait_ready = False  # from now on the firmware waits in its frame reader after each done line
        return status, parse_output(text)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 on_line=None, flags: int = 0) -> SessionTurn:
        """One generation on ``prompt_ids`` (the whole conversation), a continue where the board holds a
        prefix of it."""
        prompt = list(prompt_ids)
        held = self.held
        refused = None
        if held and len(prompt) >= len(held) and prompt[:len(held)] == held:
            new = prompt[len(held):]
            status, out = self._talk(pack_request(new, max_new_tokens, sampling, flags, history=held), on_line)
            if status in (STATUS_HISTORY, STATUS_CONTEXT_FULL):
                refused = out.error or EXIT_CODES[status]
                self.note(f"[the board refused to continue the conversation ({refused}); sending all "
                          f"{len(prompt)} tokens again]")
            else:
                return self._after(status, out, prompt, len(held) - 1 if status == 0 else 0, len(new))
        status, out = self._talk(pack_request(prompt, max_new_tokens, sampling, flags), on_line)
        return self._after(status, out, prompt, 0, len(prompt), refused)

    def _after(self, status, out: FirmwareOutput, prompt: list[int], reused: int, sent: int,
               refused: str | None = None) -> SessionTurn:
        self.held = prompt + out.generated_ids if status == 0 and out.generated_ids else []
        if self.held and out.history != (len(self.held), history_crc(self.held)):
            self.held = []  # the board says it holds something else (or an older firmware says nothing)
        return SessionTurn(status, out, reused, sent, refused)


class QueuedLinePort:
    """A console whose lines a thread puts on ``self._lines`` (b"": the output
    ended), read as a pyserial port is: readline gives b"" after half a
    second of silence, and at the end ``_ended`` says why there is no more."""

    _lines: "queue.Queue[bytes]"
    _ended: Callable[[], None]  # each port's own: raise OSError saying why its output stopped

    def readline(self) -> bytes:
        try:
            line = self._lines.get(timeout=0.5)
        except queue.Empty:
            return b""
        if not line:
            self._lines.put(b"")  # stays at its end
            self._ended()
        return line


class HostPort(QueuedLinePort):
    """The host build's console as a pyserial-like port: the firmware runs as
    a child process reading requests on standard input and printing console
    lines on standard output, for as long as the port is open."""

    def __init__(self, exe: Path, wrapper: Sequence[str] = ()):
        """``wrapper``: a command the firmware runs under (scripts/measure_multiturn.py: valgrind, to count the
        host build's instructions, which the host board cannot)."""
        self.proc = subprocess.Popen([*wrapper, str(Path(exe).absolute())], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._lines: "queue.Queue[bytes]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")  # end of output

    def write(self, data: bytes) -> int:
        self.proc.stdin.write(data)
        return len(data)

    def flush(self) -> None:
        self.proc.stdin.flush()

    def _ended(self) -> None:
        if self.proc.poll() is not None:
            raise OSError(f"the host firmware exited with status {self.proc.returncode}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
