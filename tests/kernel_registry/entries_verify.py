"""Registry entries of speculative decoding: the prompt-lookup draft
(firmware/tllm_draft.h; twin: reference/speculative.lookup_draft), the
sampler at a guessed position (tllm_sample_guess, tllm_sample_topk_guess;
twin: Sampler.sample_guess) and the verification pass's batched classifier
(firmware/tllm_verify.h; twins: each layout's batched matmul twin per
token, then the first maximum or sampler.top_k_ids per token), for q4,
q4x4, llama.cpp's kept blocks and their 4-row tiles (q40x4 / q41x4 / q80x4).

The batched classifier's per-position results go in and out as INOUT
arrays: a race's best and best_v, a set's values, ids and held counts.  A
race or set that row0 == 0 starts comes in as junk (which the kernel must
drop); one that a later row range continues (q4x4's row0 > 0, the weight
stream's chunks) comes in as the rows before it left it, computed here from
logits of those earlier rows."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.quant.formats import GGUF_BLOCK_BYTES
from tinyllm_gen.reference import exact
from tinyllm_gen.reference.sampler import DEFAULT_SEED_STATE, Sampler, SamplingOptions, top_k_ids
from tinyllm_gen.reference.speculative import lookup_draft

from . import entries_gguf as G
from . import entries_gguf_m7 as GM7
from . import entries_kernels as K4
from . import entries_m7 as M7
from . import inputs as I
from .entries_cmsis_sampler import SAMPLER
from .entries_topk import JUNK_ID, JUNK_VALUE, SET_ARGS, logits_of, sampled_set_twin, set_of
from .layouts import parse_x16, x16_of, x16b_of
from .spec import FILL_BYTE, Case, In, InOut, Kernel, Out, Scalar, Scratch

F32 = np.float32
VERIFY_H = "tllm_verify.h"
FILL_U16 = FILL_BYTE * 0x101  # an out entry the kernel leaves alone


# --- tllm_lookup_draft ---------------------------------------------------------------
def _lookup_twin(v):
    tokens = [int(t) for t in v["tokens"]]
    got = lookup_draft(tokens, int(v["k"]))
    out = np.full(max(int(v["k"]), 0), FILL_U16, np.uint16)
    out[: len(got)] = got
    return {"out": out, "return": np.int32(len(got))}


def _lookup_case(label, tokens, k):
    t = np.asarray(tokens, np.uint16)
    return Case(f"{label}-L{len(t)}-k{k}", lambda r: dict(tokens=t, L=len(t), k=k))


def _random_text(seed, n, vocab):
    """A few repeated phrases: suffixes that recur at several places."""
    r = np.random.default_rng(seed)
    phrases = [list(r.integers(0, vocab, r.integers(2, 7))) for _ in range(4)]
    out: list = []
    while len(out) < n:
        out += phrases[r.integers(0, 4)] if r.random() < 0.7 else [int(r.integers(0, vocab))]
    return out[:n]


LOOKUP = Kernel(
    "tllm_lookup_draft", "tllm_draft.h",
    (In("tokens", "uint16_t", "L"), Scalar("L", "int32_t"), Scalar("k", "int32_t"), Out("out", "uint16_t", "k")),
    ("tokens", "L", "k", "out"), _lookup_twin, returns="int32_t", cases=(
        _lookup_case("empty-context", [], 3),
        _lookup_case("one-token", [7], 3),
        _lookup_case("no-match", [1, 2, 3, 4, 5], 3),
        _lookup_case("k0", [1, 2, 1, 2, 1], 0),
        _lookup_case("adjacent-repeat", [9, 9], 3),  # the match ends just before the last token: one guess
        _lookup_case("run", [5, 5, 5, 5, 5, 5], 3),
        _lookup_case("bigram-beats-later-unigram", [1, 2, 3, 4, 9, 2, 7, 1, 2], 3),
        _lookup_case("latest-of-equal", [4, 6, 1, 4, 8, 2, 4], 2),  # two single-token matches: the later wins
        _lookup_case("longest-capped", [1, 2, 3, 4, 5, 6, 0, 2, 3, 4, 5, 9, 9, 2, 3, 4, 5], 3),
        _lookup_case("whole-tail", [3, 1, 2, 3], 3),  # the guesses run up to the context's last token
        _lookup_case("guesses-stop-at-context-end", [4, 5, 9, 6, 9], 3),  # two tokens follow the match
        _lookup_case("max-id", [65535, 0, 65535, 1, 65535], 3),
        _lookup_case("text-400", _random_text(1, 400, 50), 3),
        _lookup_case("text-512-k1", _random_text(2, 512, 20), 1),
        _lookup_case("text-97-k3", _random_text(3, 97, 300), 3),
    ))


# --- tllm_sample_guess / tllm_sample_topk_guess -----------------------------------------
def _guess_twin(v):
    s = Sampler(SamplingOptions(float(v["temperature"]), float(v["top_p"])))
    s.rng.state = int(v["rng_state"])
    logits = np.asarray(v["logits"], F32)
    token = s.sample_guess(logits, int(v["g"]))
    after = logits if v["temperature"] == 0 else exact.softmax(logits / F32(v["temperature"]))
    return {"logits": after, "return": token, "s.rng_state": np.uint64([s.rng.state]),
            "s.temperature": F32([v["temperature"]]), "s.top_p": F32([v["top_p"]])}


def _guess_logits(r, n, kind):
    x = I.normal(r, n, 4.0)
    if kind == "tie":
        x[:] = F32(1.5)
    elif kind == "peaked":  # one token holds nearly all the mass
        x[n // 3] = F32(60.0)
    return x


def _guess_case(n, t, p, state, kind, guess, seed):
    """guess: "top" (the argmax: mostly kept), "low" (the least likely: mostly
    resampled), "peak" (the peaked token), "none" (-1), or an id."""
    def make(r):
        x = _guess_logits(r, n, kind)
        g = {"top": int(np.argmax(x)), "low": int(np.argmin(x)), "peak": n // 3, "none": -1}.get(guess, guess)
        return dict(rng_state=np.uint64(state), temperature=F32(t), top_p=F32(p), logits=x, n=n, g=g)
    return Case(f"n{n}-T{t}-p{p}-{kind}-g{guess}-state{state:x}", make, seed)


GUESS_CASES = [  # (n, temperature, top_p, rng state, logits, guess)
    (512, 0.0, 1.0, 1, "normal", "top"), (512, 0.0, 1.0, 1, "normal", "low"), (64, 0.0, 1.0, 3, "tie", 5),
    (512, 0.8, 1.0, 0x1234, "normal", "top"), (512, 0.8, 1.0, 0x1234, "normal", "low"),
    (512, 1.0, 0.9, 0x9E3779B97F4A7C15, "normal", "top"), (512, 1.0, 0.9, 0x9E3779B97F4A7C15, "normal", "low"),
    (300, 0.9, 0.85, DEFAULT_SEED_STATE, "normal", "top"), (300, 2.0, 0.85, 77, "normal", 17),
    (100, 1.0, 0.9, 5, "peaked", "peak"), (100, 1.0, 0.9, 5, "peaked", 2), (100, 1.0, 1.0, 6, "peaked", "peak"),
    (100, 1.0, 1.0, 6, "peaked", 99), (64, 1.0, 0.5, 7, "tie", 3), (64, 1.0, 1.0, 7, "tie", 63),
    (2, 0.5, 0.9, 99, "normal", 0), (2, 0.5, 1.0, 99, "normal", 1), (100, 100.0, 0.99, 11, "normal", 50),
    (100, 0.001, 0.9, 13, "normal", "top"), (100, 0.7, 0.9, 21, "normal", "none"),
] + [(257, 1.0, p, 1000 + s, "normal", g) for s in range(6) for p in (1.0, 0.95) for g in ("top", 4)]

SAMPLE_GUESS = Kernel(
    "tllm_sample_guess", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER,
     InOut("logits", "float", "n"), Scalar("n", "int32_t"), Scratch("idx", "uint16_t", "n"), Scalar("g", "int32_t")),
    ("s", "logits", "n", "idx", "g"), _guess_twin, returns="int32_t",
    cases=tuple(_guess_case(*c, seed=i) for i, c in enumerate(GUESS_CASES)))


def _topk_guess_twin(v):
    return sampled_set_twin(v, lambda s, logits: s.sample_guess(logits, int(v["g"])))


def _topk_guess_case(vocab, cap, t, p, state, kind, guess, seed):
    """guess: "first" (the set's first), "last" (its last), "outside" (a token not in the set), "none" or an id."""
    def make(r):
        logits = logits_of(r, kind, vocab)
        ids = top_k_ids(logits, cap)
        rest = np.setdiff1d(np.arange(vocab), ids)
        g = {"first": int(ids[0]), "last": int(ids[-1]), "outside": int(rest[0]) if rest.size else int(ids[-1]),
             "none": -1}.get(guess, guess)
        return dict(set_of(logits, cap), rng_state=np.uint64(state), temperature=F32(t), top_p=F32(p),
                    logits=logits, g=g)
    return Case(f"v{vocab}-K{cap}-T{t}-p{p}-{kind}-g{guess}-state{state:x}", make, seed)


SAMPLE_TOPK_GUESS = Kernel(
    "tllm_sample_topk_guess", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER) + SET_ARGS
    + (Scalar("g", "int32_t"),),
    ("s", "t", "g"), _topk_guess_twin, returns="int32_t", cases=tuple(
        _topk_guess_case(*c, seed=i) for i, c in enumerate([
            (300, 40, 0.0, 1.0, 1, "ties", "first"), (300, 40, 0.0, 1.0, 1, "ties", "last"),
            (300, 40, 0.8, 1.0, 5, "ties", "first"), (300, 40, 0.8, 1.0, 5, "ties", "last"),
            (300, 40, 0.8, 1.0, 5, "ties", "outside"), (300, 100, 1.3, 0.9, 99, "normal", "first"),
            (300, 100, 1.3, 0.9, 99, "normal", "last"), (257, 8, 0.5, 0.3, 1 << 63, "ties", "last"),
            (50, 64, 0.8, 1.0, 0x1234, "ties", "first"), (50, 64, 1.3, 0.9, 3, "normal", "none"),
            (1000, 1, 1.3, 0.9, 7, "normal", "first"), (1000, 1, 1.3, 0.9, 7, "normal", "outside"),
            (64, 32, 1.0, 0.5, 11, "equal", "last"), (100, 20, 1.0, 0.9, 13, "peaked", "first"),
            (100, 20, 1.0, 0.9, 13, "peaked", "last"), (100, 20, 100.0, 0.99, 17, "normal", "last"),
        ] + [(300, 16, 1.0, p, 2000 + s, "normal", g) for s in range(5) for p in (1.0, 0.8) for g in ("first", "last")])))


