"""Registry entries of the context shift (compile --context-policy roll,
tllm_kernels.h tllm_kv_shift_*; twins exact.kv_shift_i8 / kv_shift_kv4, the
latter with rotated=True for a Hadamard-rotated int4 cache)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.reference.executor import rope_tables

from . import inputs as I
from .entries_kernels import SHAPE
from .layouts import pack_nibbles, unpack_nibbles
from .spec import Case, In, InOut, Kernel, Scalar, struct_of

F32 = np.float32
H = "tllm_kernels.h"
ROWS = "(to + delta + n_rows) * n_kv_heads"
MOVE = (Scalar("to", "int32_t"), Scalar("delta", "int32_t"), Scalar("n_rows", "int32_t"),
        In("cos", "float", "head_dim // 2"), In("sin", "float", "head_dim // 2"))
CALL = ("shape", "kv", "to", "delta", "n_rows", "cos", "sin")


def _keys(r, nkv, hd, T, pos0):
    """RoPE'd keys at positions pos0 .. pos0 + T - 1, as attention stores them, with an all-zero head."""
    cos, sin = rope_tables(hd, 10000.0, pos0 + T)
    k = np.stack([exact.rope(I.normal(r, nkv * hd, 2.0), nkv, hd, cos[pos0 + t], sin[pos0 + t]) for t in range(T)])
    k = k.reshape(T, nkv, hd)
    k[min(2, T - 1), 0] = 0.0  # scale 0 after quantization: it must stay 0
    return k


def _shift_values(r, nh, nkv, hd, to, delta, n_rows):
    T = to + delta + n_rows
    cos, sin = rope_tables(hd, 10000.0, delta + 1)
    return (dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, scale=exact.attention_scale(hd), to=to, delta=delta,
                 n_rows=n_rows, cos=cos[delta], sin=sin[delta]),
            _keys(r, nkv, hd, T, 0), I.normal(r, (T, nkv, hd), 2.0))


def _i8_case(nh, nkv, hd, to, delta, n_rows, seed):
    def make(r):
        v, k, vals = _shift_values(r, nh, nkv, hd, to, delta, n_rows)
        kq, ks = exact.quantize_rows_i8(k)
        vq, vs = exact.quantize_rows_i8(vals)
        return dict(v, k_cache=kq.reshape(-1), v_cache=vq.reshape(-1), k_scale=ks.reshape(-1), v_scale=vs.reshape(-1))
    return Case(f"h{nh}kv{nkv}hd{hd}-to{to}-d{delta}-n{n_rows}", make, seed)


