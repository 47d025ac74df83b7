"""The trade-off tables `tinyllm-gen plan` prints beside its choice: per
stream chunk size and per prefill batch, what the plan costs and what the
timing model predicts; and what a chunked sampler saves against the full
one.  Each row is a plan of search.py's, never a second model of memory."""
from __future__ import annotations

import dataclasses

from ..abi import MAX_BATCH
from ..errors import UserError
from ..lower.prefill import batch_step
from ..lower.records import LoweredStep, StepSource, StreamOptions
from ..lower.stream import stream_step
from ..plan.lifetimes import CTYPE_BYTES, align_up
from ..plan.traffic import step_traffic
from ..timing import predict
from .search import FitRequest, Fitted, Planner, batched, fit_stream

TRADE_OFF_CHUNKS = (4 * 1024, 8 * 1024, 16 * 1024, 32 * 1024)
SAMPLER_KINDS = ("logits", "topk", "sampler")


def stream_rows(base: LoweredStep, req: FitRequest, batch: int, kv_in_sdram: bool = False) -> list[dict]:
    """Per chunk size, the two stream buffers' bytes, the longest context
    that still fits beside them (the KV cache where the fit put it), and the
    predicted DWUP tokens/s (one pipeline fill per token, since the prefetch
    crosses matrices)."""
    board = req.board
    planner = Planner(board, req.budget)
    planner = planner.with_kv(planner.sdram if kv_in_sdram else None)
    w = step_traffic(base).workload() if board.qspi_flash is not None else None
    rows = []
    for size in TRADE_OFF_CHUNKS:
        step = batch_step(stream_step(base, StreamOptions("all", size), base.config.max_seq), batch)
        seq = planner.largest_fitting_seq(step, base.config.max_seq)
        tok_s = predict(board, w, chunk_bytes=size)["modes"]["dwup"]["tokens_per_s"] if w else None
        rows.append({"chunk_bytes": size, "stream_buffer_bytes": 2 * step.stream.buffer_bytes,
                     "max_seq": seq, "dwup_tokens_per_s": tok_s})
    return rows


def stream_text(rows: list[dict]) -> str:
    lines = ["  weight stream trade-off (two buffers, the prefetch crossing matrices):",
             f"  {'chunk':>8} {'buffers':>9} {'max_seq':>8} {'DWUP tok/s':>11}"]
    for r in rows:
        tok = f"{r['dwup_tokens_per_s']:.2f}" if r["dwup_tokens_per_s"] is not None else "-"
        lines.append(f"  {r['chunk_bytes']:>8,} {r['stream_buffer_bytes']:>9,} {r['max_seq'] or 'none':>8} {tok:>11}")
    return "\n".join(lines) + "\n"


def prefill_rows(base: LoweredStep, src: StepSource, req: FitRequest, memo: dict) -> list[dict]:
    """Per P, the plan's bytes and context, and the predicted milliseconds
    per prompt token (DWUP on a board that streams from QUADSPI, else None).
    memo: search.fit's, so each P is planned once."""
    board = req.board
    planner = Planner(board, req.budget)
    w = step_traffic(base).workload() if board.qspi_flash is not None else None
    rows = []
    for p in range(1, MAX_BATCH + 1):
        try:
            res = batched(memo, planner, base, src, req, p)
            total, seq = res.plan.total_bytes, res.plan.max_seq
        except UserError:
            total = seq = None
        ms = predict(board, w, prefill_batch=p)["prefill"]["dwup"]["ms_per_token"] if w else None
        rows.append({"batch": p, "total_bytes": total, "max_seq": seq, "dwup_ms_per_prompt_token": ms})
    return rows


def prefill_text(fitted: Fitted, rows: list[dict]) -> str:
    lines = [f"  prefill batch {fitted.prefill_batch} ({fitted.prefill_why}); the trade-off:",
             f"  {'P':>3} {'RAM':>10} {'max_seq':>8} {'DWUP ms/prompt token':>21}"]
    for r in rows:
        ram = f"{r['total_bytes']:,}" if r["total_bytes"] is not None else "no fit"
        ms = f"{r['dwup_ms_per_prompt_token']:,.2f}" if r["dwup_ms_per_prompt_token"] is not None else "-"
        lines.append(f"  {r['batch']:>3} {ram:>10} {r['max_seq'] or '-':>8} {ms:>21}")
    return "\n".join(lines) + "\n"


def sampler_saving(full_base: LoweredStep, src: StepSource, req: FitRequest, fitted: Fitted) -> dict:
    """What `--sampler greedy|topk:K` saves against the full sampler, from
    planning both: the sampler's own buffers and the plan's totals (same
    context and batch; 0 when the full sampler does not fit).  full_base:
    the same graph lowered with the full sampler."""
    plan = fitted.plan
    full_own = sum(align_up(d.count * CTYPE_BYTES[d.ctype]) for d in full_base.decls if d.kind in SAMPLER_KINDS)
    try:
        full = fit_stream(Planner(req.board, req.budget), full_base, src,
                          dataclasses.replace(req, max_seq=plan.max_seq), fitted.prefill_batch, plan.max_seq)
        full_total = full.plan.total_bytes
    except UserError:
        full_total = 0
    own = sum(b.size for b in plan.buffers if b.request.kind in SAMPLER_KINDS)
    return {"sampler_bytes": own, "total_bytes": plan.total_bytes, "full_sampler_bytes": full_own,
            "full_sampler_total_bytes": full_total, "saved_bytes": full_total - plan.total_bytes if full_total else None}