# --- firmware/tllm_verify.h: the classifier batched over P positions ------------------------
def _race(y: np.ndarray, row0: int, best: int, best_v) -> tuple[int, np.float32]:
    """The first-maximum race over rows row0.. (row 0 starts it), as argmax_chunk."""
    for i, yi in enumerate(y):
        if row0 + i == 0 or yi > best_v:
            best, best_v = row0 + i, yi
    return best, best_v


def _argmax_twin(logits_of_case):
    def twin(v):
        y = logits_of_case(v)  # [P, rows]
        row0 = int(v.get("row0", 0))
        res = [_race(y[p], row0, int(v["best"][p]), F32(v["best_v"][p])) for p in range(v["P"])]
        return {"best": np.int32([b for b, _ in res]), "best_v": np.array([bv for _, bv in res], F32)}
    return twin


def _topk_twin(logits_of_case):
    def twin(v):
        y, cap = logits_of_case(v), v["cap"]
        earlier = v["earlier"]  # [P, row0]: the logits of the rows before this range
        sets = [set_of(np.concatenate([earlier[p], y[p]]), cap) for p in range(v["P"])]
        return {"value": np.concatenate([s["value"] for s in sets]), "id": np.concatenate([s["id"] for s in sets]),
                "held": np.int32([s["held"] for s in sets])}
    return twin


