"""Exact instruction counts under QEMU: build the tllm_icount TCG plugin,
map the firmware's functions to counters, run, and read the snapshots."""
from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..resources import package_file
from ..board import Board
from ..run.plugins import build_plugin
from ..run.qemu import qemu_command

PLUGIN_SOURCE = package_file("bench/tllm_icount.c")
MARKER = "tllm_mark"


@dataclass(frozen=True)
class Snapshots:
    """Counter values at each tllm_mark() call; one counter per function
    (plus "other"), so any two marks give an exact per-function difference."""

    names: tuple[str, ...]
    marks: tuple[tuple[int, ...], ...]
    final: tuple[int, ...]
    exit_code: int
    console: str

    def between(self, a: int, b: int) -> dict[str, int]:
        """Instructions per function executed between mark a and mark b."""
        diff = {n: y - x for n, x, y in zip(self.names, self.marks[a], self.marks[b])}
        return {n: v for n, v in diff.items() if v}

    def total_between(self, a: int, b: int) -> int:
        return sum(self.marks[b]) - sum(self.marks[a])


def function_ranges(elf: Path) -> list[tuple[int, int, str]]:
    """(start, end, name) of every function with a size, sorted by address."""
    out = subprocess.run(["arm-none-eabi-nm", "-S", "--defined-only", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    ranges = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            start = int(parts[0], 16) & ~1  # Thumb bit
            size = int(parts[1], 16)
            if size:
                ranges.append((start, start + size, parts[3]))
    ranges.sort()
    # drop aliases (same start) so ranges stay disjoint
    unique: list[tuple[int, int, str]] = []
    for r in ranges:
        if unique and r[0] < unique[-1][1]:
            continue
        unique.append(r)
    return unique


def run_counted(elf: Path, board: Board, weights: Path | None, request: Path | None,
                timeout_s: float = 600) -> Snapshots:
    ranges = function_ranges(elf)
    marker = [start for start, _, name in ranges if name == MARKER]
    if not marker:
        raise UserError(f"{elf}: no {MARKER}() in the image; rebuild it with this tinyllm-gen")
    plugin = build_plugin(PLUGIN_SOURCE)
    with tempfile.TemporaryDirectory(prefix="tllm-bench-") as tmp:
        t = Path(tmp)
        (t / "ranges.txt").write_text("".join(f"{a:x} {b:x}\n" for a, b, _ in ranges))
        # -icount as well: the firmware prints timer-based counts, and a guest
        # clock tied to instructions makes the whole run, printing included, repeat exactly
        cmd = qemu_command(elf, board, weights, request, t / "uart.txt", count=True)
        kernel_at = cmd.index("-kernel")
        cmd[kernel_at:kernel_at] = ["-plugin", f"{plugin},ranges={t / 'ranges.txt'},marker={marker[0]:x},"
                                               f"out={t / 'counts.txt'}"]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
        if not (t / "counts.txt").exists():
            raise UserError(f"QEMU did not load the counting plugin: {proc.stdout.strip()[-200:]}")
        rows = (t / "counts.txt").read_text().splitlines()
        console = (t / "uart.txt").read_text(errors="replace") if (t / "uart.txt").exists() else ""
    marks, final = [], ()
    for row in rows[1:]:
        kind, _, *vals = row.split()
        if kind == "S":
            marks.append(tuple(map(int, vals)))
        elif kind == "E":
            final = tuple(map(int, vals))
    names = tuple(n for _, _, n in ranges) + ("other",)
    return Snapshots(names, tuple(marks), final, proc.returncode, console)
