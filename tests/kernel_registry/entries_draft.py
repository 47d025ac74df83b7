"""Registry entries of a draft model's sampled guesses (firmware/tllm_sampler.h;
twins: Sampler.distribution, sample, guess_kept and residual in
codegen/reference/sampler.py): the distribution a sampled request draws
from (tllm_dist_full over a logits vector, tllm_dist_topk over a top-K set),
one draw from it (tllm_dist_draw), its probability at an id (tllm_dist_at,
the draft's q as reference/draft.py spreads it over the target's ids), the
acceptance test under a draft's q (tllm_guess_kept, tllm_topk_guess_kept)
and the residual draw after a rejection (tllm_guess_residual).

A tllm_dist goes in as its arrays and scalars (its ids empty: NULL, every id
0 .. n - 1) and comes out, where a kernel fills it, as its scalars only (its
pointers point into the arrays that come back by their own role)."""
from __future__ import annotations

import numpy as np

from tinyllm_gen.reference import exact
from tinyllm_gen.reference.sampler import DraftDistribution, Sampler, SamplingOptions, top_k_ids

from . import inputs as I
from .entries_cmsis_sampler import SAMPLER
from .entries_topk import SET_ARGS, logits_of, set_of
from .spec import Case, In, InOut, Kernel, Scalar, struct_of

F32 = np.float32
FILL_U16 = 0x5A5A  # spec.FILL_BYTE twice: what the C leaves alone in idx
JUNK = dict(d_n=np.int32(-3), d_by_id=np.int32(7), d_total=F32(-1.0))  # a filled struct's fields before the call


def _sampler(v, top_k: int = 0) -> Sampler:
    s = Sampler(SamplingOptions(float(v["temperature"]), float(v["top_p"])), top_k)
    s.rng.state = int(v["rng_state"])
    return s


def _sampler_out(s: Sampler, v) -> dict:
    return {"s.rng_state": np.uint64([s.rng.state]), "s.temperature": F32([v["temperature"]]),
            "s.top_p": F32([v["top_p"]])}


def _logits(r, n: int, kind: str) -> np.ndarray:
    if kind in ("ties", "equal", "peaked", "signed-zeros"):
        return logits_of(r, kind, n)
    return I.normal(r, n, 4.0)


def _dist_values(prefix: str, logits: np.ndarray, t: float, p: float, top_k: int = 0) -> dict:
    """The tllm_dist of `logits` as the C builds it (by id for the full sampler, in the set's order for
    top-K), as the arrays and scalars the harness sends, named prefix_*."""
    s = Sampler(SamplingOptions(t, p), top_k)
    probs, ids, total = s.distribution(logits)
    if top_k:
        p_arr, ids_arr, by_id = np.asarray(probs, F32), np.asarray(ids, np.uint16), 0
    else:
        p_arr, by_id = exact.softmax(np.asarray(logits, F32) / F32(t)), 1
        ids_arr = np.zeros(0, np.uint16) if F32(p) >= F32(1.0) else np.asarray(ids, np.uint16)
    return {f"{prefix}_p": p_arr, f"{prefix}_ids": ids_arr, f"{prefix}_n": np.int32(len(ids)),
            f"{prefix}_by_id": np.int32(by_id), f"{prefix}_total": F32(total)}


def _dist_args(prefix: str):
    return (In(f"{prefix}_p", "float", f"len_{prefix}"), In(f"{prefix}_ids", "uint16_t", f"ids_{prefix}", nullable=True),
            Scalar(f"{prefix}_n", "int32_t"), Scalar(f"{prefix}_by_id", "int32_t"), Scalar(f"{prefix}_total", "float"),
            Scalar(f"len_{prefix}", "int32_t"), Scalar(f"ids_{prefix}", "int32_t"),
            struct_of(prefix, "tllm_dist", pointers=dict(p=f"{prefix}_p", ids=f"{prefix}_ids"), n=f"{prefix}_n",
                      by_id=f"{prefix}_by_id", total=f"{prefix}_total"))


