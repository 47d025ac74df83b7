"""The speculation pass: LoweredStep -> LoweredStep, after the prefill pass
and before planning (`compile --speculate`).

Every real model here is flash-bound: a decoded token reads every weight
once.  Speculative decoding guesses the next k tokens cheaply (the
prompt-lookup draft, firmware/tllm_draft.h: no weights) and then runs the
model once over the last accepted token and the k guesses, P = k + 1
positions through every weight together: the verification pass
(tllm_model_verify).  The engine keeps the guesses the model itself would
have produced, and the model's own token after them
(reference/speculative.py defines it; greedy output is plain decoding's).

The verification pass is the batched prefill's body followed by the head
on every position, so it needs no buffer of its own for the layers: P <=
the prefill batch, and the body's P-token buffers (lower/prefill.py) are
its.  What this pass decides and declares, for the planner and the
emitter:

* `k` (1 .. abi.SPECULATE_MAX_K and below the prefill batch; fit/search.py
  picks it with the timing model, or `--speculate lookup:k`);
* the head's buffers (the final norm's output and its int8 copy, the
  classifier's logits or its chunk, a top-K build's sets) hold P positions'
  values (`batched`): position p at p x its one-token count, position 0 is
  the decode step's, so one plan serves all three entry points;
* the classifier's per-position results (`Kernel.verify_outputs`: a greedy
  build's tokens, a top-K build's set sizes), one entry per position;
* with a weight stream whose classifier is a plain matvec (the full
  sampler), the chunk output buffer grows to the classifier's chunk rows
  for P positions (its chunks' rows land there, as the layers' do).

A full-sampler build verifies P x vocab logits: where that does not fit
the plan, the search turns speculation off (or refuses an explicit k)."""
from __future__ import annotations

import dataclasses

from ..abi import SPECULATE_MAX_K, TILE_SPILL
from ..errors import UserError
from ..kernels.refs import BufferRef, refs_of
from .prefill import CHUNK_OUT
from .records import BufferDecl, KernelCall, LoweredStep, SpeculatePlan

HEAD_KINDS = ("activation", "scratch", "logits", "topk")


def head_buffers(step: LoweredStep) -> set[str]:
    """The buffers only the head uses (the layers' P-token buffers are the body's)."""
    kinds = {d.name: d.kind for d in step.decls}
    body = step.prefill.batched if step.prefill is not None else frozenset()
    return {r.name for call in step.head_calls for r in refs_of(call.args, BufferRef)
            if kinds[r.name] in HEAD_KINDS and r.name not in body and r.name != CHUNK_OUT}


def speculate_step(step: LoweredStep, k: int, draft: str = "lookup") -> LoweredStep:
    """Declare the verification pass's buffers for k guesses and record the plan."""
    if draft != "lookup":
        raise UserError(f"--speculate {draft}: not built yet; use --speculate lookup or off")
    if not 1 <= k <= SPECULATE_MAX_K:
        raise UserError(f"--speculate lookup:{k}: choose k in 1..{SPECULATE_MAX_K}")
    if step.prefill_batch < k + 1:
        raise UserError(f"--speculate lookup:{k} verifies {k + 1} positions on the batched prefill's buffers, "
                        f"but the prefill batch is {step.prefill_batch}: use --prefill-batch {k + 1} "
                        f"or --speculate lookup:{step.prefill_batch - 1}" if step.prefill_batch > 1 else
                        f"--speculate lookup:{k}: the prompt is prefilled token by token (prefill batch 1), and "
                        "verification runs on the batched prefill's buffers: use --prefill-batch 2..4")
    P = k + 1
    names = head_buffers(step)
    padded = {o.name for o in (call.args.tile_output() for call in step.head_calls)
              if o is not None and o.name in names and o.count % 4}
    why = (f"Speculative decoding with the prompt-lookup draft: up to {k} guesses per pass, verified with the last "
           f"accepted token as {P} positions through every weight together (tllm_model_verify).")
    plan = SpeculatePlan(draft, k, frozenset(names), why, frozenset(padded))
    decls = [dataclasses.replace(d, count=plan.planned_count(d.name, d.count)) for d in step.decls]
    classifier = step.calls[-1]
    outs = classifier.args.verify_outputs()
    refs = {o.name: BufferRef(o.name, o.ctype, P) for o in outs}
    decls += [BufferDecl(o.name, o.ctype, P, "verify") for o in outs]
    decls = _with_chunk_out(step, decls, P)
    calls = step.calls[:-1] + (KernelCall(classifier.args.with_verify_outputs(refs), classifier.layer,
                                          classifier.label),)
    return dataclasses.replace(step, calls=calls, decls=tuple(decls), speculate=plan)


