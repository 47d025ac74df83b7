"""Batched prefill (DWUP, issue 14 item 5): LoweredStep -> LoweredStep, after
the stream pass and before planning.

A prompt's tokens are known before the first step runs, so they can pass
through every weight together: P tokens per pass, each weight tile read
(from flash, or from a stream buffer) and unpacked once for the P of them.
The prompt then reads the blob ceil(prompt / P) times instead of once per
token, and the q4x4 kernel pays its nibble unpacking once per P tokens
(tllm_matmat_q4x4: 0.94 instructions per MAC at P = 4 against the
matvec's 1.35).

What this pass decides, for the planner and the emitter to follow:

* `batch` (P): the tokens per pass, from the memory it costs (planning
  picks it, `compile --prefill-batch`);
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

Bit-identical by construction: tllm_matmat_q4x4 / tllm_matmat_q4 give
token p exactly tllm_matvec_*'s floats for token p (their contract,
checked by the kernel registry), every other kernel runs per token on that
token's values, and the calls run in the step's order.  So the KV cache
and the last token's logits equal the step-by-step reference's bit for bit.

Every group-wise linear has a batched kernel (q4, q4x4, and llama.cpp's
kept Q4_0 / Q4_1 / Q8_0 blocks: tllm_matmat_q40/q41/q80); a build with the
per-channel scheme's CMSIS-NN layers prefills token by token (P = 1, `why`
says so)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import UserError
from .lower import Attention, BufferDecl, BufferRef, FcS4PerChannel, LoweredStep, MatvecQ4x4, refs_of
from .stream import StreamedMatvecQ4x4

MAX_BATCH = 4  # TLLM_MAX_BATCH: the assembly's registers hold four tokens' accumulators (tllm_kernels_m7.h)
CHOICES = ("auto", "1", "2", "3", "4")
CHUNK_OUT = "prefill.chunk_out"
TILE_SPILL = 3  # floats a 4-row tile kernel may write past the last token's last row (tllm_matmat_q4x4)
BATCHED_KINDS = ("activation", "scratch")
AUTO_CONTEXT_TENTHS = 9  # --max-seq auto: a batch may cost at most a tenth of the context P = 1 gets


@dataclass(frozen=True)
class PrefillPlan:
    """The pass's decisions, carried by the LoweredStep and Program."""

    batch: int  # P: prompt tokens per weight pass (1: token by token)
    batched: frozenset  # buffer names that hold P tokens' values (token p at p x the one-token count)
    why: str  # one sentence: why this P
    padded: frozenset = frozenset()  # batched linear outputs whose rows are not whole 4-row tiles: +3 floats

    def planned_count(self, name: str, count: int) -> int:
        """A buffer's element count in the plan, from its one-token count."""
        if name not in self.batched:
            return count
        return self.batch * count + (TILE_SPILL if name in self.padded else 0)


def planned_count(plan: "PrefillPlan | None", name: str, count: int) -> int:
    return count if plan is None else plan.planned_count(name, count)


def unbatchable(step: LoweredStep) -> str:
    """Why the layers cannot run P tokens per pass ("" when they can)."""
    for call in step.body_calls:
        if isinstance(call.args, FcS4PerChannel):
            return "the per-channel scheme's CMSIS-NN layers have no batched kernel"
    return ""


def _batched_names(step: LoweredStep) -> set[str]:
    kinds = {d.name: d.kind for d in step.decls}
    names: set[str] = set()
    for call in step.body_calls:
        skip = {call.args.q8.name, call.args.scores.name} if isinstance(call.args, Attention) else set()
        names |= {r.name for r in refs_of(call.args, BufferRef) if kinds[r.name] in BATCHED_KINDS} - skip
    return names


def chunk_out_floats(step: LoweredStep, batch: int) -> int:
    """A streamed chunk's output rows for `batch` tokens, plus the 3 floats the
    4-row tile kernels may write past the last row (tllm_matmat_q4x4's contract)."""
    rows = max((call.args.chunk_rows for call in step.body_calls if isinstance(call.args, StreamedMatvecQ4x4)),
               default=0)
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
    names = _batched_names(step)
    outs = [a.matvec.out if isinstance(a, StreamedMatvecQ4x4) else a.out
            for a in (call.args for call in step.body_calls) if isinstance(a, (MatvecQ4x4, StreamedMatvecQ4x4))]
    padded = frozenset(o.name for o in outs if o.count % 4)
    plan = PrefillPlan(batch, frozenset(names), "", padded)
    decls = [dataclasses.replace(d, count=plan.planned_count(d.name, d.count)) for d in step.decls]
    out = chunk_out_floats(step, batch)
    if out:
        decls.append(BufferDecl(CHUNK_OUT, "float", out, "scratch", "always"))
    why = (f"The prompt is prefilled {batch} tokens per pass over the weights: each weight tile is read and "
           f"unpacked once for the {batch} (tllm_matmat_*), attention runs token by token in order.")
    return dataclasses.replace(step, decls=tuple(decls), prefill=dataclasses.replace(plan, why=why))


