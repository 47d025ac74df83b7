"""Host tier, int8 KV attention: exp2_nonpos and tllm_attention_i8 against
their exact.py twins bit for bit, including caches past 516 keys where the
integer softmax weights drop below 15 bits to keep the value sums in int32."""
import struct
import subprocess

import numpy as np
import pytest

from firmware_harness import build_c_harness
from tinyllm_gen import exact

pytestmark = pytest.mark.host

# argv[1] "exp2": stdin int32 n, n float32 -> n float32.
# argv[1] "attn": stdin int32 n_heads, n_kv, hd, T; then T x (k[kv*hd], v[kv*hd], q[n_heads*hd])
#   float32 -> every step's output, then the int8 V cache and its scales.
HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tllm_kernels.h"
#include "tllm_math.h"
static int exp2_op(void) {
    int32_t n;
    if (fread(&n, 4, 1, stdin) != 1) return 2;
    float *x = malloc(4u * (size_t)n);
    if (fread(x, 4, (size_t)n, stdin) != (size_t)n) return 2;
    for (int32_t i = 0; i < n; i++) x[i] = exp2_nonpos(x[i]);
    fwrite(x, 4, (size_t)n, stdout);
    return 0;
}
static int attn_op(void) {
    int32_t h[4];
    if (fread(h, 4, 4, stdin) != 4) return 2;
    const int32_t nh = h[0], nkv = h[1], hd = h[2], T = h[3], kvd = nkv * hd;
    int8_t *kc = calloc((size_t)(T * kvd), 1), *vc = calloc((size_t)(T * kvd), 1), *q8 = malloc((size_t)hd);
    float *ks = calloc((size_t)(T * nkv), 4), *vs = calloc((size_t)(T * nkv), 4);
    float *k = malloc(4u * (size_t)kvd), *v = malloc(4u * (size_t)kvd), *q = malloc(4u * (size_t)(nh * hd));
    float *out = malloc(4u * (size_t)(nh * hd)), *scores = malloc(4u * (size_t)T);
    tllm_kv_layer kv = {kc, vc, ks, vs};
    tllm_attention_shape shape = {(uint16_t)nh, (uint16_t)nkv, (uint16_t)hd, 0.35355339f};
    for (int32_t t = 0; t < T; t++) {
        if (fread(k, 4, (size_t)kvd, stdin) != (size_t)kvd || fread(v, 4, (size_t)kvd, stdin) != (size_t)kvd) return 2;
        if (fread(q, 4, (size_t)(nh * hd), stdin) != (size_t)(nh * hd)) return 2;
        tllm_attention_i8(&shape, q, k, v, &kv, t, q8, scores, out);
        fwrite(out, 4, (size_t)(nh * hd), stdout);
    }
    fwrite(vc, 1, (size_t)(T * kvd), stdout);
    fwrite(vs, 4, (size_t)(T * nkv), stdout);
    return 0;
}
int main(int argc, char **argv) {
    if (argc < 2) return 3;
    if (!strcmp(argv[1], "exp2")) return exp2_op();
    if (!strcmp(argv[1], "attn")) return attn_op();
    return 3;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_c_harness(tmp_path_factory.mktemp("attn_i8"), HARNESS, "tllm_kernels.c")


def bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def test_exp2_nonpos_bits_and_accuracy(harness):
    rng = np.random.default_rng(7)
    x = np.concatenate([
        -np.linspace(0, 70, 200_001, dtype=np.float32),         # the whole range and past the floor
        -rng.exponential(1.0, 50_000).astype(np.float32),       # where softmax weights live
        np.float32([-0.0, -0.5, -1.5, -2.5, -63.5, -64.0, -1e-30, -np.float32(1e30)]),
    ]).astype(np.float32)
    got = np.frombuffer(subprocess.run([str(harness), "exp2"], input=struct.pack("<i", len(x)) + x.tobytes(),
                                       capture_output=True, check=True).stdout, "<f4")
    assert (bits(got) == bits(exact.exp2_nonpos(x))).all()
    y = np.maximum(x.astype(np.float64), -64.0)
    assert np.max(np.abs(got / np.exp2(y) - 1)) < 3e-6
    assert got.max() == 1.0 and exact.exp2_nonpos(np.float32([0.0]))[0] == 1.0  # weights never exceed W


def run_attention(harness, nh, nkv, hd, T, seed, v_zero_head=False):
    rng = np.random.default_rng(seed)
    ks = [(rng.standard_normal((nkv, hd)) * 2).astype(np.float32) for _ in range(T)]
    vs = [(rng.standard_normal((nkv, hd)) * 2).astype(np.float32) for _ in range(T)]
    qs = [(rng.standard_normal((nh, hd)) * 3).astype(np.float32) for _ in range(T)]
    qs[2][0] = 0.0  # a zero query: every score 0, uniform weights
    if v_zero_head:  # kv head 0's values all zero: scale 0, output exactly 0
        for v in vs:
            v[0] = 0.0
    data = np.int32([nh, nkv, hd, T]).tobytes()
    for t in range(T):
        data += ks[t].tobytes() + vs[t].tobytes() + qs[t].tobytes()
    raw = subprocess.run([str(harness), "attn"], input=data, capture_output=True, check=True).stdout
    outs = np.frombuffer(raw[:4 * T * nh * hd], "<f4").reshape(T, nh * hd)
    kq, ksc = map(np.stack, zip(*(exact.quantize_rows_i8(k) for k in ks)))
    vq, vsc = map(np.stack, zip(*(exact.quantize_rows_i8(v) for v in vs)))
    return outs, (kq, ksc, vq, vsc), qs, raw[4 * T * nh * hd:]


@pytest.mark.parametrize("nh,nkv,hd", [(8, 4, 8), (4, 2, 16), (6, 6, 48), (2, 1, 6)])
def test_attention_i8_bits(harness, nh, nkv, hd):
    T = 40
    outs, (kq, ksc, vq, vsc), qs, tail = run_attention(harness, nh, nkv, hd, T, seed=hd + nh, v_zero_head=hd == 16)
    scale = np.float32(0.35355339)
    for t in range(T):
        ref = exact.attention_i8(qs[t], kq[:t + 1], ksc[:t + 1], vq[:t + 1], vsc[:t + 1], scale)
        assert (bits(outs[t]) == bits(ref)).all(), t
    assert (np.frombuffer(tail[:T * nkv * hd], np.int8).reshape(vq.shape) == vq).all()
    if hd == 16:
        assert (outs[:, :hd * (nh // nkv)] == 0).all()


def test_attention_i8_past_516_keys_narrows_the_weights(harness):
    """n_keys * 32767 * 127 overflows int32 from 517 keys on: W shrinks."""
    assert exact.attention_weight_limit(516) == 32767 and exact.attention_weight_limit(517) == 32706
    assert exact.attention_weight_limit(4096) == 4128
    nh, nkv, hd, T = 2, 1, 8, 600
    outs, (kq, ksc, vq, vsc), qs, _ = run_attention(harness, nh, nkv, hd, T, seed=3)
    scale = np.float32(0.35355339)
    for t in (0, 1, 515, 516, 517, 599):
        ref = exact.attention_i8(qs[t], kq[:t + 1], ksc[:t + 1], vq[:t + 1], vsc[:t + 1], scale)
        assert (bits(outs[t]) == bits(ref)).all(), t


def test_attention_i8_is_softmax_attention(harness):
    """The integer weights stay within 1e-3 of float attention over the same
    int8 cache: quantizing the weights costs far less than quantizing K/V."""
    nh, nkv, hd, T = 4, 2, 16, 64
    rng = np.random.default_rng(11)
    kq = rng.integers(-127, 128, (T, nkv, hd)).astype(np.int8)
    vq = rng.integers(-127, 128, (T, nkv, hd)).astype(np.int8)
    ksc = rng.uniform(0.005, 0.03, (T, nkv)).astype(np.float32)
    vsc = rng.uniform(0.005, 0.03, (T, nkv)).astype(np.float32)
    q = (rng.standard_normal((nh, hd)) * 2).astype(np.float32)
    scale = np.float32(0.25)
    got = exact.attention_i8(q, kq, ksc, vq, vsc, scale).reshape(nh, hd)
    q8, qsc = exact.quantize_rows_i8(q)
    kv_of = np.arange(nh) // (nh // nkv)
    for h in range(nh):
        kf = kq[:, kv_of[h]].astype(np.float64) * ksc[:, kv_of[h], None]
        vf = vq[:, kv_of[h]].astype(np.float64) * vsc[:, kv_of[h], None]
        s = (kf @ (q8[h].astype(np.float64) * qsc[h])) * float(scale)
        p = np.exp(s - s.max())
        want = (p / p.sum()) @ vf
        assert np.max(np.abs(got[h] - want)) < 1e-3 * np.max(np.abs(vf))
