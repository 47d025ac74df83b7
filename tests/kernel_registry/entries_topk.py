"""Registry entries of the top-K sampler of `--sampler topk:K` builds:
tllm_topk_push and tllm_sample_topk (firmware/tllm_sampler.h; twins:
codegen/sampler.py top_k_ids and Sampler(top_k=K)) and the classifier loops
of firmware/tllm_topk.h (twins: the layout's matvec twin, then top_k_ids).

The running set (tllm_topk) goes in and out as two INOUT arrays of `cap`
entries plus its count.  Entries a case does not hold are sent as JUNK: a
value above every logit and an id no row has, so a kernel that reads past
its count, writes past it, or keeps a stale count when r0 == 0 empties
the set differs from the twin, which hands the junk back untouched.
"""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.quant.formats import GGUF_BLOCK_BYTES, GGUF_TILED, GGUFMatrix, pack_gguf_tiled, unpack_gguf_tiled
from tinyllm_gen.reference.sampler import DEFAULT_SEED_STATE, MASK64, Sampler, SamplingOptions, top_k_ids

from . import entries_gguf as G
from . import entries_gguf_m7 as GX
from . import entries_kernels as K4
from . import entries_m7 as M7
from . import inputs as I
from .entries_cmsis_sampler import SAMPLER
from .layouts import x16_of
from .spec import Case, In, InOut, Kernel, Scalar, Scratch, struct_of

F32 = np.float32
JUNK_VALUE, JUNK_ID = F32(3.0e38), 0xBEEF

SET_ARGS = (InOut("value", "float", "cap"), InOut("id", "uint16_t", "cap"), Scalar("cap", "int32_t"),
            Scalar("held", "int32_t"),
            struct_of("t", "tllm_topk", write_back=True, pointers=dict(value="value", id="id"), cap="cap", n="held"))


