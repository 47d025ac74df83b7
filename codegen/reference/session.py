"""A conversation whose KV cache stays between turns: the reference of the
firmware's multi-turn KV reuse (tllm_continue, the request's continue form;
firmware/tllm_api.h defines which tokens are held).

After a turn the session holds the conversation: every id of the turns so
far and every generated token, in order.  All but the last are in the
executor's KV cache; the last generated token was sampled and not yet run,
so the next turn's prefill starts with it, at the position after the
cache's, and then runs the new turn's ids.  The tokens are those of one
fresh generation on the whole conversation, bit for bit (the same steps at
the same positions: a step's output depends only on the cache entries
before its position and its own token), which tests/host/test_multiturn_host.py
checks against the firmware and against that fresh generation.

A turn that runs nothing (max_new_tokens 0) leaves no conversation, as the
firmware's; a refused continue (the context) leaves it as it was.  On a
rolling-context build a turn may shift the cache; the conversation then
holds at least max_seq tokens, so the next continue is refused (the context)
exactly as the firmware's count check refuses it, and the host starts afresh."""
from __future__ import annotations

from typing import Sequence

from .executor import Executor
from .sampler import SamplingOptions
from .speculative import SpeculativeGeneration, generate_speculative


class ContextFull(ValueError):
    """The held conversation and the new turn's ids reach max_seq (the firmware's TLLM_EXIT_CONTEXT_FULL)."""


class Session:
    """One conversation on one executor (its KV cache is the session's)."""

    def __init__(self, executor: Executor, max_seq: int, eos_ids: Sequence[int], top_k: int = 0, k: int = 0,
                 roll=None):
        self.executor, self.max_seq, self.eos_ids, self.top_k, self.k = executor, max_seq, tuple(eos_ids), top_k, k
        self.roll = roll  # a rolling-context build's context.ContextRoll (None: stop)
        self.tokens: list[int] = []  # the held conversation ([]: none)

    def generate(self, new_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 fresh: bool = False) -> SpeculativeGeneration:
        """The next turn: ``new_ids`` after the held conversation (``fresh`` or
        none held: a new conversation of new_ids alone).  Its generated_ids are
        this turn's; prompt_ids is the whole conversation before them."""
        if fresh or not self.tokens:
            prompt, cached = list(new_ids), 0
        else:
            if len(self.tokens) + len(new_ids) >= self.max_seq:
                raise ContextFull(f"{len(self.tokens)} held + {len(new_ids)} new tokens reach the context of "
                                  f"{self.max_seq}")
            prompt, cached = self.tokens + list(new_ids), len(self.tokens) - 1
        gen = generate_speculative(self.executor, prompt, max_new_tokens, self.max_seq, self.eos_ids, sampling,
                                   self.top_k, self.k, cached=cached, roll=self.roll)
        self.tokens = prompt + gen.generated_ids if gen.generated_ids else []
        return gen
