"""`tinyllm-gen flash`: the openocd command for each STM32H750 board, openocd
accepting each board's configuration (when openocd is installed: `make test`
installs it), and one-line errors for what cannot be flashed."""
import shutil
import subprocess

import pytest

from firmware_harness import build_case, need
from tinyllm_gen.errors import UserError
from tinyllm_gen.run.flash_board import flash, flash_command, openocd_config_args
from tinyllm_gen.board import load_board

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("flash")


@pytest.mark.parametrize("board,cfg", [("stm32h750b-dk", "board/stm32h750b-disco.cfg"),
                                       ("weact-h750", "weact-h750/openocd.cfg")])
def test_flash_command(root, board, cfg):
    need("arm-none-eabi-gcc")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, board)
    cmd = flash_command(built.out)
    assert cmd[0] == "openocd" and cmd[1] == "-f" and cmd[2].endswith(cfg)
    elf, weights = built.out / "build" / "firmware.elf", built.out / "weights.bin"
    assert cmd[3:] == ["-c", f"program {{{elf.absolute()}}} verify",
                       "-c", f"program {{{weights.absolute()}}} 0x90000000 verify reset exit"]


@pytest.mark.parametrize("board", ["stm32h750b-dk", "weact-h750"])
def test_openocd_accepts_the_board_configuration(board, tmp_path):
    if shutil.which("openocd") is None:
        pytest.skip("openocd not installed (make test installs it)")
    proc = subprocess.run(["openocd", *openocd_config_args(load_board(board)), "-c", "shutdown"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "shutdown command invoked" in proc.stderr


def test_flash_errors(root, monkeypatch):
    need("arm-none-eabi-gcc")
    need("cmake")
    with pytest.raises(UserError, match="has nothing to flash: it runs under emulation"):
        openocd_config_args(load_board("qemu-mps2-an500"))
    built = build_case(root, "llama-tied-gqa", 32, "weact-h750")
    with pytest.raises(UserError, match="no-such-openocd not found on PATH: install it with `sudo apt-get install"):
        flash(built.out, openocd="no-such-openocd")
    if shutil.which("openocd") is not None:  # no probe on this machine: openocd's own error, in one line
        with pytest.raises(UserError, match=r"^openocd could not flash the board: .*; check the probe"):
            flash(built.out)