def _with_lengths(v: dict, *prefixes: str) -> dict:
    for x in prefixes:
        v[f"len_{x}"], v[f"ids_{x}"] = np.int32(len(v[f"{x}_p"])), np.int32(len(v[f"{x}_ids"]))
    return v


def _dense(v, prefix: str, vocab: int) -> DraftDistribution:
    """A tllm_dist as reference/draft.py spreads a draft's q over the target's ids."""
    p, ids, n = np.asarray(v[f"{prefix}_p"], F32), np.asarray(v[f"{prefix}_ids"], np.int64), int(v[f"{prefix}_n"])
    dense = np.zeros(vocab, F32)
    if ids.size == 0:
        dense[:n] = p[:n]
    elif v[f"{prefix}_by_id"]:
        dense[ids[:n]] = p[ids[:n]]
    else:
        dense[ids[:n]] = p[:n]
    return DraftDistribution(dense, F32(v[f"{prefix}_total"]))


def _candidates(v, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """(probs, ids) of a tllm_dist's candidates in their order, as Sampler.distribution returns them."""
    p, ids, n = np.asarray(v[f"{prefix}_p"], F32), np.asarray(v[f"{prefix}_ids"], np.int64), int(v[f"{prefix}_n"])
    if ids.size == 0:
        return p[:n], np.arange(n)
    return (p[ids[:n]] if v[f"{prefix}_by_id"] else p[:n]), ids[:n]


# (vocab, K (0: full sampler), temperature, top_p, rng state, logits): nuclei small and large, ties across
# the nucleus's edge, a peaked distribution, K = 1, K above the vocabulary
DISTS = [(300, 0, 0.8, 1.0, 0x1234, "normal"), (300, 0, 1.0, 0.9, 0x9E3779B97F4A7C15, "normal"),
         (257, 0, 1.3, 0.5, 77, "ties"), (64, 0, 1.0, 0.7, 5, "equal"), (100, 0, 1.0, 0.9, 9, "peaked"),
         (100, 0, 100.0, 0.99, 11, "normal"), (2, 0, 0.5, 0.9, 99, "normal"), (300, 40, 0.8, 1.0, 3, "ties"),
         (300, 40, 1.2, 0.85, 21, "normal"), (300, 1, 1.0, 0.9, 1 << 63, "normal"), (50, 64, 0.9, 0.95, 8, "ties"),
         (100, 20, 1.0, 0.9, 13, "peaked")]


def _label(vocab, k, t, p, state, kind) -> str:
    return f"v{vocab}-{f'K{k}' if k else 'full'}-T{t}-p{p}-{kind}-state{state:x}"


# --- tllm_dist_full / tllm_dist_topk -----------------------------------------------------
FILLED = (Scalar("d_n", "int32_t"), Scalar("d_by_id", "int32_t"), Scalar("d_total", "float"))


def _dist_full_twin(v):
    s = _sampler(v)
    logits = np.asarray(v["logits"], F32)
    probs = exact.softmax(logits / s.temperature)
    _, ids, total = s.distribution(logits)
    idx = np.array(v["idx"], np.uint16)
    if s.top_p < F32(1.0):
        cand = s._candidates(probs)  # the C sorts every candidate above the cutoff into idx
        idx[: len(cand)] = cand
    return dict(_sampler_out(s, v), logits=probs, idx=idx, **{"d.n": np.int32([len(ids)]), "d.by_id": np.int32([1]),
                                                              "d.total": F32([total])})


def _dist_full_case(vocab, k, t, p, state, kind, seed):
    def make(r):
        return dict(JUNK, rng_state=np.uint64(state), temperature=F32(t), top_p=F32(p), logits=_logits(r, vocab, kind),
                    n=vocab, idx=np.full(vocab, FILL_U16, np.uint16))
    return Case(_label(vocab, k, t, p, state, kind), make, seed)


# A full sampler's inputs: its state and options, the logits (the probabilities after) and the nucleus scratch.
FULL_INPUTS = (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER,
               InOut("logits", "float", "n"), Scalar("n", "int32_t"), InOut("idx", "uint16_t", "n"))

DIST_FULL = Kernel(
    "tllm_dist_full", "tllm_sampler.h",
    FULL_INPUTS + FILLED
    + (struct_of("d", "tllm_dist", write_back=True, pointers=dict(p="logits", ids="idx"), n="d_n", by_id="d_by_id",
                 total="d_total"),),
    ("s", "logits", "n", "idx", "d"), _dist_full_twin,
    cases=tuple(_dist_full_case(*c, seed=i) for i, c in enumerate(DISTS) if not c[1]))


def _dist_topk_twin(v):
    s = _sampler(v, v["cap"])
    logits = np.asarray(v["logits"], F32)
    _, ids, total = s.distribution(logits)
    value = np.array(v["value"], F32)
    value[: v["held"]] = exact.softmax(logits[top_k_ids(logits, v["cap"])] / s.temperature)
    return dict(_sampler_out(s, v), value=value, id=v["id"], **{
        "t.cap": np.int32([v["cap"]]), "t.n": np.int32([v["held"]]), "d.n": np.int32([len(ids)]),
        "d.by_id": np.int32([0]), "d.total": F32([total])})


def _dist_topk_case(vocab, k, t, p, state, kind, seed):
    def make(r):
        logits = _logits(r, vocab, kind)
        return dict(set_of(logits, k), **JUNK, rng_state=np.uint64(state), temperature=F32(t), top_p=F32(p),
                    logits=logits)
    return Case(_label(vocab, k, t, p, state, kind), make, seed)


DIST_TOPK = Kernel(
    "tllm_dist_topk", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER) + SET_ARGS
    + FILLED + (struct_of("d", "tllm_dist", write_back=True, pointers=dict(p="value", ids="id"), n="d_n",
                          by_id="d_by_id", total="d_total"),),
    ("s", "t", "d"), _dist_topk_twin,
    cases=tuple(_dist_topk_case(*c, seed=i) for i, c in enumerate(DISTS) if c[1]))


