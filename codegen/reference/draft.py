"""The draft model of speculative decoding (`--speculate draft:MODEL[:k]`):
a second, smaller model with its own KV cache that proposes the next k
tokens by running k steps of its own, sampled by the request's sampler
(reference/speculative.py defines the pass and the order of the coins).

The draft's cache holds the ids it was fed at positions 0 .. n - 1.  Before
drafting at position pos it catches up: the positions where its cache and
the context differ (a rejected guess, the tokens of the last pass it did not
feed, a new prompt) are stepped again from the first difference, the head
skipped except at pos.  Rejected guesses need no undoing: their rows are
overwritten, as the target's are.  Ids cross between the two vocabularies
through frontends/vocab_map.py."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..frontends.vocab_map import VocabMap
from .exact import F32
from .executor import Executor
from .sampler import DraftDistribution, Sampler


class DraftModel:
    def __init__(self, executor: Executor, vocab: VocabMap, target_vocab: int):
        self.executor = executor
        self.vocab = vocab
        self.target_vocab = target_vocab
        self.cached: list[int] = []  # the target ids whose rows the draft's cache holds, position by position
        self.steps = 0  # draft steps run (the head included or not): its share of a generation's cost

    def reset(self) -> None:
        self.executor.reset()
        self.cached = []

    def propose(self, sampler: Sampler, tokens: Sequence[int], k: int) -> tuple[list[int], list]:
        """k guesses (target ids) after tokens[-1], at positions len(tokens) ..,
        and for each the draft's q (None when greedy: q is never read); one
        coin per guess when sampled, drawn as the sampler draws a token."""
        pos = len(tokens) - 1
        same = 0
        while same < min(len(self.cached), pos) and self.cached[same] == tokens[same]:
            same += 1
        del self.cached[same:]
        for p in range(same, pos):
            self._step(tokens[p], p, False)
        guesses, qs, feed = [], [], tokens[pos]
        for j in range(k):
            logits = self._step(feed, pos + j, True)
            d = sampler.sample(logits)
            qs.append(None if sampler.opts.temperature == 0.0 else self._q(sampler, logits))
            feed = int(self.vocab.to_target[d])
            guesses.append(feed)
        return guesses, qs

    def shift(self, sinks: int, discard: int) -> None:
        """The context shift (context.py) on the draft's own cache, as the target's."""
        n = len(self.cached)
        if n > sinks + discard:
            self.executor.kernels.shift(sinks, discard, n - sinks - discard)
            del self.cached[sinks:sinks + discard]
        else:
            del self.cached[sinks:]

    def _step(self, token: int, pos: int, need_logits: bool) -> np.ndarray | None:
        self.steps += 1
        self.cached.append(int(token))
        return self.executor.step(int(self.vocab.to_draft[token]), pos, need_logits)

    def _q(self, sampler: Sampler, logits: np.ndarray) -> DraftDistribution:
        probs, ids, total = sampler.distribution(logits)
        dense = np.zeros(self.target_vocab, F32)
        dense[self.vocab.to_target[ids]] = probs
        return DraftDistribution(dense, total)
