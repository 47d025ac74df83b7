"""The batched prefill pass: LoweredStep -> LoweredStep, after the stream
pass and before planning.

A prompt's tokens are known before the first step runs, so they can pass
through every weight together: P tokens per pass, each weight tile read
(from flash, or from a stream buffer) and unpacked once for the P of them.
The prompt then reads the blob ceil(prompt / P) times instead of once per
token, and the q4x4 kernel pays its nibble unpacking once per P tokens.

What this pass decides, for the planner and the emitter to follow:

* `batch` (P): the tokens per pass (fit/search.py picks it, `compile
  --prefill-batch`);
* which buffers hold P tokens' values (`batched`): every activation and
  activation stream the layers' calls read or write.  Token p's value sits
  at p x its one-token count; the decode step uses token 0's, so one plan
  serves both.  Not batched: the KV cache (indexed by position), the
  attention's query and score scratch (attention runs token by token, in
  order: token p stores its k and v, then attends over positions <= pos + p,
  which is causal inside the batch exactly as step-by-step decoding), and
  the head's buffers (the final norm and the classifier run once, for the
  last prompt token: its logits are the only ones sampled);
* with a weight stream, one `CHUNK_OUT` buffer: a streamed chunk's rows
  for the P tokens land there and are copied to each token's vector (the
  batched kernel writes token-major over the rows it is given).

Bit-identical by construction: the batched kernels give token p exactly the
matvec's floats for token p (their contract, checked by the kernel
registry), every other kernel runs per token on that token's values, and
the calls run in the step's order.  So the KV cache and the last token's
logits equal the step-by-step reference's bit for bit.  A kernel without a
batched form (the per-channel scheme's CMSIS-NN layers) says so in its
UNBATCHABLE, and the prompt is prefilled token by token."""
from __future__ import annotations

import dataclasses

from ..abi import MAX_BATCH, TILE_SPILL
from ..errors import UserError
from ..kernels.refs import BufferRef, refs_of
from .records import BufferDecl, LoweredStep, PrefillPlan

CHOICES = ("auto",) + tuple(str(p) for p in range(1, MAX_BATCH + 1))
CHUNK_OUT = "prefill.chunk_out"
BATCHED_KINDS = ("activation", "scratch")


def unbatchable(step: LoweredStep) -> str:
    """Why the layers cannot run P tokens per pass ("" when they can)."""
    return next((call.args.UNBATCHABLE for call in step.body_calls if call.args.UNBATCHABLE), "")


def _batched_names(step: LoweredStep) -> set[str]:
    kinds = {d.name: d.kind for d in step.decls}
    names: set[str] = set()
    for call in step.body_calls:
        refs = {r.name for r in refs_of(call.args, BufferRef) if kinds[r.name] in BATCHED_KINDS}
        names |= refs - call.args.per_token_scratch()
    return names


def chunk_out_floats(step: LoweredStep, batch: int) -> int:
    """A streamed chunk's output rows for `batch` tokens, plus the floats the
    4-row tile kernels may write past the last row (TILE_SPILL)."""
    rows = max((call.args.streamed_rows() for call in step.body_calls), default=0)
    return batch * rows + TILE_SPILL if rows else 0


def batch_step(step: LoweredStep, batch: int) -> LoweredStep:
    """Declare the P-token buffers (their counts times P) and record the plan."""
    if not 1 <= batch <= MAX_BATCH:
        raise UserError(f"--prefill-batch {batch}: choose 1..{MAX_BATCH} or auto")
    reason = unbatchable(step)
    if batch > 1 and reason:
        raise UserError(f"--prefill-batch {batch}: {reason}; use --prefill-batch 1 (or auto)")
    if batch == 1:
        why = (f"The prompt is prefilled token by token: {reason}." if reason else
               "The prompt is prefilled token by token (--prefill-batch 1).")
        return dataclasses.replace(step, prefill=PrefillPlan(1, frozenset(), why))
    outs = [o for o in (call.args.tile_output() for call in step.body_calls) if o is not None]
    padded = frozenset(o.name for o in outs if o.count % 4)
    why = (f"The prompt is prefilled {batch} tokens per pass over the weights: each weight tile is read and "
           f"unpacked once for the {batch} (tllm_matmat_*), attention runs token by token in order.")
    plan = PrefillPlan(batch, frozenset(_batched_names(step)), why, padded)
    decls = [dataclasses.replace(d, count=plan.planned_count(d.name, d.count)) for d in step.decls]
    out = chunk_out_floats(step, batch)
    if out:
        decls.append(BufferDecl(CHUNK_OUT, "float", out, "scratch", "always"))
    return dataclasses.replace(step, decls=tuple(decls), prefill=plan)


def parse_batch(text: str | int) -> str | int:
    """`--prefill-batch` -> "auto" or 1..MAX_BATCH."""
    t = str(text)
    if t not in CHOICES:
        raise UserError(f"--prefill-batch {text}: choose auto or 1..{MAX_BATCH}")
    return t if t == "auto" else int(t)
