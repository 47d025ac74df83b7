"""Host tier, int4 KV cache: the C kernels (tllm_quantize_i4, tllm_attention_kv4)
against exact.py bit for bit, and generated firmware with --kv-bits 4 built
with the host gcc against the quantized reference, token for token."""
import subprocess

import numpy as np
import pytest

from firmware_harness import build_c_harness, GREEDY, KV4_CASES, TOP_P, assert_identical, build_case, need
from tinyllm_gen import exact

pytestmark = pytest.mark.host

# stdin: int32 n_heads, n_kv, hd, group, T; then T x (k[kv*hd], v[kv*hd]) float32, q[n_heads*hd]
# stdout: packed k/v and scales of every position, then the attention output.
HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "tllm_kernels.h"
int main(void) {
    int32_t h[5];
    if (fread(h, 4, 5, stdin) != 5) return 2;
    const int32_t nh = h[0], nkv = h[1], hd = h[2], g = h[3], T = h[4], kvd = nkv * hd;
    uint8_t *kc = calloc((size_t)(T * kvd / 2), 1), *vc = calloc((size_t)(T * kvd / 2), 1);
    float *ks = calloc((size_t)(T * kvd / g), 4), *vs = calloc((size_t)(T * kvd / g), 4);
    float *k = malloc(4u * (size_t)kvd), *v = malloc(4u * (size_t)kvd), *q = malloc(4u * (size_t)(nh * hd));
    float *out = malloc(4u * (size_t)(nh * hd)), *scores = malloc(4u * (size_t)T);
    int8_t *q8 = malloc((size_t)hd);
    tllm_kv4_layer kv = {kc, vc, ks, vs, (uint16_t)g};
    tllm_attention_shape shape = {(uint16_t)nh, (uint16_t)nkv, (uint16_t)hd, 0.25f};
    for (int32_t t = 0; t < T; t++) {
        if (fread(k, 4, (size_t)kvd, stdin) != (size_t)kvd || fread(v, 4, (size_t)kvd, stdin) != (size_t)kvd) return 2;
        if (fread(q, 4, (size_t)(nh * hd), stdin) != (size_t)(nh * hd)) return 2;
        tllm_attention_kv4(&shape, q, k, v, &kv, t, q8, scores, out);
        fwrite(out, 4, (size_t)(nh * hd), stdout);
    }
    fwrite(kc, 1, (size_t)(T * kvd / 2), stdout);
    fwrite(ks, 4, (size_t)(T * kvd / g), stdout);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = build_c_harness(tmp_path_factory.mktemp("kv4"), HARNESS, "tllm_kernels.c")
    return exe


@pytest.mark.parametrize("nh,nkv,hd,group", [(4, 2, 16, 16), (6, 6, 48, 24), (8, 4, 8, 8), (2, 1, 64, 32),
                                             (2, 1, 34, 17)])  # odd groups start mid-byte
def test_attention_kv4_bits(harness, nh, nkv, hd, group):
    rng = np.random.default_rng(hd + nh)
    T = 9
    ks = [(rng.standard_normal((nkv, hd)) * 2).astype(np.float32) for _ in range(T)]
    vs = [(rng.standard_normal((nkv, hd)) * 2).astype(np.float32) for _ in range(T)]
    ks[3][0, :group] = 0.0  # an all-zero group: scale 0, q 0
    qs = [(rng.standard_normal((nh, hd)) * 3).astype(np.float32) for _ in range(T)]
    data = np.int32([nh, nkv, hd, group, T]).tobytes()
    for t in range(T):
        data += ks[t].tobytes() + vs[t].tobytes() + qs[t].tobytes()
    raw = subprocess.run([str(harness)], input=data, capture_output=True, check=True).stdout
    outs = np.frombuffer(raw[:4 * T * nh * hd], "<f4").reshape(T, nh * hd)
    kq, ksc = zip(*(exact.quantize_rows_i4(k, group) for k in ks))
    vq, vsc = zip(*(exact.quantize_rows_i4(v, group) for v in vs))
    kq, ksc, vq, vsc = map(np.stack, (kq, ksc, vq, vsc))
    for t in range(T):
        ref = exact.attention_kv4(qs[t], kq[:t + 1], ksc[:t + 1], vq[:t + 1], vsc[:t + 1], np.float32(0.25), group)
        assert (outs[t].view(np.uint32) == ref.view(np.uint32)).all(), t
    packed = np.frombuffer(raw[4 * T * nh * hd:4 * T * nh * hd + T * nkv * hd // 2], np.uint8)
    lo, hi = (packed & 0xF).astype(np.int8), (packed >> 4).astype(np.int8)
    vals = np.stack([lo, hi], axis=1).reshape(-1)
    assert (np.where(vals > 7, vals - 16, vals) == kq.reshape(-1)).all()  # low nibble first
    scales = np.frombuffer(raw[4 * T * nh * hd + T * nkv * hd // 2:], "<f4")
    assert (scales.view(np.uint32) == ksc.reshape(-1).view(np.uint32)).all()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-kv4")


@pytest.mark.parametrize("shape,group", KV4_CASES)
def test_host_build_with_int4_kv_matches_reference(root, shape, group):
    need("cmake")
    built = build_case(root, shape, group, "host", kv_bits=4)
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
