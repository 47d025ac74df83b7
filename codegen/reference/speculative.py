"""Speculative decoding as the firmware runs it (firmware/tllm_engine.c,
`compile --speculate`): the definition every tier is compared with.

Each pass over the weights after the first token:

* draft: up to k guesses of the next tokens, k_eff = min(k, tokens still
  allowed - 1, positions left in the context - 1) so no guessed position
  lies past the context's end or the token limit: the prompt-lookup draft
  (`lookup_draft`; firmware/tllm_draft.h), or a draft model
  (reference/draft.py: k_eff steps of its own, each guess drawn by the
  request's sampler, with its temperature, top-p and top-K, from the draft's
  logits, greedy or sampled as the request is);
* no guess: one plain decode step (the firmware's tllm_model_step);
* otherwise the verification pass: the last accepted token and the n - 1
  guesses at positions pos .. pos + n - 1, the model's output at every one
  of them (the firmware's tllm_model_verify runs them through every weight
  together; here one step each, which is the same floats by the batched
  kernels' contract), then position by position the sampler's token given
  the guess there (`Sampler.sample_guess`): a guess that survives is
  accepted and the next position is tested, the first token that is not
  the guess ends the pass (after the last guess: the model's own next
  token, drawn without a guess).  The pass yields the accepted guesses and
  that token; the KV cache entries of the positions after it are simply
  overwritten by later passes (the position rolls back).

Greedy requests (temperature 0) then give exactly the tokens of plain
decoding.  With a temperature the acceptance rule keeps the output
distribution the model's (accept with probability min(1, p/q), else sample
the normalised max(0, p - q); q is one-hot for a lookup guess, the draft's
own sampler distribution for a draft model's: Sampler.sample_guess).  One
random stream (the request's seed) serves the draft and the target; the
coins are part of this definition, drawn in this order per pass: a draft
model's one per guess, in order, as it drafts them (none for lookup), then
per tested guess one coin, after a rejection one more, for the token after
the last guess one (plain sampling's).  The emitted tokens then stop exactly where plain decoding
stops (EOS, the token limit, the context's end), checked token by token."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..abi import LOOKUP_NGRAM_MAX, LOOKUP_NGRAM_MIN
from .blas import one_blas_thread
from .draft import DraftModel
from .executor import Executor
from .sampler import Sampler, SamplingOptions


def lookup_draft(tokens: Sequence[int], k: int) -> list[int]:
    """tllm_lookup_draft: the tokens after the latest earlier place where the
    context's longest suffix (LOOKUP_NGRAM_MIN .. LOOKUP_NGRAM_MAX tokens)
    ends, at most k of them and none past the context's end ([]: no match)."""
    L = len(tokens)
    if L < 2 or k <= 0:
        return []
    last = tokens[L - 1]
    best_len, best_end = 0, -1
    for e in range(L - 2, -1, -1):  # latest first: a later place wins a tie
        if tokens[e] != last:
            continue
        m = 1
        while m < LOOKUP_NGRAM_MAX and e - m >= 0 and tokens[e - m] == tokens[L - 1 - m]:
            m += 1
        if m > best_len:
            best_len, best_end = m, e
            if m == LOOKUP_NGRAM_MAX:
                break
    if best_len < LOOKUP_NGRAM_MIN:
        return []
    n = min(k, L - 1 - best_end)
    return [int(t) for t in tokens[best_end + 1:best_end + 1 + n]]


@dataclass(frozen=True)
class SpeculativeGeneration:
    prompt_ids: list[int]
    generated_ids: list[int]
    stop_reason: str  # "eos" | "max_tokens" | "context"
    # The tokens each pass over the weights produced, in order: the prompt's
    # last pass (its one token) first; the last pass may deliver fewer (the
    # generation stopped inside it).
    pass_tokens: list[int]
    pass_positions: list[int] = ()  # positions each pass ran through the weights: 1, or its guesses + 1
    guessed: int = 0  # guesses verified over the whole generation
    accepted: int = 0  # of them, kept
    shifts: int = 0  # context shifts (a rolling context, context.py)
    draft_steps: int = 0  # a draft model's steps (its catch-up included); 0 for lookup

    @property
    def passes(self) -> int:
        return len(self.pass_tokens)

    @property
    def tokens_per_pass(self) -> float:
        return len(self.generated_ids) / self.passes if self.pass_tokens else 0.0


def verify(executor: Executor, tokens: Sequence[int], pos: int) -> list:
    """The model's output at positions pos .. pos + len(tokens) - 1 (the
    firmware's tllm_model_verify): the KV cache is written at every one."""
    return [executor.step(t, pos + i, True) for i, t in enumerate(tokens)]


def accept(sampler: Sampler, outputs: list, guesses: Sequence[int], qs: Sequence | None = None) -> list[int]:
    """The pass's tokens: the guesses the sampler keeps, in order, then the
    first token that is not a guess (after the last guess: the model's own).
    qs: a draft model's q per guess (None: lookup's one-hot guesses)."""
    out: list[int] = []
    for i, logits in enumerate(outputs):
        g = guesses[i] if i < len(guesses) else -1
        t = sampler.sample_guess(logits, g, qs[i] if qs is not None and i < len(guesses) else None)
        out.append(t)
        if t != g:
            return out
    raise AssertionError("the position after the last guess always ends the pass")