# --- tllm_dist_draw / tllm_dist_at -------------------------------------------------------
def _draw_twin(v):
    """The draw from a distribution is the token Sampler.sample draws from the logits it came from."""
    s = _sampler(v, int(v["top_k"]))
    token = s.sample(np.asarray(v["logits"], F32))
    return dict(_sampler_out(s, v), **{"return": np.int32(token)})


def _draw_case(vocab, k, t, p, state, kind, seed):
    def make(r):
        logits = _logits(r, vocab, kind)
        return _with_lengths(dict(_dist_values("d", logits, t, p, k), rng_state=np.uint64(state), temperature=F32(t),
                                  top_p=F32(p), logits=logits, top_k=k), "d")
    return Case(_label(vocab, k, t, p, state, kind), make, seed)


DIST_DRAW = Kernel(
    "tllm_dist_draw", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER)
    + _dist_args("d"),
    ("s", "d"), _draw_twin, returns="int32_t",
    cases=tuple(_draw_case(*c, seed=i) for i, c in enumerate(DISTS)))


def _at_twin(v):
    return {"return": F32(_dense(v, "d", int(v["vocab"])).dense[int(v["token"])])}


def _at_case(vocab, k, t, p, state, kind, which, seed):
    """which: the distribution's first candidate, its last, the id after its last (ties: equal probability,
    outside a nucleus), or the last id of the vocabulary."""
    def make(r):
        logits = _logits(r, vocab, kind)
        v = _with_lengths(dict(_dist_values("d", logits, t, p, k), vocab=vocab), "d")
        _, ids = _candidates(v, "d")
        rest = np.setdiff1d(np.arange(vocab), ids)
        order = np.lexsort((np.arange(vocab), -exact.softmax(logits / F32(t))))  # (prob desc, id asc)
        after = int(order[len(ids)]) if len(ids) < vocab else int(ids[-1])
        v["token"] = {"first": int(ids[0]), "last": int(ids[-1]), "after": after if k == 0 else
                      (int(rest[0]) if rest.size else int(ids[-1])), "max": vocab - 1}[which]
        return v
    return Case(f"{_label(vocab, k, t, p, state, kind)}-{which}", make, seed)


