"""Emulator tier: the Cortex-M7 assembly of the batched prefill kernel in
QEMU. bench/micro.c runs tllm_matmat_q4x4 at P = 2, 3, 4 and exits non-zero
unless each token's output equals tllm_matvec_q4x4 (the assembly matvec)
bit for bit and the P = 4 output equals the portable twin, which the host
tier checks against numpy (tests/host/test_batched_kernels.py). Shapes with
partial 4-row tiles and short last groups, every group size."""
import shutil

import pytest

from tinyllm_gen.bench.bench import bench_kernels

pytestmark = pytest.mark.emu


@pytest.fixture(autouse=True)
def tools():
    for t in ("arm-none-eabi-gcc", "qemu-system-arm", "gcc"):
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


@pytest.mark.parametrize("group", [32, 64, 128])
def test_batched_assembly_equals_p_matvecs(group):
    figures = bench_kernels([(13, 172), (1, 40), (7, 256), (64, 64)], group)
    kinds = {f.kernel for f in figures}
    assert {"matmat_q4x4_m7_p2", "matmat_q4x4_m7_p3", "matmat_q4x4_m7_p4", "matmat_q4x4_c_p4"} <= kinds
    assert all(f.instructions > 0 for f in figures)  # speed: `tinyllm-gen bench`, never asserted
