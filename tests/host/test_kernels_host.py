"""Host tier: the C kernels against their numpy twins, bit for bit, over
inputs much wider than a model run visits (edge cases of exp, short groups,
zero groups)."""
import struct
import subprocess

import numpy as np
import pytest

from firmware_harness import build_c_harness

from tinyllm_gen import exact

pytestmark = pytest.mark.host

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tllm_kernels.h"
/* argv[1]: op; stdin: int32 n, int32 param, n float32; stdout: results */
int main(int argc, char **argv) {
    int32_t n, param;
    if (argc < 2 || fread(&n, 4, 1, stdin) != 1 || fread(&param, 4, 1, stdin) != 1) return 2;
    float *x = malloc(4u * (size_t)n), *y = malloc(4u * (size_t)n + 4u * (size_t)n);
    int8_t *q = malloc((size_t)n);
    if (fread(x, 4, (size_t)n, stdin) != (size_t)n) return 2;
    if (!strcmp(argv[1], "exp")) { for (int32_t i = 0; i < n; i++) y[i] = tllm_expf(x[i]); fwrite(y, 4, (size_t)n, stdout); }
    else if (!strcmp(argv[1], "softmax")) { tllm_softmax(x, n); fwrite(x, 4, (size_t)n, stdout); }
    else if (!strcmp(argv[1], "silu")) { float *u = x + n / 2; tllm_silu_mul(x, u, n / 2); fwrite(x, 4, (size_t)(n / 2), stdout); }
    else if (!strcmp(argv[1], "rmsnorm")) { float *w = x + n / 2; tllm_rmsnorm(x, w, n / 2, 1e-5f, y); fwrite(y, 4, (size_t)(n / 2), stdout); }
    else if (!strcmp(argv[1], "quant")) {
        int32_t groups = (n + param - 1) / param;
        tllm_quantize_i8(x, n, param, q, y);
        fwrite(q, 1, (size_t)n, stdout); fwrite(y, 4, (size_t)groups, stdout);
    } else return 3;
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = build_c_harness(tmp_path_factory.mktemp("kernels"), HARNESS, "tllm_kernels.c")

    def call(op: str, x: np.ndarray, param: int = 0) -> bytes:
        data = struct.pack("<ii", len(x), param) + np.asarray(x, "<f4").tobytes()
        return subprocess.run([str(exe), op], input=data, capture_output=True, check=True).stdout

    return call


def bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def test_expf_bits_over_the_whole_range(harness):
    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.linspace(-100, 100, 200001, dtype=np.float32),
        rng.standard_normal(50000).astype(np.float32) * 10,
        np.float32([0.0, -0.0, -86.0, -86.00001, 88.0, 88.5, 1e-30, -1e-30, 0.34657359, -0.34657359]),
    ])
    got = np.frombuffer(harness("exp", x), "<f4")
    assert (bits(got) == bits(exact.expf(x))).all()


def test_softmax_silu_rmsnorm_bits(harness):
    rng = np.random.default_rng(1)
    for n in (1, 7, 512):
        x = (rng.standard_normal(n) * 8).astype(np.float32)
        assert (bits(np.frombuffer(harness("softmax", x), "<f4")) == bits(exact.softmax(x))).all()
        gu = (rng.standard_normal(2 * n) * 6).astype(np.float32)
        got = np.frombuffer(harness("silu", gu), "<f4")
        assert (bits(got) == bits(exact.silu_mul(gu[:n], gu[n:]))).all()
        got = np.frombuffer(harness("rmsnorm", gu), "<f4")
        assert (bits(got) == bits(exact.rmsnorm(gu[:n], gu[n:], 1e-5))).all()


@pytest.mark.parametrize("n,group", [(64, 32), (100, 32), (172, 64), (5, 128)])
def test_activation_quantization_bits(harness, n, group):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:group // 2] = 0.0  # a partly zero first group
    if n > group:
        x[group:2 * group] = 0.0  # an all-zero group: scale 0, q 0
    out = harness("quant", x, group)
    q_ref, s_ref = exact.quantize_groups_i8(x, group)
    assert np.frombuffer(out[:n], np.int8).tolist() == q_ref.tolist()
    assert (bits(np.frombuffer(out[n:], "<f4")) == bits(s_ref)).all()
