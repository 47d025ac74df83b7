"""Registry entries of firmware/tllm_kernels_m7.h: the q4x4 weight layout and
the x16 / x16b activation streams.  On the host these run the portable C
(the M7 assembly is behind __ARM_ARCH_7EM__); the same entries drive the
Cortex-M7 build under QEMU (tests/emu/test_kernel_twins_m7.py)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import pack_q4x4, q4x4_bytes_of, unpack_q4x4, x16_stream_bytes

from . import inputs as I
from .layouts import parse_x16, parse_x16b, split_gate_up_tiles, x16_of, x16b_of, x16b_write_token
from .spec import Case, In, InOut, Kernel, Out, Scalar, Scratch, struct_of

F32 = np.float32
H = "tllm_kernels_m7.h"

Q4X4_ARGS = (In("w_stream", "uint8_t", "q4x4_bytes(rows, cols, group)"), Scalar("rows", "uint16_t"),
             Scalar("cols", "uint16_t"), Scalar("group", "uint16_t"),
             struct_of("m", "tllm_q4x4_matrix", stream="w_stream", rows="rows", cols="cols", group="group"))


def q4x4_values(t) -> dict:
    return dict(w_stream=np.frombuffer(pack_q4x4(t), np.uint8), rows=t.rows, cols=t.cols, group=t.group_size)


def q4x4_of(v):
    t = unpack_q4x4(np.asarray(v["w_stream"]).tobytes(), v["rows"], v["cols"], v["group"])
    return t.q, t.scales


def _bias(v):
    b = np.asarray(v["bias"], F32)
    return b if b.size else None


# --- producers of the x16 stream -------------------------------------------------
def _x16_case(n, group, seed, kind="zero-groups", known_difference=""):
    def make(r):
        if kind.startswith("tiny"):
            x = np.concatenate([I.tiny_group(n, group, float(kind[4:])), np.ones(n, F32)])
        elif kind == "extreme":  # 1e-15..1e15: SiLU's gate * up stays finite
            x = I.extreme_vector(r, 2 * n, decades=15)
        else:
            x = I.normal(r, 2 * n, 2.0)
            x[:n] = I.with_zero_groups(x[:n], group)
            x[: min(4, n)] = F32([100.0, -100.0, 88.5, -87.0])[: min(4, n)]  # SiLU's exp edges (gate inputs)
        return dict(x=x[:n], gu=x, w=I.normal(r, n), n=n, group=group, eps=F32(1e-5))
    return Case(f"n{n}g{group}-{kind}", make, seed, known_difference)


X16_SPECS = [(n, g, "zero-groups") for n, g in [(64, 32), (172, 64), (96, 128), (40, 32), (37, 32), (101, 64),
                                                 (5, 128), (128, 128)]] + [(200, 64, "extreme")]
X16_CASES = tuple(_x16_case(n, g, n + g, kind) for n, g, kind in X16_SPECS)
EVEN_X16_CASES = tuple(_x16_case(n, g, n + g, kind) for n, g, kind in X16_SPECS if n % 2 == 0)  # SiLU pairs


def _rmsnorm_of(v):
    return exact.rmsnorm(v["x"], v["w"], v["eps"])


def _silu_pairs_of(v):
    gate, up = split_gate_up_tiles(v["gu"])
    return exact.silu_mul(gate, up)


QUANTIZE_X16 = Kernel(
    "tllm_quantize_x16", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("group", "int32_t"),
                             Out("stream", "uint8_t", "x16_bytes(n, group)")),
    ("x", "n", "group", "stream"), lambda v: {"stream": np.frombuffer(x16_of(v["x"], v["group"]), np.uint8)},
    X16_CASES + (_x16_case(64, 32, 3, "tiny1e-36"), _x16_case(64, 32, 3, "tiny1e-38")))

RMSNORM_X16 = Kernel(
    "tllm_rmsnorm_x16", H, (In("x", "float", "n"), In("w", "float", "n"), Scalar("n", "int32_t"),
                            Scalar("eps", "float"), Scalar("group", "int32_t"),
                            Out("stream", "uint8_t", "x16_bytes(n, group)")),
    ("x", "w", "n", "eps", "group", "stream"),
    lambda v: {"stream": np.frombuffer(x16_of(_rmsnorm_of(v), v["group"]), np.uint8)}, X16_CASES)

SILU_MUL_PAIRS_X16 = Kernel(
    "tllm_silu_mul_pairs_x16", H, (In("gu", "float", "2 * n"), Scalar("n", "int32_t"), Scalar("group", "int32_t"),
                                   Out("stream", "uint8_t", "x16_bytes(n, group)")),
    ("gu", "n", "group", "stream"),
    lambda v: {"stream": np.frombuffer(x16_of(_silu_pairs_of(v), v["group"]), np.uint8)}, EVEN_X16_CASES)


# --- the q4x4 matvec and friends --------------------------------------------------
def _mv_case(rows, cols, group, bias, seed, tie=False, x_scale=2.0, extra=None):
    def make(r):
        t = I.q4_matrix(r, rows, cols, group)
        if tie:
            t = I.with_tied_rows(t, rows - 1, 1)
        x = I.with_zero_groups(I.normal(r, cols, x_scale), group)
        v = dict(q4x4_values(t), x_stream=np.frombuffer(x16_of(x, group), np.uint8),
                 bias=I.normal(r, rows) if bias else np.zeros(0, F32))
        if tie:  # rows 1 and rows-1: equal maxima in different chunks
            v["bias"] = I.tie_bias(r, rows, 1, rows - 1)
        return dict(v, **(extra(r, v) if extra else {}))
    return Case(f"{rows}x{cols}g{group}{'-bias' if bias else ''}{'-tie' if tie else ''}", make, seed)


def _random_shapes(n: int, seed: int):
    """Shapes drawn as the hypothesis test drew them: rows 1..21, cols 1..200, every group size."""
    r = np.random.default_rng(seed)
    return [(int(r.integers(1, 22)), int(r.integers(1, 201)), int(r.choice([32, 64, 128])), bool(r.integers(2)))
            for _ in range(n)]


MV_SHAPES = [(8, 64, 32, False), (6, 40, 32, True), (13, 172, 64, False), (5, 172, 128, True), (4, 8, 32, False),
             (7, 256, 128, True), (1, 20, 32, False), (9, 96, 64, True)] + _random_shapes(12, 2024)
MV_CASES = tuple(_mv_case(r, c, g, b, seed=r * 1000 + c) for r, c, g, b in MV_SHAPES)


def mv_twin(v):
    q, s = q4x4_of(v)
    xq, xs = _x16_quantized(v["x_stream"], v["cols"], v["group"])
    return {"out": exact.matvec_q4(q, s, v["group"], xq, xs, _bias(v))}


def _x16_quantized(stream, n, group):
    """(q, scales) back from an x16 stream (the twin computes on the values)."""
    groups = parse_x16(np.asarray(stream).tobytes(), n, group)
    q = np.concatenate([g.q[: b - a] for g, (a, b) in zip(groups, exact.group_bounds(n, group))]).astype(np.int8)
    return q, np.array([g.scale for g in groups], F32)


MV_ARGS = Q4X4_ARGS + (In("x_stream", "uint8_t", "x16_bytes(cols, group)"), In("bias", "float", "rows", nullable=True))
MATVEC_Q4X4 = Kernel("tllm_matvec_q4x4", H, MV_ARGS + (Out("out", "float", "ceil4(rows)", checked="rows"),),
                     ("m", "x_stream", "bias", "out"), mv_twin, MV_CASES)
MATVEC_Q4X4_C = Kernel("tllm_matvec_q4x4_c", H, MATVEC_Q4X4.args, MATVEC_Q4X4.call, mv_twin, MV_CASES)


def _with_chunk(c: Case, k: int) -> Case:
    return Case(f"{c.label}-chunk{k}", lambda r: dict(c.make(r), chunk_rows=k), c.seed)


ARGMAX_Q4X4 = Kernel(
    "tllm_argmax_q4x4", H, MV_ARGS + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t")),
    ("m", "x_stream", "bias", "chunk", "chunk_rows"),
    lambda v: {"return": int(np.argmax(mv_twin(v)["out"]))},
    (_with_chunk(_mv_case(10, 64, 32, True, 1, tie=True), 4), _with_chunk(_mv_case(13, 100, 64, False, 2, tie=True), 8),
     _with_chunk(_mv_case(9, 40, 32, True, 3), 12), _with_chunk(_mv_case(3, 20, 128, False, 4), 4)),
    returns="int32_t")


def _argmax_from_twin(v):
    """Continue the first-maximum race of rows row0.. (row 0 starts it)."""
    y = mv_twin(v)["out"]
    best, best_v = int(v["best"][0]), F32(v["best_v"][0])
    for i, yi in enumerate(y):
        if v["row0"] + i == 0 or yi > best_v:
            best, best_v = v["row0"] + i, yi
    return {"best": np.int32([best]), "best_v": np.array([best_v], F32)}


def _from_case(rows, row0, chunk, best, best_v, seed, tie=False):
    c = _mv_case(rows, 64, 32, True, seed, tie=tie)

    def make(r):
        v = c.make(r)
        bv = best_v if best_v is not None else F32(np.sort(mv_twin(v)["out"])[rows // 2])  # beaten by some rows
        return dict(v, chunk_rows=chunk, row0=row0, best=np.int32([best]), best_v=np.array([bv], F32))
    return Case(f"{c.label}-row0_{row0}-chunk{chunk}-best{'mid' if best_v is None else best_v}", make, seed)


ARGMAX_Q4X4_FROM = Kernel(
    "tllm_argmax_q4x4_from", H,
    MV_ARGS + (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t"), Scalar("row0", "int32_t"),
               InOut("best", "int32_t", "1"), InOut("best_v", "float", "1")),
    ("m", "x_stream", "bias", "chunk", "chunk_rows", "row0", "best", "best_v"), _argmax_from_twin,
    (_from_case(12, 0, 4, 77, F32(1e30), 1), _from_case(12, 16, 4, 3, None, 2), _from_case(8, 8, 8, 5, F32(1e30), 3),
     _from_case(9, 4, 4, 2, F32(-1e30), 4, tie=True), _from_case(5, 40, 8, 1, None, 5)))


def _tile_case(cols, group):
    return Case(f"cols{cols}g{group}", lambda r: dict(w_stream=np.zeros(0, np.uint8), rows=4, cols=cols, group=group))


TILE_BYTES = Kernel(
    "tllm_q4x4_tile_bytes", H, (In("w_stream", "uint8_t", "0"),) + Q4X4_ARGS[1:], ("m",),
    lambda v: {"return": q4x4_bytes_of(4, v["cols"], v["group"])},
    tuple(_tile_case(c, g) for c, g in [(64, 32), (172, 64), (5, 128), (200, 128), (1, 32), (257, 64)]),
    returns="int32_t")


def _embed_case(rows, cols, group, token, seed):
    def make(r):
        return dict(q4x4_values(I.q4_matrix(r, rows, cols, group)), token=token)
    return Case(f"{rows}x{cols}g{group}-token{token}", make, seed)


def _embed_twin(v):
    q, s = q4x4_of(v)
    return {"out": exact.dequant_row_q4(q[v["token"]], s[v["token"]], v["group"])}


EMBED_Q4X4 = Kernel("tllm_embed_q4x4", H, Q4X4_ARGS + (Scalar("token", "int32_t"), Out("out", "float", "cols")),
                    ("m", "token", "out"), _embed_twin,
                    tuple(_embed_case(r, c, g, t, seed=i) for i, (r, c, g, t) in enumerate(
                        [(13, 172, 64, 0), (13, 172, 64, 5), (13, 172, 64, 12), (7, 100, 32, 6), (2, 5, 128, 1),
                         (4, 256, 128, 3)])))

X16_BYTES = Kernel(
    "tllm_x16_bytes", H, (Scalar("n", "int32_t"), Scalar("group", "int32_t")), ("n", "group"),
    lambda v: {"return": np.int32([x16_stream_bytes(int(n), int(g)) for n, g in zip(v["n"], v["group"])])},
    (Case("n1..300-every-group", lambda r: dict(n=np.tile(np.arange(1, 301), 3),
                                                 group=np.repeat([32, 64, 128], 300))),),
    returns="int32_t", elementwise=True)


# --- batched prefill: x16b ---------------------------------------------------------
def _streams(r, P, n, group, zero_token=1):
    xs = [I.normal(r, n, 2.0) for _ in range(P)]
    if P > 1:
        xs[zero_token][:] = 0.0  # an all-zero token: scale 0
    return xs


def _batch_case(n, group, P, pad, seed):
    def make(r):
        bytes_ = x16_stream_bytes(n, group)
        blob = bytearray(r.integers(0, 256, P * (bytes_ + pad), dtype=np.uint8).tobytes())  # junk between streams
        for p, x in enumerate(_streams(r, P, n, group)):
            blob[p * (bytes_ + pad): p * (bytes_ + pad) + bytes_] = x16_of(x, group)
        return dict(x16=np.frombuffer(bytes(blob), np.uint8), stride=bytes_ + pad, P=P, n=n, group=group)
    return Case(f"n{n}g{group}-P{P}-pad{pad}", make, seed)


def _batch_twin(v):
    n, g, P, stride = v["n"], v["group"], v["P"], v["stride"]
    raw = np.asarray(v["x16"]).tobytes()
    streams = [parse_x16(raw[p * stride:], n, g) for p in range(P)]
    return {"xb": np.frombuffer(x16b_of(streams)[0], np.uint8)}


X16B_SHAPES = [(64, 32), (172, 64), (96, 128), (40, 32), (37, 32), (101, 64)]
X16_BATCH = Kernel(
    "tllm_x16_batch", H, (In("x16", "uint8_t", "P * stride"), Scalar("stride", "int32_t"), Scalar("P", "int32_t"),
                          Scalar("n", "int32_t"), Scalar("group", "int32_t"),
                          Out("xb", "uint8_t", "P * x16_bytes(n, group)")),
    ("x16", "stride", "P", "n", "group", "xb"), _batch_twin,
    tuple(_batch_case(n, g, P, pad, seed=n + g + P) for n, g in X16B_SHAPES for P in (1, 2, 3, 4, 5)
          for pad in ((0, 20) if P in (2, 4) else (0,))))


def _producer_case(n, group, P, p, seed):
    def make(r):
        x = I.normal(r, 2 * n, 2.0)
        if P > 1 and p == 1:
            x[:] = 0.0  # an all-zero token: scale 0
        xb = r.integers(0, 256, P * x16_stream_bytes(n, group), dtype=np.uint8)  # other tokens' bytes: kept
        return dict(x=x[:n], gu=x, w=I.normal(r, n), n=n, group=group, eps=F32(1e-5), P=P, p=p, xb=xb)
    return Case(f"n{n}g{group}-P{P}-p{p}", make, seed)


PRODUCER_SPECS = [(n, g, P, p) for n, g in X16B_SHAPES for P in (1, 2, 3, 4, 5) for p in range(P)]
PRODUCER_CASES = tuple(_producer_case(n, g, P, p, seed=n + g + P) for n, g, P, p in PRODUCER_SPECS)
EVEN_PRODUCER_CASES = tuple(_producer_case(n, g, P, p, seed=n + g + P) for n, g, P, p in PRODUCER_SPECS if n % 2 == 0)


def _producer_twin(y_of):
    def twin(v):
        x16 = x16_of(y_of(v), v["group"])
        return {"xb": x16b_write_token(v["xb"], x16, v["n"], v["group"], v["P"], v["p"])}
    return twin


XB = (Scalar("P", "int32_t"), Scalar("p", "int32_t"), InOut("xb", "uint8_t", "P * x16_bytes(n, group)"))
QUANTIZE_X16B = Kernel(
    "tllm_quantize_x16b", H, (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("group", "int32_t")) + XB,
    ("x", "n", "group", "P", "p", "xb"), _producer_twin(lambda v: v["x"]), PRODUCER_CASES)
RMSNORM_X16B = Kernel(
    "tllm_rmsnorm_x16b", H, (In("x", "float", "n"), In("w", "float", "n"), Scalar("n", "int32_t"),
                             Scalar("eps", "float"), Scalar("group", "int32_t")) + XB,
    ("x", "w", "n", "eps", "group", "P", "p", "xb"), _producer_twin(_rmsnorm_of), PRODUCER_CASES)
SILU_MUL_PAIRS_X16B = Kernel(
    "tllm_silu_mul_pairs_x16b", H, (In("gu", "float", "2 * n"), Scalar("n", "int32_t"),
                                    Scalar("group", "int32_t")) + XB,
    ("gu", "n", "group", "P", "p", "xb"), _producer_twin(_silu_pairs_of), EVEN_PRODUCER_CASES)


def _mm_case(rows, cols, group, bias, P, seed, x_scale=2.0, tag=""):
    def make(r):
        t = I.q4_matrix(r, rows, cols, group)
        xs = [I.normal(r, cols, x_scale) for _ in range(P)]
        xb, _ = x16b_of([parse_x16(x16_of(x, group), cols, group) for x in xs])
        return dict(q4x4_values(t), xb=np.frombuffer(xb, np.uint8), P=P,
                    bias=I.normal(r, rows) if bias else np.zeros(0, F32))
    return Case(f"{rows}x{cols}g{group}{'-bias' if bias else ''}-P{P}{'-zero' if x_scale == 0 else ''}{tag}", make, seed)


def _mm_twin(v):
    q, s = q4x4_of(v)
    tokens = parse_x16b(np.asarray(v["xb"]).tobytes(), v["cols"], v["group"], v["P"])
    xq = np.stack([a for a, _ in tokens])
    xs = np.stack([b for _, b in tokens])
    return {"out": exact.matmat_q4x4(q, s, v["group"], xq, xs, _bias(v)).reshape(-1)}


MM_SHAPES = [(8, 64, 32, False), (6, 40, 32, True), (13, 172, 64, False), (5, 172, 128, True), (4, 8, 32, False),
             (7, 256, 128, True), (1, 20, 32, False), (9, 96, 64, True)]
MM_CASES = (tuple(_mm_case(r, c, g, b, P, seed=r * 1000 + c + P) for P in (1, 2, 3, 4) for r, c, g, b in MM_SHAPES)
            + tuple(_mm_case(9, 100, 32, True, P, seed=P) for P in (5, 8))  # past the assembly's 4: 4 at a time
            + tuple(_mm_case(11, 100, 32, False, P, seed=6, x_scale=0.0) for P in (2, 4))
            + tuple(_mm_case(r, c, g, b, P, seed=r + c + P)
                    for i, (r, c, g, b) in enumerate(_random_shapes(25, 7)) for P in [1 + i % 4])
            # tests/emu/test_batched_qemu.py's shapes (bench/micro.c), every group size
            + tuple(_mm_case(r, c, g, False, P, seed=r * c + g + P, tag="-micro")
                    for r, c in [(13, 172), (1, 40), (7, 256), (64, 64), (6, 20), (5, 3), (2, 8), (3, 200)]
                    for g in (32, 64, 128) for P in (1, 2, 3, 4)))
MM_ARGS = Q4X4_ARGS + (In("xb", "uint8_t", "P * x16_bytes(cols, group)"), Scalar("P", "int32_t"),
                       In("bias", "float", "rows", nullable=True),
                       Out("out", "float", "P * rows + 3", checked="P * rows"))
MATMAT_Q4X4 = Kernel("tllm_matmat_q4x4", H, MM_ARGS, ("m", "xb", "P", "bias", "out"), _mm_twin, MM_CASES)
MATMAT_Q4X4_C = Kernel("tllm_matmat_q4x4_c", H, MM_ARGS, ("m", "xb", "P", "bias", "out"), _mm_twin, MM_CASES)

ENTRIES = (QUANTIZE_X16, RMSNORM_X16, SILU_MUL_PAIRS_X16, MATVEC_Q4X4, MATVEC_Q4X4_C, ARGMAX_Q4X4, ARGMAX_Q4X4_FROM,
           TILE_BYTES, EMBED_Q4X4, X16_BYTES, X16_BATCH, QUANTIZE_X16B, RMSNORM_X16B, SILU_MUL_PAIRS_X16B,
           MATMAT_Q4X4, MATMAT_Q4X4_C)