DIST_AT = Kernel(
    "tllm_dist_at", "tllm_sampler.h", _dist_args("d") + (Scalar("token", "int32_t"),), ("d", "token"), _at_twin,
    returns="float", cases=tuple(_at_case(*c, which, seed=10 * i + j) for i, c in enumerate(DISTS)
                                 for j, which in enumerate(("first", "last", "after", "max"))))


# --- tllm_guess_kept / tllm_topk_guess_kept / tllm_guess_residual ---------------------------
# (vocab, K, temperature, top_p, state, logits, the draft's temperature): the draft's q from other logits
GUESSES = [(300, 0, 0.8, 1.0, 0x1234, "normal", 1.1), (300, 0, 1.0, 0.9, 5, "normal", 0.7),
           (257, 0, 1.3, 0.5, 77, "ties", 1.3), (100, 0, 1.0, 0.9, 9, "peaked", 2.0),
           (300, 40, 0.8, 1.0, 3, "ties", 1.0), (300, 40, 1.2, 0.85, 21, "normal", 0.9),
           (300, 1, 1.0, 0.9, 1 << 63, "normal", 1.0), (100, 20, 1.0, 0.9, 13, "peaked", 1.5)] + [
    (200, k, 1.0, p, 4000 + s, "normal", 1.2) for s in range(4) for k in (0, 16) for p in (1.0, 0.9)]


def _draft_q(r, vocab, k, t_draft, p, logits):
    """A draft's distribution: the target's logits plus noise at another temperature (q near p, not p)."""
    x = np.asarray(logits, F32) + I.normal(r, vocab, 1.0)
    return x, _dist_values("q", x, t_draft, p, k)


def _guess_of(r, ids_q: np.ndarray, x_draft, t_draft, p, k, state) -> int:
    """The draft's guess: drawn from its q as tllm_dist_draw would (coins from another state)."""
    s = Sampler(SamplingOptions(t_draft, p), k)
    s.rng.state = state ^ 0xABCDEF
    return s.sample(np.asarray(x_draft, F32))


def _kept_twin(top_k: bool):
    def twin(v):
        s = _sampler(v, int(v["cap"]) if top_k else 0)
        logits = np.asarray(v["logits"], F32)
        probs, ids, total = s.distribution(logits)
        kept = s.guess_kept(probs, ids, int(v["g"]), total, F32(v["q_g"]), F32(v["q_total"]))
        out = dict(_sampler_out(s, v), **{"return": np.int32(kept), "p.n": np.int32([len(ids)]),
                                          "p.by_id": np.int32([0 if top_k else 1]), "p.total": F32([total])})
        if top_k:
            value = np.array(v["value"], F32)
            value[: v["held"]] = exact.softmax(logits[top_k_ids(logits, v["cap"])] / s.temperature)
            return dict(out, value=value, id=v["id"], **{"t.cap": np.int32([v["cap"]]), "t.n": np.int32([v["held"]])})
        idx = np.array(v["idx"], np.uint16)
        full = exact.softmax(logits / s.temperature)
        if s.top_p < F32(1.0):
            cand = s._candidates(full)
            idx[: len(cand)] = cand
        return dict(out, logits=full, idx=idx)
    return twin


