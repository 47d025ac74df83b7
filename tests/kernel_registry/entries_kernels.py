"""Registry entries of firmware/tllm_kernels.h (portable C kernels, twins in
codegen/exact.py)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import unpack_q4

from . import inputs as I
from .layouts import pack_nibbles
from .spec import Case, In, InOut, Kernel, Out, Scalar, Scratch, struct_of

F32 = np.float32
H = "tllm_kernels.h"

# A tllm_q4_matrix built from its packed nibbles, scales and dimensions.
Q4_ARGS = (In("w_packed", "uint8_t", "rows * cdiv(cols, 2)"), In("w_scales", "float", "rows * cdiv(cols, group)"),
           Scalar("rows", "uint16_t"), Scalar("cols", "uint16_t"), Scalar("group", "uint16_t"),
           struct_of("m", "tllm_q4_matrix", packed="w_packed", scales="w_scales", rows="rows", cols="cols",
                     group="group"))


def q4_values(t) -> dict:
    return dict(w_packed=np.frombuffer(t.packed(), np.uint8), w_scales=t.scales.reshape(-1), rows=t.rows,
                cols=t.cols, group=t.group_size)


def q4_of(v) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = v["rows"], v["cols"]
    return (unpack_q4(np.asarray(v["w_packed"]).tobytes(), rows, cols),
            np.asarray(v["w_scales"], F32).reshape(rows, -1))


def _expf_cases():
    return (
        Case("linspace-100..100", lambda r: dict(x=np.linspace(-100, 100, 200001, dtype=F32))),
        Case("normal*10", lambda r: dict(x=I.normal(r, 50000, 10.0)), seed=0),
        Case("edges", lambda r: dict(x=I.exp_edges())),
    )


EXPF = Kernel("tllm_expf", H, (Scalar("x", "float"),), ("x",), lambda v: {"return": exact.expf(v["x"])},
              _expf_cases(), returns="float", elementwise=True)


def _embed_case(rows, cols, group, token, seed):
    def make(r):
        return dict(q4_values(I.q4_matrix(r, rows, cols, group)), token=token)
    return Case(f"{rows}x{cols}g{group}-token{token}", make, seed)


def _embed_twin(v):
    q, s = q4_of(v)
    return {"out": exact.dequant_row_q4(q[v["token"]], s[v["token"]], v["group"])}


EMBED_Q4 = Kernel("tllm_embed_q4", H, Q4_ARGS + (Scalar("token", "int32_t"), Out("out", "float", "cols")),
                  ("m", "token", "out"), _embed_twin,
                  tuple(_embed_case(*s, seed=i) for i, s in enumerate(
                      [(5, 64, 32, 0), (5, 64, 32, 4), (7, 100, 32, 6), (3, 171, 64, 1), (2, 5, 128, 1)])))


def _rmsnorm_case(n, scale, eps, label, seed, zero=False):
    def make(r):
        x = np.zeros(n, F32) if zero else (I.extreme_vector(r, n) if scale is None else I.normal(r, n, scale))
        return dict(x=x, w=I.normal(r, n, 1.0), n=n, eps=F32(eps))
    return Case(label, make, seed)


RMSNORM = Kernel("tllm_rmsnorm", H, (In("x", "float", "n"), In("w", "float", "n"), Scalar("n", "int32_t"),
                                     Scalar("eps", "float"), Out("out", "float", "n")),
                 ("x", "w", "n", "eps", "out"), lambda v: {"out": exact.rmsnorm(v["x"], v["w"], v["eps"])},
                 (_rmsnorm_case(1, 6.0, 1e-5, "n1", 1), _rmsnorm_case(7, 6.0, 1e-5, "n7", 2),
                  _rmsnorm_case(512, 6.0, 1e-5, "n512", 3), _rmsnorm_case(64, 1.0, 1e-6, "eps1e-6", 4),
                  _rmsnorm_case(64, None, 1e-5, "extreme", 5), _rmsnorm_case(64, 1e17, 1e-5, "huge-sum", 6),
                  _rmsnorm_case(48, 1.0, 1e-5, "all-zero", 7, zero=True)))


def _quant_i8_case(n, group, seed, kind="zero-groups", known_difference=""):
    def make(r):
        if kind.startswith("tiny"):
            x = I.tiny_group(n, group, float(kind[4:]))
        elif kind == "extreme":
            x = I.extreme_vector(r, n)
        elif kind == "all-zero":
            x = np.zeros(n, F32)
        else:
            x = I.with_zero_groups(I.normal(r, n, 3.0), group)
        return dict(x=x, n=n, group=group)
    return Case(f"n{n}g{group}-{kind}", make, seed, known_difference)


def _quant_i8_twin(v):
    q, s = exact.quantize_groups_i8(v["x"], v["group"])
    return {"q": q, "scales": s}


QUANTIZE_I8 = Kernel(
    "tllm_quantize_i8", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("group", "int32_t"),
                            Out("q", "int8_t", "n"), Out("scales", "float", "cdiv(n, group)")),
    ("x", "n", "group", "q", "scales"), _quant_i8_twin,
    tuple(_quant_i8_case(n, g, seed=n) for n, g in I.VECTOR_SHAPES)
    + (_quant_i8_case(300, 32, 1, "extreme"), _quant_i8_case(70, 64, 2, "all-zero"), _quant_i8_case(64, 32, 3, "tiny1e-36"),
       _quant_i8_case(64, 32, 3, "tiny1e-38")))


def _matvec_case(rows, cols, group, bias, seed, P=None, tie=False):
    def make(r):
        t = I.q4_matrix(r, rows, cols, group)
        if tie:
            t = I.with_tied_rows(t, rows - 1, 1)
        xs_ = [I.activation(r, cols, group, zero_groups=p == 0) for p in range(P or 1)]
        v = dict(q4_values(t), xq=np.concatenate([a[1] for a in xs_]), xs=np.concatenate([a[2] for a in xs_]),
                 bias=I.normal(r, rows) if bias else np.zeros(0, F32))
        if tie:  # rows 1 and rows-1: equal maxima in different chunks
            v["bias"] = I.tie_bias(r, rows, 1, rows - 1)
        if P is not None:
            v["P"] = P
        return v
    label = f"{rows}x{cols}g{group}{'-bias' if bias else ''}{f'-P{P}' if P else ''}{'-tie' if tie else ''}"
    return Case(label, make, seed)


def _bias(v):
    b = np.asarray(v["bias"], F32)
    return b if b.size else None


def matvec_twin(v):
    q, s = q4_of(v)
    return {"out": exact.matvec_q4(q, s, v["group"], v["xq"], v["xs"], _bias(v))}


ACT = (In("xq", "int8_t", "cols"), In("xs", "float", "cdiv(cols, group)"), In("bias", "float", "rows", nullable=True))

MATVEC_Q4 = Kernel("tllm_matvec_q4", H, Q4_ARGS + ACT + (Out("out", "float", "rows"),),
                   ("m", "xq", "xs", "bias", "out"), matvec_twin,
                   tuple(_matvec_case(r, c, g, i % 2 == 1, seed=i) for i, (r, c, g) in enumerate(I.MATRIX_SHAPES)))


def _matmat_twin(v):
    q, s = q4_of(v)
    P, cols, group = v["P"], v["cols"], v["group"]
    xq = np.asarray(v["xq"]).reshape(P, cols)
    xs = np.asarray(v["xs"], F32).reshape(P, -1)
    return {"out": exact.matmat_q4(q, s, group, xq, xs, _bias(v)).reshape(-1)}


MATMAT_Q4 = Kernel(
    "tllm_matmat_q4", H,
    Q4_ARGS + (In("xq", "int8_t", "P * cols"), In("xs", "float", "P * cdiv(cols, group)"), Scalar("P", "int32_t"),
               In("bias", "float", "rows", nullable=True), Out("out", "float", "P * rows")),
    ("m", "xq", "xs", "P", "bias", "out"), _matmat_twin,
    tuple(_matvec_case(r, c, g, b, seed=r + c + P, P=P) for P in (1, 2, 3, 4, 6)
          for r, c, g, b in [(6, 40, 32, True), (13, 172, 64, False), (5, 171, 128, True)]))


def _argmax_twin(v):
    return {"return": int(np.argmax(matvec_twin(v)["out"]))}  # numpy keeps the first maximum, as the C


ARGMAX_Q4 = Kernel(
    "tllm_argmax_q4", H,
    Q4_ARGS + ACT + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t")),
    ("m", "xq", "xs", "bias", "chunk", "chunk_rows"), _argmax_twin,
    tuple(Case(f"{c.label}-chunk{k}", (lambda c, k: lambda r: dict(c.make(r), chunk_rows=k))(c, k), c.seed)
          for c, k in [(_matvec_case(10, 64, 32, True, 1, tie=True), 3), (_matvec_case(10, 64, 32, False, 2, tie=True), 5),
                       (_matvec_case(13, 100, 64, True, 3), 4), (_matvec_case(7, 40, 32, False, 4), 16),
                       (_matvec_case(1, 20, 32, False, 5), 1)]),
    returns="int32_t")


def _rope_case(n_heads, head_dim, pos, seed):
    def make(r):
        half = head_dim // 2
        freq = F32(1.0) / (F32(10000.0) ** (np.arange(half, dtype=F32) * F32(2.0) / F32(head_dim)))
        ang = (F32(pos) * freq).astype(F32)
        return dict(x=I.normal(r, n_heads * head_dim, 3.0), n_heads=n_heads, head_dim=head_dim,
                    cos=np.cos(ang).astype(F32), sin=np.sin(ang).astype(F32))
    return Case(f"h{n_heads}hd{head_dim}-pos{pos}", make, seed)


ROPE = Kernel("tllm_rope", H,
              (InOut("x", "float", "n_heads * head_dim"), Scalar("n_heads", "int32_t"), Scalar("head_dim", "int32_t"),
               In("cos", "float", "head_dim // 2"), In("sin", "float", "head_dim // 2")),
              ("x", "n_heads", "head_dim", "cos", "sin"),
              lambda v: {"x": exact.rope(v["x"], v["n_heads"], v["head_dim"], v["cos"], v["sin"])},
              (_rope_case(8, 8, 0, 1), _rope_case(8, 8, 37, 2), _rope_case(4, 64, 511, 3), _rope_case(2, 48, 5, 4),
               _rope_case(1, 2, 9, 5)))

# --- attention over the int8 and int4 KV caches --------------------------------
SHAPE = (Scalar("n_heads", "uint16_t"), Scalar("n_kv_heads", "uint16_t"), Scalar("head_dim", "uint16_t"),
         Scalar("scale", "float"),
         struct_of("shape", "tllm_attention_shape", n_heads="n_heads", n_kv_heads="n_kv_heads", head_dim="head_dim",
                   scale="scale"))
QKV = (In("q", "float", "n_heads * head_dim"), In("k", "float", "n_kv_heads * head_dim"),
       In("v", "float", "n_kv_heads * head_dim"))
SCRATCH = (Scratch("q8", "int8_t", "head_dim"), Scratch("scores", "float", "pos + 1"),
           Out("out", "float", "n_heads * head_dim"))


def _attention_values(r, nh, nkv, hd, pos, zero_query=False, zero_v_head=False):
    """q, the new k/v, and a cache of pos earlier positions quantized as the firmware stores them."""
    k_rows = I.normal(r, (pos + 1, nkv, hd), 2.0)
    v_rows = I.normal(r, (pos + 1, nkv, hd), 2.0)
    if zero_v_head:  # kv head 0's values all zero: scale 0, its heads' output exactly 0
        v_rows[:, 0] = 0.0
    q = I.normal(r, (nh, hd), 3.0)
    if zero_query:  # every score 0: uniform weights
        q[0] = 0.0
    return dict(n_heads=nh, n_kv_heads=nkv, head_dim=hd, scale=exact.attention_scale(hd), pos=pos,
                q=q.reshape(-1), k=k_rows[pos].reshape(-1), v=v_rows[pos].reshape(-1)), k_rows, v_rows


def _attn_i8_case(nh, nkv, hd, pos, seed, **edge):
    def make(r):
        v, k_rows, v_rows = _attention_values(r, nh, nkv, hd, pos, **edge)
        kq, ks = exact.quantize_rows_i8(k_rows)
        vq, vs = exact.quantize_rows_i8(v_rows)
        kq[pos], ks[pos], vq[pos], vs[pos] = 99, 7.0, -99, 7.0  # stale slot: the kernel must overwrite it
        return dict(v, k_cache=kq.reshape(-1), v_cache=vq.reshape(-1), k_scale=ks.reshape(-1),
                    v_scale=vs.reshape(-1))
    tag = "".join(f"-{k}" for k, on in edge.items() if on)
    return Case(f"h{nh}kv{nkv}hd{hd}-pos{pos}{tag}", make, seed)


def _attn_i8_twin(v):
    nh, nkv, hd, pos = v["n_heads"], v["n_kv_heads"], v["head_dim"], v["pos"]
    kq = np.array(v["k_cache"], np.int8).reshape(pos + 1, nkv, hd)
    vq = np.array(v["v_cache"], np.int8).reshape(pos + 1, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(pos + 1, nkv)
    vs = np.array(v["v_scale"], F32).reshape(pos + 1, nkv)
    kq[pos], ks[pos] = exact.quantize_rows_i8(np.asarray(v["k"], F32).reshape(nkv, hd))
    vq[pos], vs[pos] = exact.quantize_rows_i8(np.asarray(v["v"], F32).reshape(nkv, hd))
    out = exact.attention_i8(np.asarray(v["q"], F32).reshape(nh, hd), kq, ks, vq, vs, F32(v["scale"]))
    return {"out": out, "k_cache": kq, "v_cache": vq, "k_scale": ks, "v_scale": vs}


ATTENTION_I8 = Kernel(
    "tllm_attention_i8", H,
    SHAPE + QKV + (InOut("k_cache", "int8_t", "(pos + 1) * n_kv_heads * head_dim"),
                   InOut("v_cache", "int8_t", "(pos + 1) * n_kv_heads * head_dim"),
                   InOut("k_scale", "float", "(pos + 1) * n_kv_heads"), InOut("v_scale", "float", "(pos + 1) * n_kv_heads"),
                   struct_of("kv", "tllm_kv_layer", k="k_cache", v="v_cache", k_scale="k_scale", v_scale="v_scale"),
                   Scalar("pos", "int32_t")) + SCRATCH,
    ("shape", "q", "k", "v", "kv", "pos", "q8", "scores", "out"), _attn_i8_twin,
    tuple(_attn_i8_case(nh, nkv, hd, pos, seed=hd + nh + pos, zero_v_head=hd == 16, zero_query=pos == 2)
          for nh, nkv, hd in [(8, 4, 8), (4, 2, 16), (6, 6, 48), (2, 1, 6)] for pos in (0, 1, 2, 7, 16, 39))
    # past 516 keys the integer softmax weights narrow below 15 bits (n_keys * W * 127 < 2^31)
    + tuple(_attn_i8_case(2, 1, 8, pos, seed=3) for pos in (0, 1, 515, 516, 517, 599)))


def _quant_i4_case(n, group, seed, kind="zero-group", known_difference=""):
    def make(r):
        x = I.extreme_vector(r, n) if kind == "extreme" else I.normal(r, n, 2.0)
        if kind.startswith("tiny"):
            x = I.tiny_group(n, group, float(kind[4:]))
        if kind == "zero-group":
            x[:group] = 0.0
        if kind == "outlier":  # one large element per group: a clipped scale wins in most groups
            x[::group] *= F32(4.0)
        if kind == "levels":  # every element on the grid of ratio 1: its error is 0, no clip can win
            x = (r.integers(-7, 8, n) * F32(0.25)).astype(F32)
            x[::group] = F32(1.75)
        return dict(x=x, n=n, group=group)
    return Case(f"n{n}g{group}-{kind}", make, seed, known_difference)


def _quant_i4_twin(v):
    q, s = exact.quantize_rows_i4(v["x"], v["group"])
    return {"packed": pack_nibbles(q), "scales": s}


QUANTIZE_I4 = Kernel(
    "tllm_quantize_i4", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("group", "int32_t"),
                            Out("packed", "uint8_t", "n // 2"), Out("scales", "float", "n // group")),
    ("x", "n", "group", "packed", "scales"), _quant_i4_twin,
    tuple(_quant_i4_case(n, g, seed=n) for n, g in [(16, 16), (48, 24), (8, 8), (64, 32), (34, 17), (128, 32)])
    + (_quant_i4_case(96, 32, 1, "extreme"), _quant_i4_case(64, 32, 2, "tiny3e-37"),
       _quant_i4_case(64, 32, 2, "tiny1e-38")))


def _quant_i4_clip_twin(v):
    q, s = exact.quantize_rows_i4_clip(v["x"], v["group"])
    return {"packed": pack_nibbles(q), "scales": s}


QUANTIZE_I4_CLIP = Kernel(
    "tllm_quantize_i4_clip", H, QUANTIZE_I4.args, QUANTIZE_I4.call, _quant_i4_clip_twin,
    QUANTIZE_I4.cases + tuple(_quant_i4_case(n, g, seed=n + 1, kind=kind)
                              for n, g in [(64, 32), (128, 32), (16, 8), (34, 17)] for kind in ("outlier", "levels")))


def _attn_kv4_case(nh, nkv, hd, group, pos, seed, centred=False):
    """centred: the cache's centres (quant/kv_center.py), as large as the keys' common part can be."""
    def make(r):
        v, k_rows, v_rows = _attention_values(r, nh, nkv, hd, pos)
        k_rows[min(3, pos), 0, :group] = 0.0  # an all-zero key group: scale 0, q 0
        kq, ks = exact.quantize_rows_i4(k_rows, group)
        vq, vs = exact.quantize_rows_i4(v_rows, group)
        kq[pos], vq[pos], ks[pos], vs[pos] = 5, -5, 3.0, 3.0  # stale slot
        centres = {"k_center": I.normal(r, nkv * hd, 4.0), "v_center": I.normal(r, nkv * hd, 1.0)} if centred else \
            {"k_center": np.zeros(0, F32), "v_center": np.zeros(0, F32)}  # none: NULL
        return dict(v, group=group, k_cache=pack_nibbles(kq), v_cache=pack_nibbles(vq), k_scale=ks.reshape(-1),
                    v_scale=vs.reshape(-1), **centres)
    return Case(f"h{nh}kv{nkv}hd{hd}g{group}-pos{pos}{'-centred' if centred else ''}", make, seed)


def _attn_kv4_twin(v, quantize_keys=exact.quantize_rows_i4):
    from .layouts import unpack_nibbles
    nh, nkv, hd, pos, g = v["n_heads"], v["n_kv_heads"], v["head_dim"], v["pos"], v["group"]
    kq = unpack_nibbles(v["k_cache"], (pos + 1) * nkv * hd).reshape(pos + 1, nkv, hd)
    vq = unpack_nibbles(v["v_cache"], (pos + 1) * nkv * hd).reshape(pos + 1, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(pos + 1, nkv, hd // g)
    vs = np.array(v["v_scale"], F32).reshape(pos + 1, nkv, hd // g)
    k, val = np.asarray(v["k"], F32), np.asarray(v["v"], F32)
    centred = len(v["k_center"]) > 0
    if centred:  # the cache holds k - c_k and v - c_v, the values' scales clipped too
        k, val = exact.centered(k, v["k_center"]), exact.centered(val, v["v_center"])
    kq[pos], ks[pos] = quantize_keys(k.reshape(nkv, hd), g)
    vq[pos], vs[pos] = (exact.quantize_rows_i4_clip if centred else exact.quantize_rows_i4)(val.reshape(nkv, hd), g)
    out = exact.attention_kv4(np.asarray(v["q"], F32).reshape(nh, hd), kq, ks, vq, vs, F32(v["scale"]), g)
    if centred:
        out = exact.uncentered_output(out, v["v_center"], nh, nkv, hd)
    return {"out": out, "k_cache": pack_nibbles(kq), "v_cache": pack_nibbles(vq), "k_scale": ks, "v_scale": vs}


ATTENTION_KV4 = Kernel(
    "tllm_attention_kv4", H,
    SHAPE + QKV + (InOut("k_cache", "uint8_t", "(pos + 1) * n_kv_heads * head_dim // 2"),
                   InOut("v_cache", "uint8_t", "(pos + 1) * n_kv_heads * head_dim // 2"),
                   InOut("k_scale", "float", "(pos + 1) * n_kv_heads * head_dim // group"),
                   InOut("v_scale", "float", "(pos + 1) * n_kv_heads * head_dim // group"),
                   Scalar("group", "uint16_t"),
                   In("k_center", "float", "n_kv_heads * head_dim", nullable=True),
                   In("v_center", "float", "n_kv_heads * head_dim", nullable=True),
                   struct_of("kv", "tllm_kv4_layer", k="k_cache", v="v_cache", k_scale="k_scale", v_scale="v_scale",
                             group="group", k_center="k_center", v_center="v_center"),
                   Scalar("pos", "int32_t")) + SCRATCH,
    ("shape", "q", "k", "v", "kv", "pos", "q8", "scores", "out"), _attn_kv4_twin,
    tuple(_attn_kv4_case(nh, nkv, hd, g, pos, seed=hd + nh + pos)
          for nh, nkv, hd, g in [(4, 2, 16, 16), (6, 6, 48, 24), (8, 4, 8, 8), (2, 1, 64, 32), (2, 1, 34, 17)]
          for pos in range(9))  # odd groups (17) start mid-byte
    + (_attn_kv4_case(2, 1, 16, 8, 599, seed=4),))


def _attn_k8v4_case(nh, nkv, hd, group, pos, seed, **edge):
    """The 8:4 cache: keys as _attn_i8_case stores them, values as _attn_kv4_case does."""
    def make(r):
        v, k_rows, v_rows = _attention_values(r, nh, nkv, hd, pos, **edge)
        v_rows[min(3, pos), 0, :group] = 0.0  # an all-zero value group: scale 0
        kq, ks = exact.quantize_rows_i8(k_rows)
        vq, vs = exact.quantize_rows_i4(v_rows, group)
        kq[pos], ks[pos], vq[pos], vs[pos] = 99, 7.0, -5, 3.0  # stale slot: the kernel must overwrite it
        return dict(v, group=group, k_cache=kq.reshape(-1), v_cache=pack_nibbles(vq), k_scale=ks.reshape(-1),
                    v_scale=vs.reshape(-1))
    tag = "".join(f"-{k}" for k, on in edge.items() if on)
    return Case(f"h{nh}kv{nkv}hd{hd}g{group}-pos{pos}{tag}", make, seed)


def _attn_k8v4_twin(v):
    from .layouts import unpack_nibbles
    nh, nkv, hd, pos, g = v["n_heads"], v["n_kv_heads"], v["head_dim"], v["pos"], v["group"]
    kq = np.array(v["k_cache"], np.int8).reshape(pos + 1, nkv, hd)
    ks = np.array(v["k_scale"], F32).reshape(pos + 1, nkv)
    vq = unpack_nibbles(v["v_cache"], (pos + 1) * nkv * hd).reshape(pos + 1, nkv, hd)
    vs = np.array(v["v_scale"], F32).reshape(pos + 1, nkv, hd // g)
    kq[pos], ks[pos] = exact.quantize_rows_i8(np.asarray(v["k"], F32).reshape(nkv, hd))
    vq[pos], vs[pos] = exact.quantize_rows_i4(np.asarray(v["v"], F32).reshape(nkv, hd), g)
    out = exact.attention_k8v4(np.asarray(v["q"], F32).reshape(nh, hd), kq, ks, vq, vs, F32(v["scale"]), g)
    return {"out": out, "k_cache": kq, "v_cache": pack_nibbles(vq), "k_scale": ks, "v_scale": vs}


ATTENTION_K8V4 = Kernel(
    "tllm_attention_k8v4", H,
    SHAPE + QKV + (InOut("k_cache", "int8_t", "(pos + 1) * n_kv_heads * head_dim"),
                   InOut("v_cache", "uint8_t", "(pos + 1) * n_kv_heads * head_dim // 2"),
                   InOut("k_scale", "float", "(pos + 1) * n_kv_heads"),
                   InOut("v_scale", "float", "(pos + 1) * n_kv_heads * head_dim // group"),
                   Scalar("group", "uint16_t"),
                   struct_of("kv", "tllm_kv8v4_layer", k="k_cache", v="v_cache", k_scale="k_scale",
                             v_scale="v_scale", group="group"),
                   Scalar("pos", "int32_t")) + SCRATCH,
    ("shape", "q", "k", "v", "kv", "pos", "q8", "scores", "out"), _attn_k8v4_twin,
    # one value group (stories260K's hd 8: pass 1 finds the value scales' maximum) and several (pass 2 does);
    # hd 16 and 64 take the M7's SMLAD paths, 34 with 17-element groups starts groups mid-byte
    tuple(_attn_k8v4_case(nh, nkv, hd, g, pos, seed=hd + nh + pos + 1, zero_v_head=hd == 16, zero_query=pos == 2)
          for nh, nkv, hd, g in [(8, 4, 8, 8), (4, 2, 16, 16), (4, 2, 16, 8), (6, 6, 48, 24), (9, 3, 64, 32),
                                 (2, 1, 34, 17)]
          for pos in (0, 1, 2, 5, 8))
    + tuple(_attn_k8v4_case(2, 1, 16, 8, pos, seed=5) for pos in (515, 516, 517, 599)))


def _hadamard_case(nh, hd, seed, kind="normal"):
    def make(r):
        x = I.normal(r, nh * hd, 3.0)
        if kind == "decades":  # magnitudes 1e-6..1e6 in one head: the sums round, C's order decides the bits
            x = I.extreme_vector(r, nh * hd, decades=6)
        if kind == "zeros":
            x[: hd] = 0.0
        return dict(x=x, n_heads=nh, head_dim=hd)
    return Case(f"h{nh}hd{hd}-{kind}", make, seed)


HADAMARD_HEADS = Kernel(
    "tllm_hadamard_heads", H, (InOut("x", "float", "n_heads * head_dim"), Scalar("n_heads", "int32_t"),
                               Scalar("head_dim", "int32_t")),
    ("x", "n_heads", "head_dim"), lambda v: {"x": exact.hadamard_heads(v["x"], v["n_heads"], v["head_dim"])},
    tuple(_hadamard_case(nh, hd, seed=nh + hd) for nh, hd in [(1, 1), (1, 2), (3, 8), (9, 64), (2, 128), (1, 256)])
    + (_hadamard_case(4, 64, 1, "decades"), _hadamard_case(2, 16, 2, "zeros")))


def _attn_kv4_hadamard_twin(v):
    nh, nkv, hd = v["n_heads"], v["n_kv_heads"], v["head_dim"]
    rotated = dict(v, q=exact.hadamard_heads(v["q"], nh, hd), k=exact.hadamard_heads(v["k"], nkv, hd),
                   scale=exact.rotated_attention_scale(F32(v["scale"]), hd))
    return _attn_kv4_twin(rotated, exact.quantize_rows_i4_clip)  # rotated keys take clipped scales


ATTENTION_KV4_HADAMARD = Kernel(
    "tllm_attention_kv4_hadamard", H, ATTENTION_KV4.args, ATTENTION_KV4.call, _attn_kv4_hadamard_twin,
    tuple(_attn_kv4_case(nh, nkv, hd, g, pos, seed=hd + nh + pos)
          for nh, nkv, hd, g in [(4, 2, 16, 16), (8, 4, 8, 8), (2, 1, 64, 32), (9, 3, 64, 32), (2, 1, 32, 8)]
          for pos in (0, 1, 2, 5, 8))
    + (_attn_kv4_case(2, 1, 16, 8, 599, seed=4),)
    + tuple(_attn_kv4_case(nh, nkv, hd, g, pos, seed=hd + pos + 3, centred=True)  # --kv-center (quant/kv_center.py)
            for nh, nkv, hd, g in [(8, 4, 8, 8), (9, 3, 64, 32), (2, 1, 32, 8)] for pos in (0, 1, 5))
    + (_attn_kv4_case(2, 1, 16, 8, 599, seed=6, centred=True),))


def _vector_case(n, label, seed, make_x):
    return Case(label, lambda r: dict(n=n, **make_x(r, n)), seed)


ADD = Kernel("tllm_add", H, (InOut("a", "float", "n"), In("b", "float", "n"), Scalar("n", "int32_t")),
             ("a", "b", "n"), lambda v: {"a": (np.asarray(v["a"], F32) + np.asarray(v["b"], F32)).astype(F32)},
             (_vector_case(1, "n1", 1, lambda r, n: dict(a=I.normal(r, n), b=I.normal(r, n))),
              _vector_case(7, "n7", 2, lambda r, n: dict(a=I.normal(r, n), b=I.normal(r, n))),
              _vector_case(512, "n512", 3, lambda r, n: dict(a=I.normal(r, n, 8.0), b=I.normal(r, n, 8.0))),
              _vector_case(64, "extreme-overflow", 4,
                           lambda r, n: dict(a=np.full(n, 3e38, F32), b=I.extreme_vector(r, n)))))


def _silu_x(r, n, scale):
    g = I.normal(r, n, scale)
    g[: min(n, 4)] = F32([100.0, -100.0, 88.5, -87.0])[: min(n, 4)]  # exp's clamp and underflow
    return dict(gate=g, up=I.normal(r, n, 2.0))


SILU_MUL = Kernel("tllm_silu_mul", H, (InOut("gate", "float", "n"), In("up", "float", "n"), Scalar("n", "int32_t")),
                  ("gate", "up", "n"), lambda v: {"gate": exact.silu_mul(v["gate"], v["up"])},
                  tuple(_vector_case(n, f"n{n}", n, lambda r, n: _silu_x(r, n, 6.0)) for n in (1, 7, 512))
                  + (_vector_case(300, "wide", 9, lambda r, n: _silu_x(r, n, 40.0)),))


def _softmax_x(r, n, kind):
    if kind == "equal":
        return dict(x=np.full(n, 3.25, F32))
    x = I.normal(r, n, 8.0)
    if kind == "underflow":  # most terms 2^-125 and below: exp's zero branch
        x[1:] -= F32(200.0)
    return dict(x=x)


SOFTMAX = Kernel("tllm_softmax", H, (InOut("x", "float", "n"), Scalar("n", "int32_t")), ("x", "n"),
                 lambda v: {"x": exact.softmax(v["x"])},
                 tuple(_vector_case(n, f"n{n}-{kind}", n, (lambda kind: lambda r, n: _softmax_x(r, n, kind))(kind))
                       for n, kind in [(1, "normal"), (7, "normal"), (512, "normal"), (64, "underflow"),
                                       (33, "equal")]))

ENTRIES = (EXPF, EMBED_Q4, RMSNORM, QUANTIZE_I8, MATVEC_Q4, MATMAT_Q4, ARGMAX_Q4, ROPE, ATTENTION_I8, QUANTIZE_I4,
           QUANTIZE_I4_CLIP, ATTENTION_KV4, HADAMARD_HEADS, ATTENTION_KV4_HADAMARD, ATTENTION_K8V4, ADD, SILU_MUL, SOFTMAX)