def parse_batch(text: str | int) -> str | int:
    """`--prefill-batch` -> "auto" or 1..MAX_BATCH."""
    t = str(text)
    if t not in CHOICES:
        raise UserError(f"--prefill-batch {text}: choose auto or 1..{MAX_BATCH}")
    return t if t == "auto" else int(t)


# --- choosing P against the plan ------------------------------------------------

def plan_prefill(shape, requested_seq, budget: int, board, stream_mode: str, chunk_bytes: int | None,
                 batch: str | int = "auto", memo: dict | None = None):
    """stream.plan_streamed with the prefill batch in the plan.  `auto` takes
    the largest P (4..1) whose plan fits the context asked for (and the code
    flash); with `--max-seq auto`, the largest P that keeps at least
    AUTO_CONTEXT_TENTHS / 10 of the context P = 1 would get (a batch costs
    P x the layers' activations, which comes out of the KV cache).  memo:
    P -> plan_streamed's result or its UserError, shared with prefill_rows.
    Returns (PlanResult, StreamOptions | None); the PlanResult says which P
    and why."""
    from .lower import lower_step
    from .planning import AUTO

    batch = parse_batch(batch)
    memo = {} if memo is None else memo
    reason = unbatchable(lower_step(shape, 8, shape.sampler))
    if batch != "auto":
        if batch > 1 and reason:
            raise UserError(f"--prefill-batch {batch}: {reason}; use --prefill-batch 1 (or auto)")
        res, opts = _planned(memo, batch, shape, requested_seq, budget, board, stream_mode, chunk_bytes)
        return dataclasses.replace(res, prefill_batch=batch, prefill_why=f"--prefill-batch {batch}"), opts
    one = _planned(memo, 1, shape, requested_seq, budget, board, stream_mode, chunk_bytes)
    if reason:
        return dataclasses.replace(one[0], prefill_why=f"auto: 1 ({reason})"), one[1]
    floor = -(-one[0].plan.max_seq * AUTO_CONTEXT_TENTHS // 10) if requested_seq == AUTO else 0
    for p in range(MAX_BATCH, 1, -1):
        try:
            res, opts = _planned(memo, p, shape, requested_seq, budget, board, stream_mode, chunk_bytes)
        except UserError:
            continue
        if res.code is not None and not res.code.fits:
            continue  # the batched kernels would not fit the code flash: a smaller P saves nothing, 1 does
        if res.plan.max_seq >= floor:
            note = (f"auto: {p} (the largest whose plan fits)" if requested_seq != AUTO else
                    f"auto: {p} ({res.plan.max_seq} tokens of context against {one[0].plan.max_seq} at 1)")
            return dataclasses.replace(res, prefill_batch=p, prefill_why=note), opts
    return dataclasses.replace(one[0], prefill_why="auto: 1 (no larger batch fits beside the context)"), one[1]


def _planned(memo: dict, p: int, shape, requested_seq, budget: int, board, stream_mode: str, chunk_bytes):
    """plan_streamed at prefill batch p, once per p (a UserError is kept and raised again)."""
    from .stream import plan_streamed

    if p not in memo:
        try:
            memo[p] = plan_streamed(dataclasses.replace(shape, prefill_batch=p), requested_seq, budget, board,
                                    stream_mode, chunk_bytes)
        except UserError as e:
            memo[p] = e
    if isinstance(memo[p], UserError):
        raise memo[p]
    return memo[p]


def prefill_rows(shape, requested_seq, budget: int, board, stream_mode: str, chunk_bytes: int | None,
                 memo: dict | None = None) -> list[dict]:
    """`plan`'s trade-off: per P, the plan's bytes and context, and the
    predicted milliseconds per prompt token (timing.py, DWUP on a board that
    streams from QUADSPI, else None).  memo: plan_prefill's."""
    from . import timing

    w = timing.estimated_workload(shape.config, shape.group_size) if board.qspi_flash is not None else None
    rows = []
    for p in range(1, MAX_BATCH + 1):
        try:
            res = _planned({} if memo is None else memo, p, shape, requested_seq, budget, board, stream_mode,
                           chunk_bytes)[0]
            total, seq = res.plan.total_bytes, res.plan.max_seq
        except UserError:
            total = seq = None
        ms = (timing.predict(board, w, prefill_batch=p)["prefill"]["dwup"]["ms_per_token"] if w else None)
        rows.append({"batch": p, "total_bytes": total, "max_seq": seq, "dwup_ms_per_prompt_token": ms})
    return rows


def prefill_text(res, rows: list[dict]) -> str:
    lines = [f"  prefill batch {res.prefill_batch} ({res.prefill_why}); the trade-off:",
             f"  {'P':>3} {'RAM':>10} {'max_seq':>8} {'DWUP ms/prompt token':>21}"]
    for r in rows:
        ram = f"{r['total_bytes']:,}" if r["total_bytes"] is not None else "no fit"
        ms = f"{r['dwup_ms_per_prompt_token']:,.2f}" if r["dwup_ms_per_prompt_token"] is not None else "-"
        lines.append(f"  {r['batch']:>3} {ram:>10} {r['max_seq'] or '-':>8} {ms:>21}")
    return "\n".join(lines) + "\n"