def _i8_twin(v):
    nkv, hd = v["n_kv_heads"], v["head_dim"]
    kq = np.array(v["k_cache"], np.int8).reshape(-1, nkv, hd)
    vq = np.array(v["v_cache"], np.int8).reshape(-1, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(-1, nkv)
    vs = np.array(v["v_scale"], F32).reshape(-1, nkv)
    exact.kv_shift_i8(kq, ks, vq, vs, v["to"], v["delta"], v["n_rows"], v["cos"], v["sin"])
    return {"k_cache": kq, "v_cache": vq, "k_scale": ks, "v_scale": vs}


SHAPES = [(8, 4, 8), (4, 2, 16), (2, 1, 64), (6, 6, 48)]
MOVES = [(4, 1, 3), (4, 6, 5), (0, 3, 3), (2, 10, 1), (4, 2, 0)]  # (to, delta, n_rows): overlapping, disjoint, none

KV_SHIFT_I8 = Kernel(
    "tllm_kv_shift_i8", H,
    SHAPE + (InOut("k_cache", "int8_t", f"{ROWS} * head_dim"), InOut("v_cache", "int8_t", f"{ROWS} * head_dim"),
             InOut("k_scale", "float", ROWS), InOut("v_scale", "float", ROWS),
             struct_of("kv", "tllm_kv_layer", k="k_cache", v="v_cache", k_scale="k_scale", v_scale="v_scale"))
    + MOVE, CALL, _i8_twin,
    tuple(_i8_case(*s, *m, seed=i * 7 + j) for i, s in enumerate(SHAPES) for j, m in enumerate(MOVES)))


def _kv4_case(nh, nkv, hd, group, to, delta, n_rows, seed, rotated=False, centred=False):
    def make(r):
        v, k, vals = _shift_values(r, nh, nkv, hd, to, delta, n_rows)
        if rotated:  # the cache holds H k (tllm_attention_kv4_hadamard stores it so)
            k = exact.hadamard_heads(k.reshape(k.shape[0], -1), nkv, hd).reshape(k.shape)
        centre = I.normal(r, nkv * hd, 4.0) if centred else np.zeros(0, F32)  # none: NULL
        if centred:  # and H k - c (quant/kv_center.py)
            k = exact.centered(k, centre.reshape(nkv, hd))
        kq, ks = (exact.quantize_rows_i4_clip if rotated else exact.quantize_rows_i4)(k, group)  # as stored
        vq, vs = exact.quantize_rows_i4(vals, group)
        return dict(v, group=group, k_cache=pack_nibbles(kq), v_cache=pack_nibbles(vq), k_scale=ks.reshape(-1),
                    v_scale=vs.reshape(-1), k_center=centre)
    return Case(f"h{nh}kv{nkv}hd{hd}g{group}-to{to}-d{delta}-n{n_rows}{'-centred' if centred else ''}", make, seed)


def _kv4_twin(v, rotated=False):
    nkv, hd, g = v["n_kv_heads"], v["head_dim"], v["group"]
    T = v["to"] + v["delta"] + v["n_rows"]
    kq = unpack_nibbles(v["k_cache"], T * nkv * hd).reshape(T, nkv, hd)
    vq = unpack_nibbles(v["v_cache"], T * nkv * hd).reshape(T, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(T, nkv, hd // g)
    vs = np.array(v["v_scale"], F32).reshape(T, nkv, hd // g)
    centre = v["k_center"] if len(v["k_center"]) else None
    exact.kv_shift_kv4(kq, ks, vq, vs, v["to"], v["delta"], v["n_rows"], v["cos"], v["sin"], g, rotated, centre)
    return {"k_cache": pack_nibbles(kq), "v_cache": pack_nibbles(vq), "k_scale": ks, "v_scale": vs}


KV4_SHAPES = [(4, 2, 16, 16), (8, 4, 8, 8), (2, 1, 64, 32), (6, 6, 48, 24), (2, 1, 34, 17)]
GROUP_ROWS = "(to + delta + n_rows) * n_kv_heads * head_dim // group"

KV_SHIFT_KV4 = Kernel(
    "tllm_kv_shift_kv4", H,
    SHAPE + (InOut("k_cache", "uint8_t", f"{ROWS} * head_dim // 2"),
             InOut("v_cache", "uint8_t", f"{ROWS} * head_dim // 2"),
             InOut("k_scale", "float", GROUP_ROWS), InOut("v_scale", "float", GROUP_ROWS),
             Scalar("group", "uint16_t"), In("k_center", "float", "n_kv_heads * head_dim", nullable=True),
             struct_of("kv", "tllm_kv4_layer", k="k_cache", v="v_cache", k_scale="k_scale", v_scale="v_scale",
                       group="group", k_center="k_center"))
    + MOVE, CALL, _kv4_twin,
    tuple(_kv4_case(*s, *m, seed=i * 7 + j) for i, s in enumerate(KV4_SHAPES) for j, m in enumerate(MOVES)))

KV_SHIFT_KV4_HADAMARD = Kernel(
    "tllm_kv_shift_kv4_hadamard", H, KV_SHIFT_KV4.args, CALL, lambda v: _kv4_twin(v, rotated=True),
    tuple(_kv4_case(*s, *m, seed=i * 7 + j, rotated=True) for i, s in enumerate(KV4_SHAPES) if s[2] & (s[2] - 1) == 0
          for j, m in enumerate(MOVES))
    + tuple(_kv4_case(*s, *m, seed=i * 7 + j + 1, rotated=True, centred=True)  # --kv-center (quant/kv_center.py)
            for i, s in enumerate(KV4_SHAPES) if s[2] & (s[2] - 1) == 0 for j, m in enumerate(MOVES[:3])))

def _k8v4_case(nh, nkv, hd, group, to, delta, n_rows, seed):
    def make(r):
        v, k, vals = _shift_values(r, nh, nkv, hd, to, delta, n_rows)
        kq, ks = exact.quantize_rows_i8(k)
        vq, vs = exact.quantize_rows_i4(vals, group)
        return dict(v, group=group, k_cache=kq.reshape(-1), v_cache=pack_nibbles(vq), k_scale=ks.reshape(-1),
                    v_scale=vs.reshape(-1))
    return Case(f"h{nh}kv{nkv}hd{hd}g{group}-to{to}-d{delta}-n{n_rows}", make, seed)


def _k8v4_twin(v):
    nkv, hd, g = v["n_kv_heads"], v["head_dim"], v["group"]
    T = v["to"] + v["delta"] + v["n_rows"]
    kq = np.array(v["k_cache"], np.int8).reshape(T, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(T, nkv)
    vq = unpack_nibbles(v["v_cache"], T * nkv * hd).reshape(T, nkv, hd)
    vs = np.array(v["v_scale"], F32).reshape(T, nkv, hd // g)
    exact.kv_shift_k8v4(kq, ks, vq, vs, v["to"], v["delta"], v["n_rows"], v["cos"], v["sin"])
    return {"k_cache": kq, "v_cache": pack_nibbles(vq), "k_scale": ks, "v_scale": vs}


KV_SHIFT_K8V4 = Kernel(
    "tllm_kv_shift_k8v4", H,
    SHAPE + (InOut("k_cache", "int8_t", f"{ROWS} * head_dim"), InOut("v_cache", "uint8_t", f"{ROWS} * head_dim // 2"),
             InOut("k_scale", "float", ROWS), InOut("v_scale", "float", GROUP_ROWS),
             Scalar("group", "uint16_t"),
             struct_of("kv", "tllm_kv8v4_layer", k="k_cache", v="v_cache", k_scale="k_scale", v_scale="v_scale",
                       group="group"))
    + MOVE, CALL, _k8v4_twin,
    tuple(_k8v4_case(*s, *m, seed=i * 7 + j) for i, s in enumerate(KV4_SHAPES) for j, m in enumerate(MOVES)))

ENTRIES = (KV_SHIFT_I8, KV_SHIFT_KV4, KV_SHIFT_KV4_HADAMARD, KV_SHIFT_K8V4)