def _start(v: dict, P: int, cap: int | None, row0: int, r) -> dict:
    """The race or sets the call continues: junk when row0 == 0 (the kernel
    starts them), else what rows 0 .. row0 - 1 of logits drawn here leave."""
    earlier = I.normal(r, (P, row0), 3.0).reshape(P, row0)
    if cap is None:
        if row0 == 0:
            return dict(v, best=np.full(P, 77, np.int32), best_v=np.full(P, F32(1e30)), earlier=earlier)
        res = [_race(earlier[p], 0, 0, F32(0)) for p in range(P)]
        return dict(v, best=np.int32([b for b, _ in res]), best_v=np.array([bv for _, bv in res], F32),
                    earlier=earlier)
    if row0 == 0:
        return dict(v, value=np.full(P * cap, JUNK_VALUE), id=np.full(P * cap, JUNK_ID, np.uint16),
                    held=np.full(P, 3, np.int32), cap=cap, earlier=earlier)
    sets = [set_of(earlier[p], cap) for p in range(P)]
    return dict(v, value=np.concatenate([s["value"] for s in sets]), id=np.concatenate([s["id"] for s in sets]),
                held=np.int32([s["held"] for s in sets]), cap=cap, earlier=earlier)


def _tied(t, tie: bool):
    return I.with_tied_rows(t, t.rows - 1, 1) if tie and t.rows > 2 else t


