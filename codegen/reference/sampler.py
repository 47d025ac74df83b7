"""Token sampling, mirrored bit for bit by firmware/tllm_sampler.c.

* temperature 0: argmax (lowest index wins a tie);
* otherwise softmax(logits / T) with our own expf, then nucleus (top-p)
  sampling when 0 < top_p < 1, else sampling from the full distribution.

Random numbers come from xorshift64* (Vigna), 64-bit integer arithmetic
that is the same on every machine; a float in [0,1) is the top 24 bits
times 2^-24, which is exact in float32.

Top-K builds (`--sampler topk:K`, no logits vector in RAM; the firmware
keeps a running set while the classifier's chunks pass, tllm_topk_push):

* the candidates are the K largest logits in the total order (logit
  descending, token id ascending: of equal logits the lower id comes first
  and is kept); fewer when the vocabulary is smaller than K;
* temperature 0: the first candidate, which is the argmax (the lowest id
  among the maxima), so greedy tokens equal the other builds';
* otherwise p = softmax(logit / T) over the K candidates, computed in that
  order with the same float32 arithmetic as the full sampler (tllm_softmax);
  one coin from the same xorshift64* draw; then, when top_p < 1, the nucleus
  *within the K*: the shortest prefix of the candidates (in their order, not
  re-sorted) whose cumulative p exceeds top_p (all K if none does), and
  the token where coin * (that prefix's sum) first falls below the running
  sum; when top_p = 1, the token where the coin first falls below the
  cumulative p over all K (the last candidate if rounding leaves it above).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from .exact import F32, softmax

MASK64 = (1 << 64) - 1
XORSHIFT_MUL = 0x2545F4914F6CDD1D
DEFAULT_SEED_STATE = 0x853C49E6748FEA9B  # used when the seed is 0 (xorshift state must be non-zero)

# The sampling options accepted (the CLI and SamplingOptions check the same
# ranges).  A temperature is 0 (greedy) or in [1e-3, 100]: far smaller ones
# overflow logits / T to infinity in float32, larger ones are uniform noise.
# top_p is in (0, 1] and at least float32's smallest normal number, because
# the Cortex-M7 may flush subnormal floats to zero where the host does not.
TEMPERATURE_MIN, TEMPERATURE_MAX = 1e-3, 100.0
TOP_P_MIN = float(np.finfo(np.float32).tiny)  # 1.1754944e-38
MAX_NEW_TOKENS = (1 << 32) - 1  # the request's uint32 field; generation also stops at the context's end
# --sampler topk:K: K in 1..TOP_K_MAX (the K-entry buffer is 6 * K bytes; the
# running set's insertion is O(K) per entering row, so K stays small).
TOP_K_MAX = 1024


def top_k_of(sampler: str) -> int:
    """K of a "topk:K" sampler build, 0 for full and greedy."""
    return int(sampler.split(":", 1)[1]) if sampler.startswith("topk:") else 0


def sampler_problem(sampler: str) -> str | None:
    """Why a --sampler value is not one this tool builds (None: it is)."""
    if sampler in ("full", "greedy"):
        return None
    kind, _, k = sampler.partition(":")
    if kind != "topk" or not k.isdigit():
        return f"{sampler!r} is not known: choose full, greedy or topk:K (K in 1..{TOP_K_MAX})"
    if not 1 <= int(k) <= TOP_K_MAX:
        return f"{sampler!r}: K must be in 1..{TOP_K_MAX}"
    if str(int(k)) != k:
        return f"{sampler!r}: write K without leading zeros (topk:{int(k)})"
    return None


def temperature_problem(t: float) -> str | None:
    if not isinstance(t, numbers.Real) or isinstance(t, bool) or not math.isfinite(t):
        return f"{t!r} is not a finite number"
    if t != 0 and not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX:
        return f"{t:g} is outside 0 (greedy) or [{TEMPERATURE_MIN:g}, {TEMPERATURE_MAX:g}]"
    return None


def top_p_problem(p: float) -> str | None:
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not math.isfinite(p):
        return f"{p!r} is not a finite number"
    if not 0.0 < p <= 1.0:
        return f"{p:g} is outside (0, 1]"
    if p < TOP_P_MIN:
        return f"{p:g} is below float32's smallest normal number ({TOP_P_MIN:.8g}), which the Cortex-M7 may flush to 0"
    return None


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if (why := temperature_problem(self.temperature)) is not None:
            raise ValueError(f"temperature {why}")
        if (why := top_p_problem(self.top_p)) is not None:
            raise ValueError(f"top_p {why}")
        if not isinstance(self.seed, numbers.Integral) or not 0 <= self.seed < (1 << 64):
            raise ValueError("seed must be in [0, 2^64)")


@dataclass(frozen=True)
class DraftDistribution:
    """A draft model's q for one guess, on the target's ids: dense[i] the
    weight of target id i (0 where the draft has no such token or does not
    sample it), total the sum its sampler scales the coin by."""
    dense: np.ndarray
    total: np.float32


class Rng:
    def __init__(self, seed: int):
        self.state = seed & MASK64 or DEFAULT_SEED_STATE

    def next_u32(self) -> int:
        s = self.state
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        self.state = s
        return ((s * XORSHIFT_MUL) & MASK64) >> 32

    def next_f32(self) -> np.float32:
        return F32(self.next_u32() >> 8) * F32(1.0 / 16777216.0)


def argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits))  # numpy returns the first maximum, as the C loop does


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """The K candidates of a top-K build, in their order: logit descending,
    id ascending (numpy's stable lexsort on (id, -logit); -0.0 == 0.0 there
    as in the C comparisons)."""
    x = np.asarray(logits, F32)
    order = np.lexsort((np.arange(len(x)), -x))
    return order[:k]


class Sampler:
    """The firmware's sampler; top_k > 0 for a `--sampler topk:K` build
    (the module docstring defines what it samples)."""

    def __init__(self, opts: SamplingOptions, top_k: int = 0):
        self.opts = opts
        self.rng = Rng(opts.seed)
        self.temperature = F32(opts.temperature)
        self.top_p = F32(opts.top_p)
        self.top_k = top_k

    def sample(self, logits: np.ndarray) -> int:
        if self.top_k:
            return self._sample_top_k(np.asarray(logits, F32))
        if self.opts.temperature == 0.0:
            return argmax(logits)
        probs = softmax(np.asarray(logits, F32) / self.temperature)
        coin = self.rng.next_f32()
        if self.top_p < F32(1.0):
            return self._top_p(probs, coin)
        return self._multinomial(probs, coin)

    def sample_guess(self, logits: np.ndarray, guess: int, q: DraftDistribution | None = None) -> int:
        """tllm_sample_guess / tllm_sample_topk_guess (speculative decoding):
        the token at a position the draft guessed `guess` for (< 0: no guess,
        `sample`).  Temperature 0: the argmax (top-K: the set's first entry).
        Otherwise the sampler's distribution p over its candidates
        (`distribution`: total S) and the draft's q (None: the one-hot q of a
        prompt-lookup guess, q(guess) = 1, total 1; a draft model: its own
        sampler's distribution mapped onto these ids, total Sq), in float32:
        one coin u keeps the guess when u * (q(guess) * S) < p(guess) * Sq
        (the acceptance rule min(1, p / q) on the normalised p and q; p = 0
        outside the candidates), else a second coin draws from the candidates
        without the guess with the weights max(0, p * Sq - q * S) (the
        normalised max(0, p - q)): coin times their sum, then the first running
        sum above it, in order (the last of them if rounding leaves it above
        every one).  With the one-hot q the weights are p itself, bit for bit.
        The token is the guess exactly when kept."""
        if guess < 0:
            return self.sample(logits)
        x = np.asarray(logits, F32)
        if self.opts.temperature == 0.0:
            return int(top_k_ids(x, self.top_k)[0]) if self.top_k else argmax(x)
        probs, ids, total = self.distribution(x)
        return self._accept_or_resample(probs, ids, guess, total, q)

    def distribution(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """(probs, ids, total) a sampled request draws from (temperature > 0):
        candidate ids[j] has weight probs[j], `total` their sum as the draw
        scales its coin (1 where the whole softmax is the candidates: the full
        vocabulary or the K at top_p = 1; else the nucleus's float32 sum)."""
        x = np.asarray(logits, F32)
        if self.top_k:
            ids = top_k_ids(x, self.top_k)
            probs = softmax(x[ids] / self.temperature)
            if self.top_p < F32(1.0):
                last, cum = self._nucleus_prefix(list(probs))
                return probs[:last + 1], ids[:last + 1], cum
            return probs, ids, F32(1.0)
        probs = softmax(x / self.temperature)
        if self.top_p < F32(1.0):
            ids = np.asarray(self._candidates(probs), np.int64)
            last, cum = self._nucleus_prefix([probs[i] for i in ids])
            return probs[ids[:last + 1]], ids[:last + 1], cum
        return probs, np.arange(len(probs)), F32(1.0)

    def _accept_or_resample(self, probs: np.ndarray, ids: np.ndarray, guess: int, total: np.float32,
                            q: DraftDistribution | None) -> int:
        """probs[j] is candidate ids[j]'s probability (see sample_guess)."""
        q_g, q_total = (F32(1.0), F32(1.0)) if q is None else (q.dense[guess], q.total)
        if self.guess_kept(probs, ids, guess, total, q_g, q_total):
            return guess
        return self.residual(probs, ids, guess, total, q)

    def guess_kept(self, probs: np.ndarray, ids: np.ndarray, guess: int, total: np.float32, q_g: np.float32,
                   q_total: np.float32) -> bool:
        """tllm_guess_kept's test (one coin): u * (q(guess) * S) < p(guess) * Sq."""
        at = np.flatnonzero(ids == guess)
        pg = probs[at[0]] if at.size else F32(0.0)
        return bool(self.rng.next_f32() * (F32(q_g) * total) < pg * F32(q_total))

    def residual(self, probs: np.ndarray, ids: np.ndarray, guess: int, total: np.float32,
                 q: DraftDistribution | None) -> int:
        """tllm_guess_residual (a second coin): the candidates without the guess, weighted
        max(0, p * Sq - q * S) (q None: the one-hot q, the weights p itself)."""
        keep = ids != guess
        rest_p, rest_ids = np.asarray(probs, F32)[keep], ids[keep]
        if q is not None:  # with the one-hot q they are p * 1 - 0 * S = p exactly: nothing to compute
            rest_p = np.maximum(rest_p * q.total - q.dense[rest_ids] * total, F32(0.0))
        cdf = np.cumsum(rest_p, dtype=F32)  # left to right in float32, as the C's running sums
        rest = cdf[-1] if cdf.size else F32(0.0)
        r = self.rng.next_f32() * rest
        hit = np.flatnonzero(r < cdf)
        if hit.size:
            return int(rest_ids[hit[0]])
        return int(rest_ids[-1]) if rest_ids.size else guess

    def _candidates(self, probs: np.ndarray) -> list[int]:
        """The full sampler's top-p candidates in (prob desc, index asc) order
        (tllm_sampler.c nucleus).  Tokens below the cutoff cannot be in the
        nucleus (llama2.c's trick): it keeps the sort short; computed in
        float32 as the C does.  (prob desc, index asc) is a total order, so
        any correct sort in C yields this exact sequence."""
        cutoff = (F32(1.0) - self.top_p) / F32(len(probs) - 1)
        cand = [i for i in range(len(probs)) if probs[i] >= cutoff]
        cand.sort(key=lambda i: (-float(probs[i]), i))
        return cand

    def _nucleus_prefix(self, ordered: list) -> tuple[int, np.float32]:
        """(last, sum): the shortest prefix of `ordered` whose float32 sum exceeds top_p (all when none does)."""
        cum = F32(0.0)
        for j, p in enumerate(ordered):
            cum = cum + p
            if cum > self.top_p:
                return j, cum
        return len(ordered) - 1, cum

    @staticmethod
    def _multinomial(probs: np.ndarray, coin: np.float32) -> int:
        cdf = F32(0.0)
        for i, p in enumerate(probs):
            cdf = cdf + p
            if coin < cdf:
                return i
        return len(probs) - 1  # rounding: coin beyond the last cdf

    def _top_p(self, probs: np.ndarray, coin: np.float32) -> int:
        cand = self._candidates(probs)
        return cand[self._nucleus_draw([probs[i] for i in cand], coin)]

    def _nucleus_draw(self, ordered: list, coin: np.float32) -> int:
        """The index into `ordered` (probabilities in the candidates' order)
        that the coin picks inside the shortest prefix whose sum exceeds top_p
        (all of them when none does), in float32 as tllm_sampler.c sums."""
        cum = F32(0.0)
        last = len(ordered) - 1
        for j, p in enumerate(ordered):
            cum = cum + p
            if cum > self.top_p:
                last = j
                break
        r = coin * cum
        cdf = F32(0.0)
        for j in range(last + 1):
            cdf = cdf + ordered[j]
            if r < cdf:
                return j
        return last


    def _sample_top_k(self, logits: np.ndarray) -> int:
        """tllm_sample_topk: the candidates' logits in their order, then the
        same steps as the full sampler without its cutoff and re-sort."""
        ids = top_k_ids(logits, self.top_k)
        if self.opts.temperature == 0.0:
            return int(ids[0])
        probs = softmax(logits[ids] / self.temperature)
        coin = self.rng.next_f32()
        if self.top_p < F32(1.0):
            return int(ids[self._nucleus_draw(list(probs), coin)])
        return int(ids[self._multinomial(probs, coin)])