def _kept_case(vocab, k, t, p, state, kind, t_draft, seed):
    def make(r):
        logits = _logits(r, vocab, kind)
        x, q = _draft_q(r, vocab, k, t_draft, p, logits)
        g = _guess_of(r, q["q_ids"], x, t_draft, p, k, state)
        dense = _dense(_with_lengths(q, "q"), "q", vocab)
        v = dict(rng_state=np.uint64(state), temperature=F32(t), top_p=F32(p), logits=logits, g=g,
                 q_g=dense.dense[g], q_total=dense.total, p_n=np.int32(-3), p_by_id=np.int32(7), p_total=F32(-1.0))
        return dict(v, **set_of(logits, k)) if k else dict(v, n=vocab, idx=np.full(vocab, FILL_U16, np.uint16))
    return Case(f"{_label(vocab, k, t, p, state, kind)}-draftT{t_draft}", make, seed)


GUESS_Q = (Scalar("g", "int32_t"), Scalar("q_g", "float"), Scalar("q_total", "float"), Scalar("p_n", "int32_t"),
           Scalar("p_by_id", "int32_t"), Scalar("p_total", "float"))

GUESS_KEPT = Kernel(
    "tllm_guess_kept", "tllm_sampler.h",
    FULL_INPUTS + GUESS_Q
    + (struct_of("p", "tllm_dist", write_back=True, pointers=dict(p="logits", ids="idx"), n="p_n", by_id="p_by_id",
                 total="p_total"),),
    ("s", "logits", "n", "idx", "g", "q_g", "q_total", "p"), _kept_twin(False), returns="int32_t",
    cases=tuple(_kept_case(*c, seed=i) for i, c in enumerate(GUESSES) if not c[1]))

TOPK_GUESS_KEPT = Kernel(
    "tllm_topk_guess_kept", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER) + SET_ARGS
    + GUESS_Q + (struct_of("p", "tllm_dist", write_back=True, pointers=dict(p="value", ids="id"), n="p_n",
                           by_id="p_by_id", total="p_total"),),
    ("s", "t", "g", "q_g", "q_total", "p"), _kept_twin(True), returns="int32_t",
    cases=tuple(_kept_case(*c, seed=i) for i, c in enumerate(GUESSES) if c[1]))


# flat distributions, nuclei of many tokens (S and Sq far from 1 and from each other) and many coins: a weight computed with the totals
# swapped, or without the clamp, draws another token somewhere here
RESIDUALS = GUESSES + [(200, k, 4.0, p, 5000 + s, "normal", 5.0) for s in range(10) for k in (0, 40)
                       for p in (0.5, 0.8)]


def _residual_twin(v):
    s = _sampler(v)
    probs, ids = _candidates(v, "p")
    token = s.residual(probs, ids, int(v["g"]), F32(v["p_total"]), _dense(v, "q", int(v["vocab"])))
    return dict(_sampler_out(s, v), **{"return": np.int32(token)})


def _residual_case(vocab, k, t, p, state, kind, t_draft, seed):
    def make(r):
        logits = _logits(r, vocab, kind)
        x, q = _draft_q(r, vocab, k, t_draft, p, logits)
        g = _guess_of(r, q["q_ids"], x, t_draft, p, k, state)
        return _with_lengths(dict(_dist_values("p", logits, t, p, k), **q, rng_state=np.uint64(state),
                                  temperature=F32(t), top_p=F32(p), g=g, vocab=vocab), "p", "q")
    return Case(f"{_label(vocab, k, t, p, state, kind)}-draftT{t_draft}", make, seed)


GUESS_RESIDUAL = Kernel(
    "tllm_guess_residual", "tllm_sampler.h",
    (Scalar("rng_state", "uint64_t"), Scalar("temperature", "float"), Scalar("top_p", "float"), SAMPLER)
    + _dist_args("p") + (Scalar("g", "int32_t"),) + _dist_args("q"),
    ("s", "p", "g", "q"), _residual_twin, returns="int32_t",
    cases=tuple(_residual_case(*c, seed=i) for i, c in enumerate(RESIDUALS)))

ENTRIES = (DIST_FULL, DIST_TOPK, DIST_DRAW, DIST_AT, GUESS_KEPT, TOPK_GUESS_KEPT, GUESS_RESIDUAL)