def _q4_batch(r, rows, cols, group, P, bias, tie):
    t = _tied(I.q4_matrix(r, rows, cols, group), tie)
    acts = [I.activation(r, cols, group, zero_groups=p == 0) for p in range(P)]
    return dict(K4.q4_values(t), xq=np.concatenate([a[1] for a in acts]), xs=np.concatenate([a[2] for a in acts]),
                P=P, bias=(I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows)) if bias else
                np.zeros(0, F32))


def _q4x4_batch(r, rows, cols, group, P, bias, tie):
    t = _tied(I.q4_matrix(r, rows, cols, group), tie)
    xs = [I.with_zero_groups(I.normal(r, cols, 2.0), group) if p == 0 else I.normal(r, cols, 2.0) for p in range(P)]
    xb, _ = x16b_of([parse_x16(x16_of(x, group), cols, group) for x in xs])
    return dict(M7.q4x4_values(t), xb=np.frombuffer(xb, np.uint8), P=P,
                bias=(I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows)) if bias else np.zeros(0, F32))


def _gguf_batch(qtype):
    def make(r, rows, cols, group, P, bias, tie):
        data = G.gguf_blocks(r, qtype, rows, cols)
        if tie:
            data[rows - 1] = data[1]
        qs = [exact.quantize_groups_i8(I.with_zero_groups(I.normal(r, cols, 3.0), 32), 32) for _ in range(P)]
        return dict(blocks=data.reshape(-1), rows=rows, cols=cols, block_bytes=GGUF_BLOCK_BYTES[qtype],
                    xq=np.concatenate([a for a, _ in qs]), xs=np.concatenate([s for _, s in qs]), P=P,
                    bias=(I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows)) if bias else
                    np.zeros(0, F32))
    return make


