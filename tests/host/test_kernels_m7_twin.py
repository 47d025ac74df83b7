"""Host tier: the q4x4 kernels' portable C twin (the code the M7 assembly is
checked against in QEMU) against the numpy reference, bit for bit: short
last groups, partial 4-row tiles, all group sizes, with and without bias."""
import struct
import subprocess

import numpy as np
import pytest

from firmware_harness import build_c_harness

from tinyllm_gen import exact
from tinyllm_gen.quant.formats import pack_q4x4, x16_stream_bytes
from tinyllm_gen.quant.rtn import quantize_q4_rtn

pytestmark = pytest.mark.host

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tllm_kernels_m7.h"
/* stdin: u16 rows, cols, group, has_bias; f32 x[cols]; f32 bias[rows]; stream bytes (rest)
 * stdout: f32 out[rows], then the x16 stream */
int main(void) {
    unsigned short h[4];
    if (fread(h, 2, 4, stdin) != 4) return 2;
    float *x = malloc(4u * h[1]), *bias = malloc(4u * h[0]), *out = malloc(4u * (h[0] + 4u));
    static uint8_t w[1 << 20], xs[1 << 16];
    if (fread(x, 4, h[1], stdin) != h[1] || fread(bias, 4, h[0], stdin) != h[0]) return 2;
    size_t n = fread(w, 1, sizeof w, stdin);
    (void)n;
    tllm_q4x4_matrix m = {w, h[0], h[1], h[2]};
    tllm_quantize_x16(x, h[1], h[2], xs);
    tllm_matvec_q4x4(&m, xs, h[3] ? bias : 0, out);
    fwrite(out, 4, h[0], stdout);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = build_c_harness(tmp_path_factory.mktemp("m7twin"), HARNESS, "tllm_kernels_m7.c")
    return exe


@pytest.mark.parametrize("rows,cols,group,bias", [
    (8, 64, 32, False), (6, 40, 32, True), (13, 172, 64, False), (5, 172, 128, True), (4, 8, 32, False),
])
def test_q4x4_twin_matches_reference(harness, rows, cols, group, bias):
    rng = np.random.default_rng(rows * 1000 + cols)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    t = quantize_q4_rtn("w", w, group)
    x = (rng.standard_normal(cols) * 2).astype(np.float32)
    b = rng.standard_normal(rows).astype(np.float32)
    data = struct.pack("<4H", rows, cols, group, int(bias)) + x.tobytes() + b.tobytes() + pack_q4x4(t)
    got = np.frombuffer(subprocess.run([str(harness)], input=data, capture_output=True, check=True).stdout, "<f4")
    xq, xs = exact.quantize_groups_i8(x, group)
    want = exact.matvec_q4(t.q, t.scales, group, xq, xs, b if bias else None)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_x16_stream_size_formula():
    assert x16_stream_bytes(64, 32) == 2 * (32 * 2 + 8)
    assert x16_stream_bytes(172, 64) == (64 * 2 + 8) * 2 + (48 * 2 + 8)  # 44 -> padded to 48
