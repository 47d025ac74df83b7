"""Token sampling, mirrored bit for bit by firmware/tllm_sampler.c.

* temperature 0: argmax (lowest index wins a tie);
* otherwise softmax(logits / T) with our own expf, then nucleus (top-p)
  sampling when 0 < top_p < 1, else sampling from the full distribution.

Random numbers come from xorshift64* (Vigna), 64-bit integer arithmetic
that is the same on every machine; a float in [0,1) is the top 24 bits
times 2^-24, which is exact in float32.
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


class Sampler:
    def __init__(self, opts: SamplingOptions):
        self.opts = opts
        self.rng = Rng(opts.seed)
        self.temperature = F32(opts.temperature)
        self.top_p = F32(opts.top_p)

    def sample(self, logits: np.ndarray) -> int:
        if self.opts.temperature == 0.0:
            return argmax(logits)
        probs = softmax(np.asarray(logits, F32) / self.temperature)
        coin = self.rng.next_f32()
        if self.top_p < F32(1.0):
            return self._top_p(probs, coin)
        return self._multinomial(probs, coin)

    @staticmethod
    def _multinomial(probs: np.ndarray, coin: np.float32) -> int:
        cdf = F32(0.0)
        for i, p in enumerate(probs):
            cdf = cdf + p
            if coin < cdf:
                return i
        return len(probs) - 1  # rounding: coin beyond the last cdf

    def _top_p(self, probs: np.ndarray, coin: np.float32) -> int:
        n = len(probs)
        # Tokens below this cannot be in the nucleus (llama2.c's trick): it
        # keeps the sort short. Computed in float32 as the C does.
        cutoff = (F32(1.0) - self.top_p) / F32(n - 1)
        cand = [i for i in range(n) if probs[i] >= cutoff]
        # (prob desc, index asc) is a total order, so any correct sort in C
        # yields this exact sequence.
        cand.sort(key=lambda i: (-float(probs[i]), i))
        cum = F32(0.0)
        last = len(cand) - 1
        for j, i in enumerate(cand):
            cum = cum + probs[i]
            if cum > self.top_p:
                last = j
                break
        r = coin * cum
        cdf = F32(0.0)
        for j in range(last + 1):
            cdf = cdf + probs[cand[j]]
            if r < cdf:
                return cand[j]
        return cand[last]