def _ggufx4_batch(qtype):
    def make(r, rows, cols, group, P, bias, tie):
        v = GM7.tiled_values(r, qtype, rows, cols, tie)
        streams = [x16_of(GM7.activation(r, cols), GM7.GROUP) for _ in range(P)]
        xb = streams[0] if P == 1 else x16b_of([parse_x16(s, cols, GM7.GROUP) for s in streams])[0]
        return dict(v, xb=np.frombuffer(xb, np.uint8), P=P, streams=streams,
                    bias=(I.tie_bias(r, rows, 1, rows - 1) if tie else I.normal(r, rows)) if bias else
                    np.zeros(0, F32))
    return make


def _q4_logits(v):
    q, s = K4.q4_of(v)
    P, cols = v["P"], v["cols"]
    b = np.asarray(v["bias"], F32)
    xq, xs = np.asarray(v["xq"]).reshape(P, cols), np.asarray(v["xs"], F32).reshape(P, -1)
    return exact.matmat_q4(q, s, v["group"], xq, xs, b if b.size else None).reshape(P, -1)


def _q4x4_logits(v):
    return np.asarray(M7._mm_twin(v)["out"], F32).reshape(v["P"], -1)


def _gguf_logits(qtype):
    return lambda v: np.asarray(G.matmat_twin(qtype)(v)["out"], F32).reshape(v["P"], -1)


def _ggufx4_logits(qtype):
    return lambda v: np.asarray(GM7.matmat_twin(qtype)(v)["out"], F32).reshape(v["P"], -1)


# (rows, cols, group, P, bias, chunk_rows, tie, cap, row0): chunks that do not divide the rows, ties across
# chunk boundaries, P = 1 (the matvec) to 4, K above a chunk and above the vocabulary, K = 1
SHAPES = [(10, 64, 32, 2, True, 3, True, 4, 0), (10, 64, 32, 4, False, 4, False, 16, 0),
          (37, 64, 32, 3, False, 5, False, 12, 0), (13, 100, 64, 1, True, 16, True, 1, 0),
          (50, 96, 32, 4, True, 8, False, 20, 0), (64, 40, 32, 2, False, 64, False, 9, 0),
          (9, 128, 128, 3, False, 4, True, 3, 0)]
SHAPES_Q4X4 = [(10, 64, 32, 2, True, 4, True, 4, 0), (10, 64, 32, 4, False, 8, False, 16, 0),
               (37, 64, 32, 3, False, 12, False, 12, 0), (13, 100, 64, 1, True, 16, True, 1, 0),
               (50, 96, 128, 4, True, 8, False, 20, 0), (64, 40, 32, 2, False, 64, False, 9, 0),
               (12, 64, 32, 3, True, 4, False, 5, 16), (8, 64, 64, 4, False, 8, True, 6, 40),  # a later row range
               (9, 172, 64, 2, True, 4, False, 50, 12)]
SHAPES_GGUF = [(10, 64, 32, 2, True, 3, True, 4, 0), (10, 96, 32, 4, False, 4, False, 16, 0),
               (37, 32, 32, 3, False, 5, False, 12, 0), (13, 96, 32, 1, True, 16, True, 1, 0),
               (50, 160, 32, 4, True, 8, False, 20, 0)]

SHAPES_GGUFX4 = [(10, 64, 32, 2, True, 4, True, 4, 0), (10, 96, 32, 4, False, 8, False, 16, 0),
                 (37, 64, 32, 3, False, 12, False, 12, 0), (13, 96, 32, 1, True, 16, True, 1, 0),
                 (12, 64, 32, 3, True, 4, False, 5, 16), (8, 160, 32, 4, False, 8, True, 6, 40)]  # later ranges


