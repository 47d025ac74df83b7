"""How a draft model does beside its target, measured at compile time
(`compile/plan TARGET --speculate draft:DRAFT`): per k, the passes, tokens,
positions and draft steps greedy speculative decoding makes, from the float
reference over calibration documents (compile_draft.py passes the KV
centres' calibration text, quant/kv_center.kv_calibration_documents, and
turns the sums into the timing model's Acceptance).

Greedy speculative decoding keeps a guess exactly when it is the token plain
decoding produces there, and while the guesses are kept the draft's context
is plain decoding's own tokens.  So one plain greedy generation of the
target and one step of the draft per position along it (teacher-forced: its
argmax after each prefix) give every pass of every k, as
reference/speculative.greedy_passes does for the lookup draft: from
position pos the draft's guesses are its argmaxes at pos, pos + 1, ..., kept
while they match the target's next tokens.  The guesses after the first
wrong one are rejected whatever they are, so they need not be computed, but
they are counted: the draft steps k_eff times per pass.  Its catch-up (the
positions its cache lacks: the last guess of a pass that kept all of them)
is counted as the engine steps it (reference/draft.py), the prompt's
catch-up left out (that is prefill).

Float, not the quantized kernels: `plan` does not quantize and must choose
the k compile chooses, and a float step is about 10x cheaper (story-260k:
0.37 ms against 4 ms per step here).  MEASURE_DOCS documents, each its
first MEASURE_PROMPT tokens as the prompt and MEASURE_NEW new tokens: the
positions stay below MEASURE_WINDOW whatever the build's context, so the
figure is the same at every context (--max-seq auto searches it)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import Graph
from .blas import one_blas_thread
from .executor import Executor, FloatKernels, generate
from .sampler import SamplingOptions

MEASURE_DOCS = 4
MEASURE_PROMPT = 16
MEASURE_NEW = 48
MEASURE_WINDOW = MEASURE_PROMPT + MEASURE_NEW


def draft_passes(tokens: Sequence[int], guesses: Sequence[int], n_prompt: int, k: int) -> dict[str, int]:
    """Greedy speculative decoding's passes with a draft model over plain decoding's `tokens` (the prompt,
    then the generated tokens): guesses[p] is the draft's argmax after tokens[:p + 1].  Returns the sums
    over the passes: passes, tokens produced, draft steps with the head, catch-up steps, and "P<n>": the passes
    over n positions."""
    end = len(tokens)
    # pos: the first generated token (the prompt's pass produced it); cached: the rows the draft's cache
    # holds right, counted from the prompt's end (its catch-up over the prompt is prefill)
    pos, cached = n_prompt, n_prompt
    out = {"passes": 1, "tokens": 1, "draft_steps": 0, "catchup_steps": 0, "P1": 1}
    while pos + 1 < end:
        k_eff = min(k, end - pos - 2)
        j = 0
        if k_eff > 0:
            out["catchup_steps"] += pos - cached
            out["draft_steps"] += k_eff
            while j < k_eff and guesses[pos + j] == tokens[pos + 1 + j]:
                j += 1
            cached = pos + 1 + min(j, k_eff - 1)  # rows pos .. pos + k_eff - 1 fed; those after a miss are wrong
        n_pos = k_eff + 1 if k_eff > 0 else 1
        out["passes"] += 1
        out["tokens"] += j + 1
        out[f"P{n_pos}"] = out.get(f"P{n_pos}", 0) + 1
        pos += j + 1
    return out


def draft_guesses(draft: Executor, tokens: Sequence[int], n_prompt: int, to_draft) -> list[int]:
    """The draft's greedy token (a target id) after each prefix tokens[:p + 1], p >= n_prompt - 1; -1 before."""
    draft.reset()
    out = [-1] * len(tokens)
    for p, t in enumerate(tokens[:-1]):
        logits = draft.step(int(to_draft[t]), p, need_logits=p >= n_prompt - 1)
        if logits is not None:
            out[p] = int(np.argmax(logits))  # the first maximum, as the greedy sampler takes it
    return out


@one_blas_thread()  # as the reference's generations: a second BLAS thread spins on a shared machine
def pass_totals(target: Graph, draft: Graph, vmap, docs: Sequence[Sequence[int]], ks: Sequence[int]) -> dict:
    """k -> draft_passes' sums over the documents (see the module docstring), and "documents": how many ran."""
    window = measure_window(target, draft)
    docs = [d for d in docs if len(d) > 1][:MEASURE_DOCS]
    t_ex, d_ex = Executor(target, FloatKernels(target, window)), Executor(draft, FloatKernels(draft, window))
    totals: dict = {k: {} for k in ks}
    for doc in docs:
        prompt = list(doc[:min(MEASURE_PROMPT, window // 4, len(doc) - 1) or 1])
        gen = generate(t_ex, prompt, window - len(prompt), window, target.config.eos_ids, SamplingOptions())
        tokens = prompt + list(gen.generated_ids)
        guesses = [int(vmap.to_target[g]) if g >= 0 else -1
                   for g in draft_guesses(d_ex, tokens, len(prompt), vmap.to_draft)]
        for k in ks:
            for key, v in draft_passes(tokens, guesses, len(prompt), k).items():
                totals[k][key] = totals[k].get(key, 0) + v
    return dict(totals, documents=len(docs))


def measure_window(target: Graph, draft: Graph) -> int:
    """The positions the measurement runs (the calibration documents are cut to it)."""
    return min(MEASURE_WINDOW, target.config.max_seq, draft.config.max_seq)
