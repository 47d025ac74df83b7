"""Flash a built STM32H750 firmware onto its board with openocd: the ELF into
the internal flash, the weights blob into the QUADSPI NOR at its board.json
address (openocd's stmqspi driver; the board's openocd configuration sets up
the QUADSPI pins in its reset-init event).  Then `tinyllm-gen run OUT
--serial PORT` talks to it.

Which openocd configuration a board uses is data (board.json "flash"): the
DK's ships with openocd (board/stm32h750b-disco.cfg), the WeAct's is ours
(boards/weact-h750/openocd.cfg).  The command line is built here and shown
with --dry-run; the tests check that openocd accepts each configuration."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..build.out import image_path, read_manifest
from ..errors import UserError
from ..board import Board, load_board

OPENOCD_INSTALL_HINT = "sudo apt-get install openocd"


def openocd_config_args(board: Board) -> list[str]:
    """The -f arguments of a board's openocd configuration ("{board}" is the
    board's own directory)."""
    if board.flash is None:
        raise UserError(f"board '{board.name}' has nothing to flash: it runs under emulation "
                        "(`tinyllm-gen run OUT`)")
    here = str(board.directory)
    return [a.replace("{board}", here) for a in board.flash.openocd]


def flash_command(out: Path, openocd: str = "openocd") -> list[str]:
    out = Path(out)
    board = load_board(read_manifest(out)["board"])
    cfg = openocd_config_args(board)
    elf, weights = image_path(out, board), out / "weights.bin"
    if not elf.is_file():
        raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
    if not weights.is_file():
        raise UserError(f"{out}: weights.bin missing; compile again with `tinyllm-gen compile`")
    size, room = weights.stat().st_size, board.weights.max_bytes
    if size > room:
        raise UserError(f"{weights} is {size:,} bytes; {board.name}'s QUADSPI holds {room:,}")
    address = f"0x{board.weights.address:08X}"
    return [openocd, *cfg,
            "-c", f"program {{{elf.absolute()}}} verify",
            "-c", f"program {{{weights.absolute()}}} {address} verify reset exit"]


def flash(out: Path, dry_run: bool = False, openocd: str = "openocd") -> list[str]:
    """Flash OUT's firmware and weights; returns the openocd command."""
    cmd = flash_command(out, openocd)
    if dry_run:
        return cmd
    if shutil.which(openocd) is None:
        raise UserError(f"{openocd} not found on PATH: install it with `{OPENOCD_INSTALL_HINT}`")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise UserError("openocd did not finish flashing within 10 minutes; check the probe and retry") from None
    if proc.returncode != 0:
        last = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.startswith(("Error", "error"))]
        why = last[-1] if last else f"exit status {proc.returncode}"
        raise UserError(f"openocd could not flash the board: {why}; check the probe's USB connection and the "
                        "board's power")
    return cmd