def _batch_case(make, shape, kind, seed):
    rows, cols, group, P, bias, chunk, tie, cap, row0 = shape

    def values(r):
        v = dict(make(r, rows, cols, group, P, bias, tie), chunk_rows=chunk, row0=row0)
        return _start(v, P, cap if kind == "topk" else None, row0, r)
    label = (f"{rows}x{cols}g{group}-P{P}{'-bias' if bias else ''}-chunk{chunk}{'-tie' if tie else ''}"
             f"{f'-K{cap}' if kind == 'topk' else ''}{f'-row0_{row0}' if row0 else ''}")
    return Case(label, values, seed)


CHUNK = (Scratch("chunk", "float", "P * chunk_rows + 3"), Scalar("chunk_rows", "int32_t"))
RACE = (InOut("best", "int32_t", "P"), InOut("best_v", "float", "P"))
SETS = (InOut("value", "float", "P * cap"), InOut("id", "uint16_t", "P * cap"), Scalar("cap", "int32_t"),
        InOut("held", "int32_t", "P"))
Q4_IN = K4.Q4_ARGS + (In("xq", "int8_t", "P * cols"), In("xs", "float", "P * cdiv(cols, group)"),
                      Scalar("P", "int32_t"), In("bias", "float", "rows", nullable=True))
Q4X4_IN = M7.Q4X4_ARGS + (In("xb", "uint8_t", "P * x16_bytes(cols, group)"), Scalar("P", "int32_t"),
                          In("bias", "float", "rows", nullable=True))
GGUF_IN = G.GGUF_ARGS + (In("xq", "int8_t", "P * cols"), In("xs", "float", "P * (cols // 32)"),
                         Scalar("P", "int32_t"), In("bias", "float", "rows", nullable=True))
GGUFX4_IN = GM7.TILED_ARGS + (In("xb", "uint8_t", "P * x16_bytes(cols, 32)"), Scalar("P", "int32_t"),
                              In("bias", "float", "rows", nullable=True))
ROW0 = (Scalar("row0", "int32_t"),)


def _entries(suffix, inputs, call_inputs, make, logits, shapes, row0: bool):
    r0 = ROW0 if row0 else ()
    r0_call = ("row0",) if row0 else ()
    shapes = [s if row0 else s[:-1] + (0,) for s in shapes]
    argmax = Kernel(f"tllm_argmax_batch_{suffix}", VERIFY_H, inputs + CHUNK + r0 + RACE,
                    call_inputs + ("P", "bias", "chunk", "chunk_rows") + r0_call + ("best", "best_v"),
                    _argmax_twin(logits), tuple(_batch_case(make, s, "argmax", i) for i, s in enumerate(shapes)))
    topk = Kernel(f"tllm_topk_batch_{suffix}", VERIFY_H, inputs + CHUNK + r0 + SETS,
                  call_inputs + ("P", "bias", "chunk", "chunk_rows") + r0_call + ("value", "id", "cap", "held"),
                  _topk_twin(logits), tuple(_batch_case(make, s, "topk", 100 + i) for i, s in enumerate(shapes)))
    return argmax, topk


BATCHED = (_entries("q4", Q4_IN, ("m", "xq", "xs"), _q4_batch, _q4_logits, SHAPES, False)
           + _entries("q4x4", Q4X4_IN, ("m", "xb"), _q4x4_batch, _q4x4_logits, SHAPES_Q4X4, True)
           + tuple(k for q in ("Q4_0", "Q4_1", "Q8_0")
                   for k in _entries(G.SUFFIX[q], GGUF_IN, ("m", "xq", "xs"), _gguf_batch(q), _gguf_logits(q),
                                     SHAPES_GGUF, False))
           + tuple(k for q in ("Q4_0", "Q4_1", "Q8_0")
                   for k in _entries(GM7.GGUF_TILED[q], GGUFX4_IN, ("m", "xb"), _ggufx4_batch(q), _ggufx4_logits(q),
                                     SHAPES_GGUFX4, True)))

ENTRIES = (LOOKUP, SAMPLE_GUESS, SAMPLE_TOPK_GUESS) + BATCHED
