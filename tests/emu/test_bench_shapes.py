"""The kernel micro-benchmark sizes its buffers from the shapes: models wider
than 256 (stories15M's 288, SmolLM2-135M's 576x1536) are benchmarked, the
big ones with their buffers in the emulator's 16 MiB external window."""
import shutil

import pytest

from tinyllm_gen.bench.bench import bench_kernels, micro_buffers

pytestmark = pytest.mark.emu


def test_buffers_fit_exactly_the_largest_shape():
    b = micro_buffers([(288, 288), (64, 172)], 32)
    assert b["TLLM_BENCH_MAX_ROWS"] == 288 and b["TLLM_BENCH_MAX_COLS"] == 288
    assert b["TLLM_BENCH_MAX_ELEMS"] == 288 * 288 and b["TLLM_BENCH_Q4_BYTES"] == 288 * 144
    assert b["TLLM_BENCH_SCALES"] == 288 * 9
    # 72 tiles of 4 rows x 9 groups: 4 words per 8 weights + 4 scales = 80 B
    assert b["TLLM_BENCH_Q4X4_BYTES"] == 72 * 9 * 80 + 1024


@pytest.mark.parametrize("shapes", [[(288, 288)], [(1536, 576), (576, 1536)]])
def test_wide_shapes_are_benchmarked_and_bit_exact(shapes):
    for t in ("arm-none-eabi-gcc", "qemu-system-arm", "cmake"):
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")
    figures = bench_kernels(shapes, 32)  # micro.c exits 1 if the M7 assembly and its C twin differ
    by = {(f.shape, f.kernel): f for f in figures}
    for r, c in shapes:
        m7 = by[(f"{r}x{c}", "matvec_q4x4_m7")]
        assert m7.macs == r * c and 1.0 < m7.instructions / m7.macs < 2.0