@one_blas_thread()  # a contextmanager is also a decorator: each call enters it afresh
def generate_speculative(executor: Executor, prompt_ids: Sequence[int], max_new_tokens: int, max_seq: int,
                         eos_ids: Sequence[int], sampling: SamplingOptions, top_k: int = 0,
                         k: int = 0, roll=None, cached: int = 0,
                         draft: DraftModel | None = None) -> SpeculativeGeneration:
    """The engine's generation with up to k guesses per pass (k = 0: plain
    decoding, executor.generate's tokens) from the prompt-lookup draft, or
    from ``draft`` (a draft model: reference/draft.py); see the module
    docstring.  ``cached``: positions 0 .. cached - 1 of prompt_ids are in
    the executor's KV cache already (a continued conversation,
    session.Session), so the prefill starts at position ``cached``; 0 starts
    afresh (the draft's cache too; otherwise it catches up by itself).
    ``roll``: a rolling context (context.ContextRoll; None: stop at the
    context's end): after a pass whose last token sits at max_seq - 1 the KV
    caches (the draft model's too) and the token buffer (the lookup draft's
    context) shift as context.py states, before the next pass is drafted.
    BLAS runs on one thread meanwhile (blas.py: a second thread spins on a
    shared machine and slows every product)."""
    if not cached:
        executor.reset()
        if draft is not None:
            draft.reset()
    steps0 = draft.steps if draft is not None else 0
    sampler = Sampler(sampling, top_k)
    tokens = list(prompt_ids)
    prompt, out, passes, positions = list(prompt_ids), [], [], []
    guessed = accepted = shifts = 0

    def done(reason: str) -> SpeculativeGeneration:
        steps = draft.steps - steps0 if draft is not None else 0
        return SpeculativeGeneration(prompt, out, reason, passes, positions, guessed, accepted, shifts, steps)
    if max_new_tokens <= 0:
        return done("max_tokens")
    logits = None
    for pos in range(cached, len(prompt)):
        logits = executor.step(prompt[pos], pos, need_logits=pos == len(prompt) - 1)
    pending, n_pos = [sampler.sample(logits)], 1
    while True:
        passes.append(len(pending))
        positions.append(n_pos)
        for tok in pending:  # EMIT, token by token, with plain decoding's stops
            tokens.append(tok)
            out.append(tok)
            pos = len(tokens) - 1
            if tok in eos_ids:
                return done("eos")
            if len(out) >= max_new_tokens:
                return done("max_tokens")
            if pos + 1 >= max_seq and roll is None:  # the token buffer holds max_seq ids
                return done("context")
        if roll is not None and pos + 1 >= max_seq:  # only a pass's last token reaches max_seq - 1 (k_eff)
            executor.kernels.shift(roll.sinks, roll.discard, pos - roll.sinks - roll.discard)
            if draft is not None:
                draft.shift(roll.sinks, roll.discard)
            del tokens[roll.sinks:roll.sinks + roll.discard]
            pos -= roll.discard
            shifts += 1
        k_eff = min(k, max_new_tokens - len(out) - 1, max_seq - 2 - pos)
        guesses, qs = [], None
        if k_eff > 0 and draft is not None:
            guesses, qs = draft.propose(sampler, tokens, k_eff)
        elif k_eff > 0:
            guesses = lookup_draft(tokens, k_eff)
        if not guesses:
            pending, n_pos = [sampler.sample(executor.step(tokens[pos], pos))], 1
            continue
        outputs = verify(executor, [tokens[pos]] + guesses, pos)
        pending, n_pos = accept(sampler, outputs, guesses, qs), len(guesses) + 1
        guessed += len(guesses)
        accepted += len(pending) - 1


def greedy_passes(tokens: Sequence[int], n_prompt: int, k: int) -> tuple[list[int], list[int]]:
    """The passes greedy speculative decoding makes, from plain decoding's
    output alone (tokens: the prompt, then the generated tokens): a guess is
    kept exactly when it is the token plain decoding produced there, so
    (tokens per pass, positions per pass) follow without the model, for any
    k.  The guesses never reach past the last generated token: exact where
    the generation stopped at the token limit or the context's end; after an
    EOS the engine may also guess past it, so there the last pass's count may
    differ (never the number of passes)."""
    tokens = list(tokens)
    end = len(tokens)
    pos = n_prompt  # the first generated token: the prompt's pass
    produced, positions = [1], [1]
    while pos + 1 < end:
        k_eff = min(k, end - pos - 2)  # tokens still to come after this pass's own next one
        guesses = lookup_draft(tokens[:pos + 1], k_eff) if k_eff > 0 else []
        j = 0
        while j < len(guesses) and guesses[j] == tokens[pos + 1 + j]:
            j += 1
        produced.append(j + 1)
        positions.append(len(guesses) + 1 if guesses else 1)
        pos += j + 1
    return produced, positions
