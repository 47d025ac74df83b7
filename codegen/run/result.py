"""What one firmware run produced, whichever runner ran it."""
from __future__ import annotations

from dataclasses import dataclass

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
    limit: str = ""  # what ended a timed-out run: "N guest instructions" or "T s" of wall clock


def decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