def _with_chunk_out(step: LoweredStep, decls: list[BufferDecl], P: int) -> list[BufferDecl]:
    """A streamed plain classifier's chunk rows for P positions land in the
    prefill's chunk output buffer: grow it (or declare it) to hold them."""
    rows = max((call.args.streamed_rows() for call in step.head_calls), default=0)
    if not rows:
        return decls
    need = P * rows + TILE_SPILL
    have = next((d for d in decls if d.name == CHUNK_OUT), None)
    if have is None:
        return decls + [BufferDecl(CHUNK_OUT, "float", need, "scratch", "always")]
    return [dataclasses.replace(d, count=max(d.count, need)) if d.name == CHUNK_OUT else d for d in decls]


def parse_speculate(text: str) -> tuple[str, int | None]:
    """`--speculate` -> (draft, k or None): "off", "auto", "lookup[:k]", "draft:MODEL[:k]" (k as
    parse_draft defaults it)."""
    t = str(text)
    if t in ("off", "auto"):
        return t, None
    kind, _, rest = t.partition(":")
    if kind == "lookup":
        if rest == "":
            return "lookup", None
        if not rest.isdigit() or str(int(rest)) != rest or not 1 <= int(rest) <= SPECULATE_MAX_K:
            raise UserError(f"--speculate {t}: k must be 1..{SPECULATE_MAX_K} (lookup:K)")
        return "lookup", int(rest)
    if kind == "draft":  # the model's path: parse_draft (compile_draft.py builds it beside the target)
        return "draft", parse_draft(t)[1]
    raise UserError(f"--speculate {t} is not known: choose auto, off, lookup[:k] (k in 1..{SPECULATE_MAX_K}) "
                    "or draft:MODEL[:k]")


def parse_draft(text: str, default: int | None = SPECULATE_MAX_K) -> tuple[str, int | None] | None:
    """`--speculate draft:MODEL[:k]` -> (MODEL, k), None for any other value.
    k defaults to `default`: SPECULATE_MAX_K, the most guesses the firmware
    verifies, or None where the timing model chooses it (compile, plan and
    the reference, compile_draft.py); a MODEL path holding a
    colon is read whole unless its last part is a k."""
    t = str(text)
    if not t.startswith("draft:"):
        return None
    rest = t[len("draft:"):]
    path, colon, tail = rest.rpartition(":")
    if not colon or not tail.isdigit():
        path, tail = rest, ""
    if not path:
        raise UserError(f"--speculate {t}: name the draft model (draft:MODEL or draft:MODEL:K)")
    if tail and (str(int(tail)) != tail or not 1 <= int(tail) <= SPECULATE_MAX_K):
        raise UserError(f"--speculate {t}: k must be 1..{SPECULATE_MAX_K} (draft:MODEL:K)")
    return path, int(tail) if tail else default


def built_k(options: dict) -> int:
    """The guesses per pass a build verifies, from its manifest's options
    ("speculate": "lookup:k" or "draft:MODEL:k", written only when
    speculation is on; 0: plain decoding)."""
    return parse_speculate(options.get("speculate", "off"))[1] or 0
