"""An STM32H750 image under Unicorn kept running between requests, as a
flashed board is: the console USART as a pyserial-like port (write, flush,
readline) for session.DeviceSession, so `serve` and `chat` on an STM32H750
build continue the conversation the firmware holds (multi-turn KV reuse)
instead of booting the image per request.

The emulator runs in a thread from the reset vector; bytes the host writes
are the USART's receive data, console lines go to a queue as the firmware
prints them.  While the firmware polls an empty receiver the thread sleeps a
millisecond per poll (the guest's instruction count, its DWT clock, still
advances per poll, so its frame timeout measures the host's silence)."""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from ..board import Board
from ..errors import UserError
from .session import QueuedLinePort
from .unicorn import UNICORN_INSTALL_HINT, _H750Machine

IDLE_POLL_S = 0.001


class UnicornPort(QueuedLinePort):
    def __init__(self, elf: Path, board: Board, weights_bin: Path | None, timeout_s: float = 3600 * 24):
        try:
            import unicorn as uc
            from unicorn import arm_const as arm
        except ImportError:
            raise UserError(f"running {board.name} firmware needs the unicorn emulator: {UNICORN_INSTALL_HINT}") \
                from None
        self._lines: "queue.Queue[bytes]" = queue.Queue()
        m = self.machine = _H750Machine(uc, arm, board, "V", self._on_line, None)
        m.load(elf, weights_bin, None)
        m.map_registers()
        m.map_mdma()
        m.map_fmc()
        m.map_console(b"")
        m.console.wait_rx = lambda: time.sleep(IDLE_POLL_S)
        m.count_instructions()
        self.error = ""
        self._thread = threading.Thread(target=self._run, args=(timeout_s,), daemon=True)
        self._thread.start()

    def _on_line(self, line: str) -> None:
        self._lines.put((line + "\n").encode("utf-8", errors="surrogateescape"))

    def _run(self, timeout_s: float) -> None:
        self.error = self.machine.run(timeout_s)
        self._lines.put(b"")  # the run ended

    def write(self, data: bytes) -> int:
        if not self._thread.is_alive():
            raise OSError(f"the firmware under Unicorn has stopped{': ' + self.error if self.error else ''}")
        self.machine.console.rx += data  # one bytearray extend: the emulator thread pops from the front
        return len(data)

    def flush(self) -> None:
        pass

    def _ended(self) -> None:
        raise OSError(f"the firmware under Unicorn has stopped{': ' + self.error if self.error else ''}")

    def close(self) -> None:
        if self._thread.is_alive():
            self.machine.mu.emu_stop()
            self._thread.join(timeout=30)