def logits_of(r: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """ties: seven distinct values (ties within and across any chunking), a
    tenth of them -0.0 beside the +0.0s; signed-zeros: only +-0.0 and +-0.5;
    equal: every logit the same; peaked: one logit far above the rest."""
    if kind == "ties":
        x = r.integers(-3, 4, n).astype(F32) * F32(0.75)
        x[r.random(n) < 0.1] = F32(-0.0)
        return x
    if kind == "signed-zeros":
        return r.choice(F32([0.0, -0.0, 0.5, -0.5]), n).astype(F32)
    if kind == "equal":
        return np.full(n, F32(-1.25))
    x = I.normal(r, n, 3.0)
    if kind == "peaked":
        x[n // 3] = F32(60.0)
    return x


def set_of(logits: np.ndarray, cap: int) -> dict:
    """The set a push sequence over `logits` holds: top_k_ids in its order, junk after."""
    ids = top_k_ids(logits, cap)
    value, id_ = np.full(cap, JUNK_VALUE), np.full(cap, JUNK_ID, np.uint16)
    value[: len(ids)], id_[: len(ids)] = np.asarray(logits, F32)[ids], ids
    return dict(value=value, id=id_, cap=cap, held=len(ids))


def stale_set(cap: int, held: int) -> dict:
    """What a set holds before a new token's first push: a count, entries of junk."""
    return dict(value=np.full(cap, JUNK_VALUE), id=np.full(cap, JUNK_ID, np.uint16), cap=cap, held=held)


def set_twin(logits: np.ndarray, v) -> dict:
    """The set's outputs after the rows `logits` were pushed into it."""
    want = set_of(logits, v["cap"])
    return {"value": want["value"], "id": want["id"], "t.cap": np.int32([v["cap"]]), "t.n": np.int32([want["held"]])}


# --- tllm_topk_push ---------------------------------------------------------------
def _push_case(kind, cap, r0, n, seed, stale=3):
    """Rows r0 .. r0+n-1 pushed into the set of rows 0 .. r0-1 (r0 == 0: into a
    stale set of `stale` entries, which the push must empty)."""
    def make(r):
        logits = logits_of(r, kind, r0 + n)
        before = set_of(logits[:r0], cap) if r0 else stale_set(cap, stale)
        return dict(before, x=logits[r0:], n=n, r0=r0, logits=logits)
    return Case(f"{kind}-K{cap}-r0{r0}-n{n}", make, seed)


PUSH = Kernel(
    "tllm_topk_push", "tllm_sampler.h",
    SET_ARGS + (In("x", "float", "n"), Scalar("n", "int32_t"), Scalar("r0", "int32_t")), ("t", "x", "n", "r0"), lambda v: set_twin(v["logits"], v),
    (_push_case("ties", 16, 0, 64, 1, stale=9),  # ties within one chunk, -0.0 beside +0.0, a stale count
     _push_case("signed-zeros", 8, 0, 32, 2, stale=8),
     _push_case("ties", 40, 256, 44, 3),  # 300 rows = 4 x 64 + 44: the short last chunk, ties with the set's floor
     _push_case("ties", 100, 0, 64, 4),  # K larger than the chunk: the set is not full after it
     _push_case("ties", 100, 64, 64, 5),  # the set fills up in the middle of the chunk
     _push_case("normal", 100, 192, 64, 6),
     _push_case("ties", 64, 48, 2, 7),  # K above the vocabulary (50 rows): the set never fills
     _push_case("ties", 1, 128, 64, 8),  # K = 1: the first maximum
     _push_case("equal", 10, 20, 20, 9),  # every row equal to the floor: none enters
     _push_case("signed-zeros", 5, 16, 16, 10),  # +-0.0 rows against a floor of +-0.0
     _push_case("normal", 8, 0, 1, 11, stale=8)))


# --- tllm_sample_topk ---------------------------------------------------------------
def _sample_twin(v):
    return sampled_set_twin(v, lambda s, logits: s.sample(logits))


def sampled_set_twin(v, draw):
    """A top-K sampler's outputs: the token `draw(sampler, logits)` gives, its RNG state and the set's values
    (tllm_sample_topk here, tllm_sample_topk_guess in entries_verify.py)."""
    logits, cap = v["logits"], v["cap"]
    s = Sampler(SamplingOptions(float(v["temperature"]), float(v["top_p"])), top_k=cap)
    s.rng.state = int(v["rng_state"])
    token = draw(s, logits)
    value = np.array(v["value"], F32)
    if v["temperature"] != 0:  # the C overwrites the set's values with their probabilities
        value[: v["held"]] = exact.softmax(logits[top_k_ids(logits, cap)] / s.temperature)
    return {"return": token, "s.rng_state": np.uint64([s.rng.state]), "s.temperature": F32([v["temperature"]]),
            "s.top_p": F32([v["top_p"]]), "value": value, "id": v["id"], "t.cap": np.int32([cap]),
            "t.n": np.int32([v["held"]])}


def _sample_case(vocab, cap, temperature, top_p, state, kind, seed):
    def make(r):
        logits = logits_of(r, kind, vocab)
        return dict(set_of(logits, cap), rng_state=np.uint64(state), temperature=F32(temperature), top_p=F32(top_p),
                    logits=logits)
    return Case(f"v{vocab}-K{cap}-T{temperature}-p{top_p}-{kind}-state{state:x}", make, seed)


SAMPLE_TOPK = Kernel(
    "tllm_sample_topk", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER) + SET_ARGS,
    ("s", "t"), _sample_twin, returns="int32_t", cases=tuple(
        _sample_case(vocab, cap, t, p, state, kind, seed=i) for i, (vocab, cap, t, p, state, kind) in enumerate([
            (300, 40, 0.0, 1.0, 1, "ties"),  # temperature 0: the first candidate, the argmax
            (1000, 1, 0.0, 1.0, 7, "ties"),
            (300, 40, 0.8, 1.0, 5, "ties"),  # top_p = 1: multinomial over the K
            (300, 100, 1.3, 0.9, 99, "normal"),  # top_p < 1: the nucleus within the K
            (257, 8, 0.5, 0.3, 1 << 63, "ties"),
            (300, 40, 0.8, 0.9, 0x9E3779B97F4A7C15, "normal"),  # the same set under several RNG states
            (300, 40, 0.8, 0.9, DEFAULT_SEED_STATE, "normal"),
            (300, 40, 0.8, 0.9, MASK64, "normal"),
            (50, 64, 0.8, 1.0, 0x1234, "ties"),  # K above the vocabulary: n = 50 of 64
            (50, 64, 1.3, 0.9, 3, "normal"),
            (1000, 1, 1.3, 0.9, 7, "normal"),  # K = 1: probability 1
            (64, 32, 1.0, 0.5, 11, "equal"),  # equal probabilities
            (64, 32, 1.0, 1.0, 12, "signed-zeros"),
            (100, 20, 1.0, 0.9, 13, "peaked"),  # one candidate holds the nucleus alone
            (100, 20, 100.0, 0.99, 17, "normal"),  # the largest temperature: nearly uniform
            (100, 20, 0.001, 0.9, 19, "normal"),  # the smallest: logits / T far from 1
        ])))


# --- firmware/tllm_topk.h: the classifier chunk by chunk into the set ---------------
TOPK_H = "tllm_topk.h"
CHUNK = (Scratch("chunk", "float", "chunk_rows"), Scalar("chunk_rows", "int32_t"))


def _tied(rows: int, period: int) -> np.ndarray:
    """Row i is a copy of row i % period (0: no copies): equal logits within
    a chunk and across its boundaries, the set's order decided by id alone."""
    return np.arange(rows) % period if period else np.arange(rows)


def _label(rows, cols, group, bias, chunk, cap, period):
    return f"{rows}x{cols}g{group}{'-bias' if bias else ''}-chunk{chunk}-K{cap}{f'-period{period}' if period else ''}"


def _topk_values(r, v, rows, bias, chunk, cap, period):
    src = _tied(rows, period)
    b = I.normal(r, rows)[src] if bias else np.zeros(0, F32)
    return dict(v, bias=b, chunk_rows=chunk, **stale_set(cap, 5))


def _q4_case(rows, cols, group, bias, chunk, cap, period, seed):
    def make(r):
        t = I.q4_matrix(r, rows, cols, group)
        src = _tied(rows, period)
        t = type(t)(t.name, t.q[src], t.scales[src], t.group_size)
        _, xq, xs = I.activation(r, cols, group)
        return _topk_values(r, dict(K4.q4_values(t), xq=xq, xs=xs), rows, bias, chunk, cap, period)
    return Case(_label(rows, cols, group, bias, chunk, cap, period), make, seed)


def _q4x4_case(rows, cols, group, bias, chunk, cap, period, seed):
    def make(r):
        t = I.q4_matrix(r, rows, cols, group)
        src = _tied(rows, period)
        t = type(t)(t.name, t.q[src], t.scales[src], t.group_size)
        x = I.with_zero_groups(I.normal(r, cols, 2.0), group)
        v = dict(M7.q4x4_values(t), x_stream=np.frombuffer(x16_of(x, group), np.uint8))
        return _topk_values(r, v, rows, bias, chunk, cap, period)
    return Case(_label(rows, cols, group, bias, chunk, cap, period), make, seed)


def _gguf_case(qtype, rows, cols, bias, chunk, cap, period, seed):
    def make(r):
        data = G.gguf_blocks(r, qtype, rows, cols)[_tied(rows, period)]
        xq, xs = exact.quantize_groups_i8(I.with_zero_groups(I.normal(r, cols, 3.0), 32), 32)
        v = dict(blocks=data.reshape(-1), rows=rows, cols=cols, block_bytes=GGUF_BLOCK_BYTES[qtype], xq=xq, xs=xs)
        return _topk_values(r, v, rows, bias, chunk, cap, period)
    return Case(_label(rows, cols, 32, bias, chunk, cap, period), make, seed)


# (rows, cols, group, bias, chunk_rows, K, period): a vocabulary that is not a
# multiple of the chunk, K above a chunk and above the vocabulary, K = 1,
# ties within a chunk (period < chunk) and across chunk boundaries.
SHAPES = [(10, 64, 32, True, 3, 4, 3), (10, 64, 32, False, 4, 16, 0), (37, 64, 32, False, 5, 12, 2),
          (13, 100, 64, False, 16, 1, 0), (50, 96, 32, True, 8, 20, 7), (64, 40, 32, False, 4, 9, 0)]
# q4x4: chunk_rows a multiple of the 4-row tile
SHAPES_Q4X4 = [(10, 64, 32, True, 4, 5, 3), (10, 64, 32, False, 8, 16, 0), (37, 64, 32, False, 12, 12, 2),
               (13, 100, 64, False, 16, 1, 0), (50, 96, 128, True, 8, 20, 7), (64, 40, 32, False, 4, 9, 0)]
# GGUF: whole 32-weight blocks per row
SHAPES_GGUF = [(10, 64, True, 3, 4, 3), (10, 64, False, 4, 16, 0), (37, 32, False, 5, 12, 2), (13, 96, False, 16, 1, 0),
               (50, 96, True, 8, 20, 7), (64, 160, False, 4, 9, 0)]


def _topk_twin(matvec_twin):
    return lambda v: set_twin(matvec_twin(v)["out"], v)


TOPK_Q4 = Kernel("tllm_topk_q4", TOPK_H, K4.Q4_ARGS + K4.ACT + CHUNK + SET_ARGS,
                 ("m", "xq", "xs", "bias", "chunk", "chunk_rows", "t"), _topk_twin(K4.matvec_twin),
                 tuple(_q4_case(*s, seed=i) for i, s in enumerate(SHAPES)))
TOPK_Q4X4 = Kernel("tllm_topk_q4x4", TOPK_H, M7.MV_ARGS + CHUNK + SET_ARGS,
                   ("m", "x_stream", "bias", "chunk", "chunk_rows", "t"), _topk_twin(M7.mv_twin),
                   tuple(_q4x4_case(*s, seed=i) for i, s in enumerate(SHAPES_Q4X4)))


def _gguf_entry(qtype):
    return Kernel(f"tllm_topk_{G.SUFFIX[qtype]}", TOPK_H, G.GGUF_ARGS + G.ACT + CHUNK + SET_ARGS,
                  ("m", "xq", "xs", "bias", "chunk", "chunk_rows", "t"), _topk_twin(G.matvec_twin(qtype)),
                  tuple(_gguf_case(qtype, rows, cols, b, chunk, cap, period, seed=i)
                        for i, (rows, cols, b, chunk, cap, period) in enumerate(SHAPES_GGUF)))


def _ggufx4_case(qtype, rows, cols, bias, chunk, cap, period, seed):
    def make(r):
        v = GX.tiled_values(r, qtype, rows, cols)
        d = unpack_gguf_tiled("w", qtype, v["tiles"].tobytes(), rows, cols).data[_tied(rows, period)]
        v["tiles"] = np.frombuffer(pack_gguf_tiled(GGUFMatrix("w", qtype, d, cols)), np.uint8)
        v["x16"] = np.frombuffer(x16_of(GX.activation(r, cols), 32), np.uint8)
        return _topk_values(r, v, rows, bias, chunk, cap, period)
    return Case(_label(rows, cols, 32, bias, chunk, cap, period), make, seed)


def _ggufx4_entry(qtype):
    return Kernel(f"tllm_topk_{GGUF_TILED[qtype]}", TOPK_H, GX.MV_ARGS + CHUNK + SET_ARGS,
                  ("m", "x16", "bias", "chunk", "chunk_rows", "t"), _topk_twin(GX.matvec_twin(qtype)),
                  tuple(_ggufx4_case(qtype, rows, cols, b, chunk, cap, period, seed=i)
                        for i, (rows, cols, b, chunk, cap, period) in enumerate(SHAPES_GGUFX4)))


# tiled GGUF: chunk_rows a multiple of the 4-row tile
SHAPES_GGUFX4 = [(10, 64, True, 4, 4, 3), (10, 64, False, 8, 16, 0), (37, 32, False, 12, 12, 2),
                 (13, 96, False, 16, 1, 0), (50, 96, True, 8, 20, 7), (64, 160, False, 4, 9, 0)]
ENTRIES = ((PUSH, SAMPLE_TOPK, TOPK_Q4, TOPK_Q4X4) + tuple(_gguf_entry(q) for q in ("Q4_0", "Q4_1", "Q8_0"))
           + tuple(_ggufx4_entry(q) for q in GGUF_TILED))
