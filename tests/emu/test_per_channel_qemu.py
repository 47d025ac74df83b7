"""Emulator tier: --quant per-channel on the Cortex-M7, with our C twin and,
when a CMSIS-NN checkout is given (CMSIS_NN_ROOT), with CMSIS-NN's own
arm_convolve_1x1_s4: both == the reference, token for token."""
import os
from pathlib import Path

import pytest

from firmware_harness import GREEDY, TOP_P, assert_identical, build_case, need

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("per-channel-qemu")


@pytest.fixture(autouse=True)
def tools():
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")


def test_twin_on_cortex_m7(root):
    built = build_case(root, "qwen2-bias-untied", 32, "qemu-mps2-an500", quant="per-channel")
    assert_identical(built, 32, GREEDY)
    assert_identical(built, 32, TOP_P)


@pytest.mark.skipif(not os.environ.get("CMSIS_NN_ROOT"),
                    reason="CMSIS_NN_ROOT is not set: CMSIS-NN is in no package registry; point it at a checkout "
                           "of ARM-software/CMSIS-NN to run this test")
@pytest.mark.parametrize("shape", ["llama-tied-gqa", "qwen2-bias-untied"])
def test_cmsis_nn_on_cortex_m7(root, shape):
    cmsis = Path(os.environ["CMSIS_NN_ROOT"])
    built = build_case(root, shape, 32, "qemu-mps2-an500", quant="per-channel", cmsis_nn=cmsis)
    text = (built.out / "build" / "CMakeCache.txt").read_text()
    assert f"CMSIS_NN_ROOT:PATH={cmsis}" in text  # the build really used the checkout
    assert_identical(built, 32, GREEDY)
    assert_identical(built, 32, TOP_P)
