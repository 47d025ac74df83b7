"""The searches over one lowered step: which prefill batch, stream chunk,
pinned weights and context to build.  The one place that tries
candidates; lowering runs once before it (lower/step.py) and the planner
places what it is handed (plan/memory.py).

From the outside in:

* prefill batch (`--prefill-batch auto`): the largest P (4..1) whose plan
  fits the context asked for (and the code flash); with `--max-seq auto`,
  the largest P that keeps at least AUTO_CONTEXT_TENTHS / 10 of the context
  P = 1 gets (a batch costs P x the layers' activations, which comes out of
  the KV cache);
* stream chunk (`--stream all|auto`): the timing model's first choice
  (`chunk_sizes`), halved while the plan does not fit;
* pins (`--stream auto`): what fits in the SRAM the plan leaves (first-fit
  decreasing by flash bytes saved, lower/stream.choose_pinned), shrunk
  until the plan with the pinned buffer fits;
* context (`--max-seq auto`): the largest that fits (`largest_fitting_seq`:
  interpolation on the bytes over, then bisection); no `--max-seq`: the
  model's context where it fits, else the longest the board holds
  (`longest_context`: as auto, the KV cache in SDRAM on a board that has it
  unless `--kv-region sram`), said in the plan's note;
* where the KV cache goes (`--kv-region`, on a board with SDRAM): sram (the
  512 KiB plan), sdram (the KV cache alone in the SDRAM region, outside the
  RAM budget), or auto (the default): SRAM when the context asked for fits
  there (with --max-seq auto, the SRAM figure), else SDRAM;
* speculation (`--speculate auto|lookup[:k]`, after the rest): the guesses
  per pass k <= P - 1 that the timing model predicts the most decode
  tokens/s for (timing.choose_k, at the measured acceptance of the
  prompt-lookup draft, or with `--speculate draft:MODEL` the draft model's
  price and acceptance: FitRequest.draft_model), the fastest whose plan fits beside the same
  context (with `--max-seq auto`: within AUTO_CONTEXT_TENTHS of plain
  decoding's); `auto` only where it beats plain decoding by
  SPECULATE_MARGIN, off (with the reason) otherwise.

Each candidate is the base step with the passes applied (lower/stream.py,
lower/prefill.py: cheap rewrites of the step), its lifetimes derived once
(plan/lifetimes.py) and placed at each context tried."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..abi import MAX_BATCH
from ..board import Board
from ..errors import UserError
from ..kernels import Attention
from ..lower.prefill import batch_step, unbatchable
from ..lower.records import LoweredStep, StepSource, StreamOptions
from ..lower.speculate import speculate_step
from ..lower.step import with_kv_bits
from ..quant.kv import KV4, KV8, KV8V4
from ..lower.stream import MODES, choose_pinned, pin_candidates, stream_step
from ..plan.codesize import CodeFlash, check_code_flash, code_flash
from ..plan.lifetimes import Lifetimes, lifetimes_of
from ..plan.memory import CANARY_BYTES, MIN_SEQ, MemoryPlan, plan_lifetimes, what_is_over
from ..plan.regions import check_budget
from ..plan.weights_size import weights_blob_bytes
from ..plan.traffic import step_traffic
from ..timing import (LOOKUP_ACCEPTANCE, Acceptance, DraftCost, build_mode, choose_k, predict,
                      speculative_tokens_per_s)
from ..vocab import vocab_goes_to_weights, vocab_nbytes

AUTO = "auto"
AUTO_CONTEXT_TENTHS = 9  # --max-seq auto: a batch may cost at most a tenth of the context P = 1 gets
INTERPOLATION_ROUNDS = 4  # then plain bisection: the plan's bytes need not be linear in the context
CHUNK_FALLBACK = (16 * 1024, 8 * 1024, 4 * 1024, 2 * 1024, 1024)
CHUNK_CANDIDATES = (1024, 2048, 4096, 8192, 16 * 1024, 32 * 1024)
CHUNK_TOLERANCE = 0.005  # a chunk within 0.5% of the best predicted tokens/s is as good: the smallest such wins
PIN_ROUNDS = 8  # the pinned buffer changes the placement: shrink the SRAM offered this many times at most
KV_REGIONS = ("auto", "sram", "sdram")
SPECULATE_MARGIN = 0.05  # --speculate auto: on only where the timing model predicts 5% more decode tokens/s


@dataclass(frozen=True)
class FitRequest:
    """What the user asked for that the searches decide over."""

    board: Board
    budget: int
    max_seq: int | str | None = None  # None: the model's context; "auto": the longest that fits
    stream: str = "off"  # off | all | auto
    stream_chunk: int | None = None  # bytes per chunk; None: the timing model's choice
    prefill_batch: str | int = "auto"  # "auto" or 1..MAX_BATCH
    vocab: tuple[int, int] | None = None  # (tokens, text bytes) the board prints; None: unknown (no tokenizer)
    unroll_layers: bool = False  # compile --unroll-layers (the code flash)
    kv_region: str = "auto"  # sram | sdram | auto (KV_REGIONS)
    speculate: tuple[str, int | None] = ("off", None)  # (off | auto | lookup, k or None), lower/speculate.py
    rolling: bool = False  # compile --context-policy roll (context.py): the shift kernels' code
    # `--speculate draft:MODEL` (compile_draft.py): the draft model's step and its measured acceptance, which
    # price the k (speculation_ks) instead of the prompt-lookup draft's; None: lookup
    draft_model: tuple[Acceptance, DraftCost] | None = None
    # False: a plan that does not fit is refused without the search for what would fit (Planner.explain_over):
    # for a caller that only asks whether it fits (compile_draft.fit_pair's context search)
    explain: bool = True


@dataclass(frozen=True)
class Fitted:
    """What the searches chose: the step with its passes, its plan, and the
    checks of the flash it needs."""

    step: LoweredStep  # the stream and prefill passes applied: what bind and emit get
    plan: MemoryPlan
    weights_bytes: int
    weights_capacity: int | None  # bytes the board holds for weights (None: no limit)
    seq_note: "SeqNote"  # what --max-seq auto chose (and the other KV precision's figure, on demand)
    vocab_in_weights: bool = False  # the vocabulary goes into the weights blob (vocab.py)
    code: CodeFlash | None = None  # the code-flash estimate; None on the host
    prefill_why: str = ""  # how the prefill batch was chosen
    stream: StreamOptions | None = None  # the stream options planned (None: weights in place)
    speculate_why: str = ""  # how speculation was decided ("" when --speculate off)
    plain: "Fitted | None" = None  # with speculation: the plan plain decoding would have (what it costs)
    # the request as fit resolved it: the one asked, or, where no --max-seq was given and the model's context
    # does not fit, longest_context's (what the trade-off tables after the fit must be planned with)
    request: "FitRequest | None" = None

    @property
    def prefill_batch(self) -> int:
        return self.step.prefill_batch

    @property
    def trade_off(self) -> str:
        return self.seq_note.text()


class Planner:
    """Plans of candidate steps on one board and budget, the KV cache in SRAM
    or (kv_region) in that external region; each step's lifetimes are
    derived once, whatever the contexts tried."""

    def __init__(self, board: Board, budget: int, kv_region: str | None = None, _lifetimes: dict | None = None,
                 explain: bool = True):
        self.board, self.budget, self.mem, self.stack = board, budget, board.memory, board.stack_bytes
        self.kv_region, self.explain = kv_region, explain
        self._lifetimes: dict[int, tuple[LoweredStep, Lifetimes]] = {} if _lifetimes is None else _lifetimes

    def with_kv(self, kv_region: str | None) -> "Planner":
        """The same board and budget with the KV cache in `kv_region` (None: SRAM); lifetimes shared."""
        if kv_region == self.kv_region:
            return self
        return Planner(self.board, self.budget, kv_region, self._lifetimes, self.explain)

    @property
    def sdram(self) -> str | None:
        """The board's external region the KV cache may go to, if it has one."""
        return self.mem.kv_regions[0].name if self.mem.kv_regions else None

    def lifetimes(self, step: LoweredStep) -> Lifetimes:
        hit = self._lifetimes.get(id(step))
        if hit is None or hit[0] is not step:
            hit = self._lifetimes[id(step)] = (step, lifetimes_of(step))
        return hit[1]

    def plan(self, step: LoweredStep, max_seq: int, budget: int | None = None) -> MemoryPlan:
        plan = plan_lifetimes(self.lifetimes(step), max_seq, self.budget if budget is None else budget, self.stack,
                              self.mem, step.kv_bits, self.kv_region)
        rotated = any(isinstance(c.args, Attention) and c.args.rotate for c in step.calls)
        return dataclasses.replace(plan, kv_rotate="hadamard") if rotated else plan

    def largest_fitting_seq(self, step: LoweredStep, upper: int) -> int | None:
        """The largest context in [MIN_SEQ, upper] whose plan fits (fitting is
        monotone in the context).  Each plan places every buffer, so the search
        interpolates on the bytes over (the KV cache is linear in the context:
        the first guess is usually right, checked with its neighbour) and falls
        back to bisection; the answer is bisection's."""
        lo, hi = MIN_SEQ, upper
        if hi < lo:
            return None
        p_lo = self.plan(step, lo)
        if not p_lo.fits:
            return None
        p_hi = self.plan(step, hi)
        if p_hi.fits:
            return hi
        o_lo, o_hi = _over_bytes(p_lo), _over_bytes(p_hi)  # fits(lo), not fits(hi)
        for _ in range(INTERPOLATION_ROUNDS):
            if hi - lo <= 1:
                return lo
            guess = lo + (hi - lo) * -o_lo // max(1, o_hi - o_lo) if o_hi > o_lo else (lo + hi) // 2
            guess = min(max(guess, lo + 1), hi - 1)
            p = self.plan(step, guess)
            if p.fits:
                lo, o_lo, nxt = guess, _over_bytes(p), guess + 1
            else:
                hi, o_hi, nxt = guess, _over_bytes(p), guess - 1
            if lo < nxt < hi:  # the neighbour on the other side settles it
                q = self.plan(step, nxt)
                if q.fits:
                    lo, o_lo = nxt, _over_bytes(q)
                else:
                    hi, o_hi = nxt, _over_bytes(q)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.plan(step, mid).fits:
                lo = mid
            else:
                hi = mid
        return lo

    def plan_or_explain(self, step: LoweredStep, max_seq: int) -> MemoryPlan:
        """The plan at this context, or a UserError saying what is over and what would fit."""
        if max_seq < MIN_SEQ:
            raise UserError(f"--max-seq {max_seq} is too small: use at least {MIN_SEQ}")
        plan = self.plan(step, max_seq)
        if plan.fits:
            return plan
        raise OverBudget(self.explain_over(step, plan) if self.explain else f"{what_is_over(plan)} at {max_seq} tokens")

    def auto_max_seq(self, step: LoweredStep, context: int) -> int:
        """--max-seq auto: the longest context (<= the model's) that fits."""
        best = self.largest_fitting_seq(step, context)
        if best is None:
            plan = self.plan(step, MIN_SEQ)
            raise UserError(f"--max-seq auto: not even {MIN_SEQ} tokens fit: " + self.explain_over(step, plan))
        return best

    def fixes(self, step: LoweredStep, plan: MemoryPlan) -> list[str]:
        """Options that would make this plan fit, cheapest change first; the
        --max-seq option (if any) comes last so the sentence ends on a number.
        Every alternative is planned with the same step, changing only the
        option it suggests."""
        out = []
        need = max(plan.total_bytes, plan.budget_bytes)
        if plan.total_bytes > plan.budget_bytes and need <= self.mem.sram_bytes:
            bigger = -(-need // 1024) * 1024
            if self.plan(step, plan.max_seq, bigger).fits:
                out.append(f"--ram-budget {bigger // 1024}K")
        if step.kv_bits == KV8 and self.plan(with_kv_bits(step, KV8V4), plan.max_seq).fits:
            out.append("--kv-bits 8:4")  # int8 keys kept: most of int8's quality, less of its bytes
        if step.kv_bits != 4:  # int8 or 8:4: int4 KV is the smaller cache
            kv4 = with_kv_bits(step, 4)
            if self.plan(kv4, plan.max_seq).fits:
                out.append("--kv-bits 4")
            else:
                best4 = self.largest_fitting_seq(kv4, plan.max_seq)
                if best4:
                    out.append(f"--kv-bits 4 --max-seq {best4}")
        best = self.largest_fitting_seq(step, plan.max_seq)
        if self.kv_region is None and self.sdram is not None:
            external = self.with_kv(self.sdram)
            if external.plan(step, plan.max_seq).fits:
                out.append("--kv-region sdram")
            else:  # the board's SDRAM holds more context than its SRAM: say how much
                best_sd = external.largest_fitting_seq(step, plan.max_seq)
                if best_sd and best_sd > (best or 0):
                    out.append(f"--kv-region sdram --max-seq {best_sd}")
        if best:
            out.append(f"--max-seq {best}")
        return out

    def explain_over(self, step: LoweredStep, plan: MemoryPlan) -> str:
        kv = f"KV cache {plan.kv_bits.describe()} at {plan.max_seq} tokens is {plan.kv_cache_bytes:,} B"
        on_chip = {r.name for r in plan.regions if not r.external}
        kv_on_chip = sum(b.size for b in plan.buffers if b.request.kind == "kv" and b.region in on_chip)
        act = plan.arena_bytes - kv_on_chip - CANARY_BYTES * len(on_chip)
        opts = self.fixes(step, plan)
        fix = ("fits with " + (", ".join(opts[:-1]) + " or " + opts[-1] if len(opts) > 1 else opts[0]) if opts else
               f"even --max-seq {MIN_SEQ} does not fit: raise --ram-budget or use a smaller model")
        return (f"{what_is_over(plan)}: {kv}, activations and scratch peak at {act:,} B, "
                f"stack {self.stack:,} B; {fix}")


class OverBudget(UserError):
    """A plan over its budget at the context asked for (what the default context falls back from)."""


def _over_bytes(plan: MemoryPlan) -> int:
    """Bytes over the budget (negative: under): what the context's KV cache
    uses up, linearly.  A region that is full first only makes the
    interpolation's guess wrong, which the neighbour check and bisection
    then correct.  With the KV cache in external RAM the SRAM total hardly
    moves with the context: the external region's bytes over are what
    grows."""
    external = [r for r in plan.regions if r.external]
    if external:
        return max(plan.total_bytes - plan.budget_bytes, max(r.used_bytes - r.size for r in external))
    return plan.total_bytes - plan.budget_bytes


@dataclass(frozen=True)
class SeqNote:
    """What --max-seq auto chose, said on demand: the other KV precision's
    context costs a search of plans."""

    planner: Planner | None = None  # None: the context was given, nothing to say
    step: LoweredStep | None = None
    chosen: int = 0
    defaulted: bool = False  # no --max-seq, and the model's context did not fit (fit's longest_context)

    def text(self) -> str:
        if self.planner is None:
            return ""
        step, p = self.step, self.planner
        other = KV4 if step.kv_bits == 8 else KV8  # 8:4 beside int8, the cache it saves on
        alt = p.largest_fitting_seq(with_kv_bits(step, other), step.config.max_seq)
        alt_text = f"{alt} tokens" if alt else "nothing"
        where = f"in {p.budget:,} B" if p.kv_region is None else f"in {p.kv_region} (the rest in {p.budget:,} B)"
        head = (f"context {self.chosen} tokens, the longest this board holds (the model's "
                f"{step.config.max_seq} do not fit; --max-seq N to choose)" if self.defaulted else
                f"--max-seq auto: {self.chosen} tokens")
        return (f"{head} with {step.kv_bits.describe()} KV {where} "
                f"({other.describe()} KV would fit {alt_text}; the model's context is {step.config.max_seq})"
                + self.region_text())

    def region_text(self) -> str:
        """On a board with SDRAM, the context with the KV cache in the other place."""
        p = self.planner
        if p.sdram is None:
            return ""
        other = p.with_kv(None if p.kv_region else p.sdram)
        alt = other.largest_fitting_seq(self.step, self.step.config.max_seq)
        name = "--kv-region sram" if p.kv_region else "--kv-region sdram"
        return f"; with {name} (this prefill batch and stream): {alt if alt else 'nothing'} tokens"


def model_context(config, requested: int | None) -> int:
    """The context to compile for: the model's own (max_position_embeddings,
    or a Phi-3 sliding window), or a smaller one the user asked for."""
    if requested is None:
        return config.max_seq
    if requested > config.max_seq:
        raise UserError(f"--max-seq {requested} exceeds the model's context of {config.max_seq} tokens: "
                        f"use at most {config.max_seq}")
    return requested


def kv_planner(planner: Planner, step: LoweredStep, choice: str, requested_seq: int | str | None) -> Planner:
    """--kv-region: sram as it always was; sdram; auto: SRAM when the context
    asked for fits there (--max-seq auto: whenever anything does), else SDRAM."""
    if choice == "sram" or planner.sdram is None:
        return planner.with_kv(None)
    if choice == "sdram":
        return planner.with_kv(planner.sdram)
    sram = planner.with_kv(None)
    if requested_seq == AUTO:
        return sram if sram.plan(step, MIN_SEQ).fits else planner.with_kv(planner.sdram)
    seq = model_context(step.config, requested_seq)
    return sram if seq < MIN_SEQ or sram.plan(step, seq).fits else planner.with_kv(planner.sdram)


def plan_step(planner: Planner, step: LoweredStep, src: StepSource, req: FitRequest,
              requested_seq: int | str | None) -> Fitted:
    """One candidate: pick where the KV cache goes and the context, plan, and size the flash it needs."""
    board = req.board
    check_budget(board.memory, req.budget)
    planner = kv_planner(planner, step, req.kv_region, requested_seq)
    if requested_seq == AUTO:
        seq = planner.auto_max_seq(step, step.config.max_seq)
        note = SeqNote(planner, step, seq)
    else:
        seq, note = model_context(step.config, requested_seq), SeqNote()
    plan = planner.plan_or_explain(step, seq)
    code = code_flash(step, board, req.unroll_layers, rolling=req.rolling)  # without the vocabulary: it goes where it fits
    vocab = vocab_nbytes(*req.vocab) if req.vocab is not None else 0
    external_vocab = req.vocab is not None and vocab_goes_to_weights(board, vocab, code.total_bytes if code else 0)
    if code is not None and req.vocab is not None and not external_vocab:
        code = code_flash(step, board, req.unroll_layers, vocab, req.rolling)
    wbytes = weights_blob_bytes(src, seq, req.vocab if external_vocab else None)
    return Fitted(step, plan, wbytes, board.weights.max_bytes, note, external_vocab, code,
                  stream=step.stream.options if step.stream is not None else None)


def chunk_sizes(step: LoweredStep, board: Board) -> tuple[int, ...]:
    """The chunk sizes to try, first choice first.  On a board that streams
    from QUADSPI the timing model decides (timing.mode_seconds, DWUP): per
    chunk the larger of compute and transfer, plus one command per chunk and
    the pipeline fill, so small chunks pay commands and large ones a longer
    fill.  The first choice is the smallest chunk within CHUNK_TOLERANCE of
    the best predicted decode tokens/s (the SRAM it saves goes to the
    context), then the halvings below it for plans that are short of SRAM.
    Elsewhere (host, QEMU: no link to model) 16 KiB, halved.  Two buffers:
    one transfer is in flight at a time (tllm_board.h), so a third buffer
    would hold a chunk nobody can start yet."""
    if board.qspi_flash is None:
        return CHUNK_FALLBACK
    w = step_traffic(step).workload()
    tok = {c: predict(board, w, chunk_bytes=c)["modes"]["dwup"]["tokens_per_s"] for c in CHUNK_CANDIDATES}
    best = max(tok.values())
    first = min(c for c, t in tok.items() if t >= best * (1 - CHUNK_TOLERANCE))
    return tuple(c for c in sorted(CHUNK_CANDIDATES, reverse=True) if c <= first)


def free_bytes(plan: MemoryPlan, board: Board) -> int:
    """SRAM the plan leaves: under the budget, and inside one bulk region
    (the pinned buffer is one buffer)."""
    mem = board.memory
    used = {r.name: r.used_bytes for r in plan.regions}
    bulk = mem.placement.get("bulk", ())
    room = max((mem.region(n).size - used.get(n, 0) for n in bulk), default=0)
    return max(0, min(plan.budget_bytes - plan.total_bytes, room))


def passes(base: LoweredStep, opts: StreamOptions | None, seq: int, batch: int, k: int) -> LoweredStep:
    """The base step with the stream, prefill and speculation passes applied (k = 0: no speculation)."""
    step = batch_step(stream_step(base, opts, seq), batch)
    return speculate_step(step, k) if k else step


def fit_stream(planner: Planner, base: LoweredStep, src: StepSource, req: FitRequest, batch: int,
               requested_seq: int | str | None, k: int = 0) -> Fitted:
    """The stream pass in the plan: `off` unchanged; `all` streams every
    tiled matrix; `auto` streams on boards whose weights are external and
    pins what fits in the SRAM left.  The chunk size is the request's or
    chunk_sizes' first choice, halved (down to 1 KiB) while the plan does
    not fit."""
    mode, board = req.stream, req.board
    if mode not in MODES:
        raise UserError(f"--stream {mode} is not known: choose {', '.join(MODES)}")
    if mode == "all" and src.method == "per-channel":
        raise UserError(f"--stream {mode} streams the group scheme's tiled matrices; --quant per-channel reads its "
                        "layers in place: drop one of them")
    context = base.config.max_seq
    # auto streams where there is something to stream from external flash: tiled matrices (the Cortex-M7
    # kernels; the per-channel scheme and the portable kernels read their layouts in place)
    streams = board.weights.storage == "external" and base.kernels == "cortex-m7" and src.method != "per-channel"
    if mode == "off" or (mode == AUTO and not streams):
        return plan_step(planner, passes(base, None, context, batch, k), src, req, requested_seq)
    sizes = (req.stream_chunk,) if req.stream_chunk else chunk_sizes(base, board)
    err = None
    for size in sizes:
        opts = StreamOptions(mode, size)
        try:
            planned = plan_step(planner, passes(base, opts, context, batch, k), src, req, requested_seq)
            break
        except UserError as e:
            err = e
    else:
        raise err
    if mode != AUTO:
        return planned
    seq = planned.plan.max_seq
    candidates = pin_candidates(base, seq)
    left = free_bytes(planned.plan, board)
    for _ in range(PIN_ROUNDS):
        pins = choose_pinned(candidates, left)
        if not pins:
            break
        pinned = dataclasses.replace(opts, pinned=pins)
        try:  # planned at the context chosen: what --max-seq auto said of it still holds
            return dataclasses.replace(plan_step(planner, passes(base, pinned, seq, batch, k), src, req, seq),
                                       seq_note=planned.seq_note)
        except UserError:
            left = left * 7 // 8
    return planned


def fit(base: LoweredStep, src: StepSource, req: FitRequest, memo: dict | None = None) -> Fitted:
    """The prefill batch, stream chunk, pins, context and speculation for
    `base` (see the module docstring).  memo: batch -> fit_stream's result
    or its UserError (plain decoding), shared with the trade-off tables
    (fit/tradeoffs.py)."""
    planner = Planner(req.board, req.budget, explain=req.explain)
    memo = {} if memo is None else memo
    if req.max_seq is not None:
        plain = fit_plain(planner, base, src, req, memo)
    else:  # the model's context, tried without explaining each refusal (the fallback makes them moot)
        try:
            plain = fit_plain(Planner(req.board, req.budget, explain=False), base, src, req, memo)
        except OverBudget:
            asked, req = req, longest_context(req)
            memo.clear()  # plans of the model's context: the trade-off rows are planned with the new request
            try:
                plain = fit_plain(planner, base, src, req, memo)
            except UserError:  # nothing fits at any context: the model's context's refusal says why, and what would
                memo.clear()
                fit_plain(planner, base, src, asked, memo)
                raise
            plain = dataclasses.replace(plain, seq_note=dataclasses.replace(plain.seq_note, defaulted=True))
    res = plain if req.speculate[0] == "off" else fit_speculation(planner, plain, base, src, req)
    return dataclasses.replace(res, request=req)


def longest_context(req: FitRequest) -> FitRequest:
    """No --max-seq and the model's context does not fit: the longest context the board holds, as
    --max-seq auto plans it, with the KV cache in the board's SDRAM where it has one and --kv-region is auto
    (a real model's KV cache at a context worth the name is megabytes: SmolLM2-135M on the DK holds 17
    tokens in its 512 KiB, 685 in the SDRAM)."""
    region = "sdram" if req.kv_region == AUTO and req.board.memory.kv_regions else req.kv_region
    return dataclasses.replace(req, max_seq=AUTO, kv_region=region)


def fit_plain(planner: Planner, base: LoweredStep, src: StepSource, req: FitRequest, memo: dict | None) -> Fitted:
    """The prefill batch, stream chunk, pins and context of plain decoding."""
    memo = {} if memo is None else memo
    batch = req.prefill_batch
    reason = unbatchable(base)
    if batch != AUTO:
        if batch > 1 and reason:
            raise UserError(f"--prefill-batch {batch}: {reason}; use --prefill-batch 1 (or auto)")
        return dataclasses.replace(batched(memo, planner, base, src, req, batch), prefill_why=f"--prefill-batch {batch}")
    one = batched(memo, planner, base, src, req, 1)
    if reason:
        return dataclasses.replace(one, prefill_why=f"auto: 1 ({reason})")
    floor = -(-one.plan.max_seq * AUTO_CONTEXT_TENTHS // 10) if req.max_seq == AUTO else 0
    for p in range(MAX_BATCH, 1, -1):
        try:
            res = batched(memo, planner, base, src, req, p)
        except UserError:
            continue
        if res.code is not None and not res.code.fits:
            continue  # the batched kernels would not fit the code flash: a smaller P saves nothing, 1 does
        if res.plan.max_seq >= floor:
            note = (f"auto: {p} (the largest whose plan fits)" if req.max_seq != AUTO else
                    f"auto: {p} ({res.plan.max_seq} tokens of context against {one.plan.max_seq} at 1)")
            return dataclasses.replace(res, prefill_why=note)
    return dataclasses.replace(one, prefill_why="auto: 1 (no larger batch fits beside the context)")


def speculation_ks(plain: Fitted, board: Board, k_max: int, auto: bool,
                   draft_model: tuple[Acceptance, DraftCost] | None = None) -> tuple[list[int], str]:
    """The k to try, the fastest first (timing.choose_k on this build's own
    workload and mode), and the sentence that says why; `auto` keeps only
    those SPECULATE_MARGIN faster than plain decoding.  draft_model: a draft
    model's step and acceptance price the passes (a draft asked for is built
    at its best k even where plain decoding is predicted faster: the draft
    record's prediction says so, against the target alone)."""
    w = step_traffic(plain.step).workload()
    mode = build_mode(board, plain.step.stream is not None)
    chunk = plain.step.stream.options.chunk_bytes if plain.step.stream is not None else None
    kw = {"chunk_bytes": chunk} if chunk else {}
    acc, cost = draft_model if draft_model is not None else (LOOKUP_ACCEPTANCE, None)
    base = speculative_tokens_per_s(board, w, acc, 0, mode, **kw)
    rated = choose_k(board, w, acc, k_max, mode, draft=cost, **kw)
    if auto:
        rated = [(k, r) for k, r in rated if r > base * (1 + SPECULATE_MARGIN)]
    where = f"{board.name}, {mode}" if mode != "compute" else f"{board.name}, compute alone"
    if not rated:
        best = max(choose_k(board, w, acc, k_max, mode, **kw), key=lambda kr: kr[1], default=None)
        return [], (f"off: the timing model ({where}) predicts no gain over plain decoding's {base:.4g} tokens/s"
                    + (f" (lookup:{best[0]} {best[1]:.4g})" if best else ""))
    k, r = rated[0]
    if cost is not None:  # the figure without the draft is the draft record's (the target alone, compile_draft.py)
        each = ", ".join(f"k={kk} {rr:.4g}" for kk, rr in sorted(rated))
        return [k for k, _ in rated], (f"draft:{k}: the timing model ({where}) predicts the most decode tokens/s with "
                                       f"the draft model at k={k} ({each}), at the pair's measured acceptance "
                                       f"({acc.tokens_per_pass[k]:.2f} tokens per pass)")
    return [k for k, _ in rated], (f"lookup:{k}: the timing model ({where}) predicts {r:.4g} decode tokens/s "
                                   f"against {base:.4g} plain, at the prompt-lookup draft's measured acceptance "
                                   f"({LOOKUP_ACCEPTANCE.tokens_per_pass[k]:.2f} tokens per pass)")


def fit_speculation(planner: Planner, plain: Fitted, base: LoweredStep, src: StepSource, req: FitRequest) -> Fitted:
    """Speculation on the plain fit's prefill batch: the first k (fastest
    first) whose plan fits beside the context; `auto` falls back to plain
    decoding with the reason, an explicit `lookup[:k]` is refused in one line."""
    draft, k_asked = req.speculate
    auto, P = draft == "auto", plain.prefill_batch
    if P == 1:
        why = "the prompt is prefilled token by token (prefill batch 1): verification runs on its P-token buffers"
        if auto:
            return dataclasses.replace(plain, speculate_why=f"off: {why}")
        raise UserError(f"--speculate {draft}{f':{k_asked}' if k_asked else ''}: {why}; "
                        "use --prefill-batch 2..4 (or auto)")
    if k_asked is not None:
        ks, why = [k_asked], f"lookup:{k_asked} (asked)"
    else:
        ks, why = speculation_ks(plain, req.board, P - 1, auto, req.draft_model)
        if not ks:
            return dataclasses.replace(plain, speculate_why=why)
    floor = -(-plain.plan.max_seq * AUTO_CONTEXT_TENTHS // 10) if req.max_seq == AUTO else 0
    err, short = None, "the verification's buffers do not fit beside the context"
    for k in ks:
        try:
            res = fit_stream(planner, base, src, req, P, req.max_seq, k)
        except UserError as e:
            err = err or e
            continue
        if res.code is not None and not res.code.fits:
            short = "tllm_model_verify's code does not fit the code flash"
            continue
        if res.plan.max_seq < floor:
            continue
        kind = "draft" if req.draft_model is not None else "lookup"
        note = why if k == ks[0] else f"{kind}:{k} (the faster k={ks[0]} does not fit beside the context)"
        step = dataclasses.replace(res.step, speculate=dataclasses.replace(res.step.speculate, choice=note))
        return dataclasses.replace(res, step=step, prefill_why=plain.prefill_why, speculate_why=note, plain=plain)
    if auto:
        return dataclasses.replace(plain, speculate_why=f"off: {short}")
    if err is not None:
        raise err
    raise UserError(f"--speculate lookup:{ks[0]}: {short} ({plain.plan.max_seq} tokens): use a smaller k, "
                    "--max-seq auto, or --speculate off")


def speculation_cost(fitted: Fitted) -> dict | None:
    """What speculation costs against plain decoding's plan: RAM at the same
    context, and the context it gives up (with --max-seq auto the plans' own
    contexts; otherwise the KV positions those bytes would have held)."""
    if fitted.step.speculate is None or fitted.plain is None:
        return None
    spec, plain = fitted.plan, fitted.plain.plan
    per_pos = plain.kv_cache_bytes / plain.max_seq if plain.max_seq else 0
    extra = spec.total_bytes - plain.total_bytes if spec.max_seq == plain.max_seq else None
    tokens = plain.max_seq - spec.max_seq if spec.max_seq != plain.max_seq else \
        (-(-extra // int(per_pos)) if extra and extra > 0 and per_pos else 0)
    return {"ram_bytes": extra, "context_tokens": tokens, "plain_max_seq": plain.max_seq, "max_seq": spec.max_seq,
            "plain_total_bytes": plain.total_bytes, "total_bytes": spec.total_bytes}


def speculate_note(fitted: Fitted) -> str:
    """One line for compile: speculation's k and why, and its cost in RAM and context."""
    sp = fitted.step.speculate
    if sp is None:
        return f"speculation {fitted.speculate_why}" if fitted.speculate_why else ""
    cost = speculation_cost(fitted)
    if cost["ram_bytes"] is None:
        what = f"{cost['context_tokens']} tokens of context ({cost['max_seq']} against {cost['plain_max_seq']})"
    elif cost["ram_bytes"] <= 0:
        what = f"no RAM at {cost['max_seq']} tokens of context (the plan's peak is elsewhere)"
    else:
        what = (f"{cost['ram_bytes']:,} B of RAM at {cost['max_seq']} tokens of context (the KV cache of "
                f"{cost['context_tokens']} positions)")
    return f"speculation {fitted.speculate_why}; it costs {what}"


def batched(memo: dict, planner: Planner, base: LoweredStep, src: StepSource, req: FitRequest, p: int) -> Fitted:
    """fit_stream at prefill batch p, once per p (a UserError is kept and raised again)."""
    if p not in memo:
        try:
            memo[p] = fit_stream(planner, base, src, req, p, req.max_seq)
        except UserError as e:
            memo[p] = e
    if isinstance(memo[p], UserError):
        raise memo[p]
    return memo[p]


def check_code(fitted: Fitted, board_name: str) -> None:
    """One line when the image will overflow the board's code flash (before the linker says so)."""
    check_code_flash(fitted.code, board_name, fitted.stream is not None)


def check_weights(fitted: Fitted, board_name: str, group_size: int, method: str) -> None:
    limit = fitted.weights_capacity
    if limit is not None and fitted.weights_bytes > limit:
        hint = " or --group-size 128 (fewer scales)" if group_size < 128 and method != "gguf" else ""
        raise UserError(f"weights are {fitted.weights_bytes:,} B but board {board_name} holds {limit:,} B of "
                        f"weights (over by {fitted.weights_bytes - limit:,} B): use a smaller model{hint}")
