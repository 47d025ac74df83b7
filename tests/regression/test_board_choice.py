"""Regression (issue 11): `compile --help` listed only `host | qemu-mps2-an500`
for --board and the option was free text; both commands now offer every
shipped board as a choice."""
import subprocess
import sys

import pytest

from tinyllm_gen.board import board_names


@pytest.mark.parametrize("command", ["compile", "plan"])
def test_board_option_lists_every_shipped_board(command):
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    names = board_names()
    assert {"host", "qemu-mps2-an500", "stm32h750b-dk", "weact-h750"} <= set(names)
    listed = proc.stdout.replace("\n", " ").replace(" ", "")
    assert "[" + "|".join(names) + "]" in listed, proc.stdout
