"""`compile TARGET --speculate draft:DRAFT[:k]`: one firmware tree holding
both models (emit/draft_tree.py says where the draft's files go).

The steps, on top of compile.py's:

1. the draft is checked beside the target (compile.check_draft: a tokenizer,
   at least the target's context, the target's vocabulary or a compress
   --prune-vocab student's part of it, whose id tables go into the draft
   table's C: emit/draft_tree.IdTables);
2. the draft is prepared first, with the target's sampler (a sampled
   request's guesses and their q come from the draft's logits or top-K set
   as the request's sampler sees them; a greedy target's draft reads only
   its argmax), token by token (its catch-up steps one position at a time, so a batched
   prefill would be RAM it never uses), with the target's quantization and
   KV options at the target's context, under the symbol prefix tllm_draft_;
3. the target is planned in what the draft leaves: the RAM budget less the
   draft's arenas, each region less the draft's part of it, with the
   verification pass for k guesses (as `--speculate lookup:k` builds it);
   a target that does not fit there is refused in one line saying by how
   many bytes, and the fixes (a smaller --max-seq, or no draft).  Without a
   k the timing model picks it (fit/search.speculation_ks) from the draft's
   step and the pair's acceptance, measured first
   (reference/draft_acceptance.py); with --max-seq auto the context is the
   largest at which both fit so (fit_pair, the same search for plan and
   compile);
4. the draft's C is emitted for its place in the weights storage (after the
   target's blob on an external-weights board) and the two trees become
   one: the target's, with the draft in draft/, both arenas in the linker
   script's one budget, both blobs against the board's weights storage, the
   draft's code, vocabulary and id tables beside the target's code."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .board import Board, load_board
from .abi import SPECULATE_MAX_K
from .compile import (CompileOptions, Compiled, check_draft, emit_prepared, plan_model, plan_model_fit, plan_source,
                      prepare, resolve_max_seq)
from .context import parse_context_policy
from .emit.draft_tree import DRAFT_DIR, DRAFT_PREFIX, DraftPart, IdTables, draft_board, draft_text, weights_offset
from .errors import UserError
from .fit.search import AUTO, KV_REGIONS, FitRequest, Fitted
from .fit.search import fit as fit_step
from .frontends import ImportedModel, load_model
from .kernels.c_names import DEFAULT_PREFIX
from .lower.speculate import parse_draft
from .lower.step import lower_step
from .plan.codesize import RUNTIME_BYTES
from .plan.memory import MIN_SEQ, MemoryPlan
from .plan.regions import check_kv_region
from .plan.traffic import step_traffic
from .quant.kv_center import kv_calibration_documents
from .reference.draft_acceptance import MEASURE_PROMPT, measure_window, pass_totals
from .reference.sampler import top_k_of
from .timing import DEFAULT_CHUNK_BYTES, Acceptance, DraftCost, build_mode, draft_prediction
from .vocab import vocabulary_of


def compile_draft_path(model_path: Path, opts: CompileOptions, tokenizer: Path | None = None) -> Compiled:
    """compile_path for `--speculate draft:DRAFT[:k]` (opts.speculate)."""
    target, draft, draft_path, k = load_pair(model_path, tokenizer, opts, opts.speculate)
    return compile_with_draft(target, Path(model_path), draft, draft_path, k, opts)


def load_pair(model_path: Path, tokenizer: Path | None, opts: CompileOptions, speculate: str,
              target: ImportedModel | None = None) -> tuple[ImportedModel, ImportedModel, Path, int | None]:
    """(target, draft, the draft's path, k or None: the timing model's choice) of `--speculate
    draft:DRAFT[:k]`, read after the cheap checks (target: the model at model_path, when read already)."""
    check_kv_region(load_board(opts.board), opts.kv_region, KV_REGIONS)  # before the models are read
    draft_path, k = parse_draft(speculate, default=None)
    if opts.symbol_prefix != DEFAULT_PREFIX:
        raise UserError(f"--speculate {speculate} builds the console firmware, whose engine calls the target "
                        f"by the default names (the draft is {DRAFT_PREFIX}): drop --symbol-prefix")
    if not Path(draft_path).exists():
        raise UserError(f"--speculate {speculate}: {draft_path} does not exist: give the draft model's "
                        "path (a Hugging Face folder, a GGUF or a llama2.c checkpoint)")
    target = target if target is not None else load_model(Path(model_path), tokenizer)
    return target, load_model(Path(draft_path)), Path(draft_path), k


def checked_context(target: ImportedModel, target_path: Path, draft: ImportedModel, draft_path: Path,
                    opts: CompileOptions, what: str):
    """(the context asked for or AUTO, the largest context both may run at, the VocabMap), once the draft
    is fit to run beside the target (compile.check_draft: the target's vocabulary, or a pruned student's
    part of it)."""
    auto = opts.max_seq == AUTO
    upper = min(target.graph.config.max_seq, draft.graph.config.max_seq) if auto else \
        resolve_max_seq(target, opts.max_seq)
    vmap = check_draft(draft, draft_path, target, target_path, upper)
    return AUTO if auto else upper, upper, vmap


@dataclass(frozen=True)
class PairFit:
    """What plan and compile decide alike before planning the target for good (fit_pair)."""

    seq: int  # the context both run at
    draft: Fitted  # the draft's fit at it (plan level: no weights quantized)
    acceptance: Acceptance  # the pair's, measured (reference/draft_acceptance.py)
    cost: DraftCost  # the draft's step on the board
    seq_note: str = ""  # what --max-seq auto chose ("" when the context was given)
    alone: Fitted | None = None  # the target alone at this context, all the budget, no speculation: "without"
    id_tables: IdTables | None = None  # a vocabulary-pruned draft's (None: the target's vocabulary)

    @property
    def pricing(self) -> tuple[Acceptance, DraftCost]:
        """FitRequest.draft_model: what prices the target's k."""
        return self.acceptance, self.cost


def measure_draft_acceptance(target: ImportedModel, draft: ImportedModel, vmap, calibration: Path | None,
                             name: str) -> Acceptance:
    """The pair's Acceptance for k = 1 .. SPECULATE_MAX_K (reference/draft_acceptance.py), over the KV
    centres' calibration documents (--calibration's text, else the built-in sample): per pass, the mean
    tokens, the share of each P, the draft's steps and catch-up steps."""
    window = measure_window(target.graph, draft.graph)
    docs = kv_calibration_documents(target.tokenizer, calibration, window)
    totals = pass_totals(target.graph, draft.graph, vmap, docs, range(1, SPECULATE_MAX_K + 1))
    n = totals.pop("documents")
    per = {k: max(1, t["passes"]) for k, t in totals.items()}
    return Acceptance(
        name, f"measured at compile time: the float reference, greedy, over {n} documents of the KV calibration "
              f"text ({MEASURE_PROMPT}-token prompts, up to {window} positions)",
        {k: t["tokens"] / per[k] for k, t in totals.items()},
        {k: {int(key[1:]): v / per[k] for key, v in sorted(t.items()) if key.startswith("P")}
         for k, t in totals.items()},
        {k: t["draft_steps"] / per[k] for k, t in totals.items()},
        {k: t["catchup_steps"] / per[k] for k, t in totals.items()})


def draft_step_cost(d: Fitted, board: Board) -> DraftCost:
    """The draft's step for the timing model: its fitted step's own bytes and layouts, in its own mode."""
    chunk = {"chunk_bytes": d.step.stream.options.chunk_bytes} if d.step.stream is not None else {}
    return DraftCost(step_traffic(d.step).workload("the draft model"), build_mode(board, d.step.stream is not None),
                     **chunk)


def fit_pair(target: ImportedModel, target_path: Path, draft: ImportedModel, draft_path: Path, k: int | None,
             opts: CompileOptions, what: str) -> PairFit:
    """The context, the draft's fit and what prices the k, for plan and compile alike: the pair's acceptance
    measured, the draft planned first in the whole budget, and with --max-seq auto the largest context at
    which the target (at k, or at the k the timing model picks) also fits in what the draft leaves
    (bisection: more context only takes more of both)."""
    asked, upper, vmap = checked_context(target, target_path, draft, draft_path, opts, what)
    board = load_board(opts.board)
    rolling = parse_context_policy(opts.context_policy) is not None
    d_opts = draft_options(opts, upper, k)
    d_src = plan_source(draft, d_opts, opts.quant, board)
    d_base = lower_step(d_src, d_opts.sampler, d_opts.draft_guesses)
    d_vocab = vocabulary_of(draft.tokenizer, draft.graph.config.vocab_size).size

    def draft_at(seq: int, explain: bool = True) -> Fitted:
        req = FitRequest(board, opts.ram_budget, seq, d_opts.stream, d_opts.stream_chunk, 1, d_vocab,
                         opts.unroll_layers, opts.kv_region, ("off", None), rolling, explain=explain)
        try:
            return fit_step(d_base, d_src, req)
        except UserError as e:
            raise draft_refusal(e, draft, d_opts, seq, what) from None

    t_src = plan_source(target, opts, opts.quant, board)
    t_base = lower_step(t_src, opts.sampler)
    t_vocab = vocabulary_of(target.tokenizer, target.graph.config.vocab_size).size

    def alone_at(seq: int) -> Fitted | None:
        req = FitRequest(board, opts.ram_budget, seq, opts.stream, opts.stream_chunk, opts.prefill_batch, t_vocab,
                         opts.unroll_layers, opts.kv_region, ("off", None), rolling, explain=False)
        try:
            return fit_step(t_base, t_src, req)
        except UserError:  # it fits beside the draft only if alone too; the caller's own fit says why not
            return None

    def measured() -> Acceptance:  # after the draft's own fit: a draft that does not fit is refused at once
        return measure_draft_acceptance(target, draft, vmap, opts.calibration, f"the draft model {draft_path}")

    if asked != AUTO:
        d = draft_at(asked)  # the draft is planned first, in the whole budget: its refusal is its own
        return PairFit(asked, d, measured(), draft_step_cost(d, board), alone=alone_at(asked),
                       id_tables=IdTables.of(vmap))
    acc = measured()

    def both_at(seq: int, explain: bool = False) -> PairFit:  # a UserError when either does not fit
        d = draft_at(seq, explain)
        pair = PairFit(seq, d, acc, draft_step_cost(d, board))
        req = FitRequest(beside(board, d.plan), opts.ram_budget - on_chip_arena_bytes(d.plan), seq, opts.stream,
                         opts.stream_chunk, opts.prefill_batch, t_vocab, opts.unroll_layers, opts.kv_region,
                         ("lookup", k), rolling, draft_model=pair.pricing, explain=explain)
        fit_step(t_base, t_src, req)
        return pair

    def fits(seq: int) -> bool:
        try:
            both_at(seq)
            return True
        except UserError:
            return False

    lo, hi = MIN_SEQ, upper
    if not fits(hi):
        if not fits(lo):
            raise UserError(f"{what} --max-seq auto: not even {MIN_SEQ} tokens fit both models: "
                            f"{nothing_fits(lambda: draft_at(MIN_SEQ, False), both_at, opts.ram_budget)}; raise --ram-budget, "
                            "use a smaller draft, or no draft (--speculate lookup)")
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        hi = lo
    note = (f"--max-seq auto with the draft model: {hi} tokens, the largest at which both fit (the draft planned "
            f"first, the target in what it leaves; the models' contexts allow {upper})")
    return dataclasses.replace(both_at(hi), seq_note=note, alone=alone_at(hi), id_tables=IdTables.of(vmap))


def nothing_fits(draft_at, both_at, budget: int) -> str:
    """Which model leaves no room at the smallest context: the draft alone, or the target beside it (and
    what of it is over)."""
    try:
        d = draft_at()
    except UserError as e:
        return f"the draft model alone does not ({str(e).split(':')[0]})"
    d_ram = on_chip_arena_bytes(d.plan)
    try:
        both_at(MIN_SEQ)
        why = ""
    except UserError as e:
        why = f" ({str(e).split(':')[0]})"
    return (f"the draft model takes {d_ram:,} B of the {budget:,} B budget and the target does not fit in the "
            f"{budget - d_ram:,} B it leaves{why}")


def draft_options(opts: CompileOptions, max_seq: int, k: int | None) -> CompileOptions:
    """The draft's build: the target's quantization, KV options and sampler (full, topk:K or greedy: the
    engine draws a sampled request's guesses from its output with the request's sampler), token by token, its
    own symbols; a top-K draft keeps its q (its K candidates) for each of the k guesses (k None: the timing
    model picks it after the draft's plan, so room for the most it may pick); its weights read in
    place unless the target streams all of them (pins would take the SRAM the target plans in)."""
    return dataclasses.replace(opts, symbol_prefix=DRAFT_PREFIX, speculate="off", prefill_batch=1, max_seq=max_seq,
                               draft_guesses=(k or SPECULATE_MAX_K) if top_k_of(opts.sampler) else 0,
                               stream="all" if opts.stream == "all" else "off",
                               stream_chunk=opts.stream_chunk if opts.stream == "all" else None)


def compile_with_draft(target: ImportedModel, target_path: Path, draft: ImportedModel, draft_path: Path,
                       k: int | None, opts: CompileOptions) -> Compiled:
    what = f"--speculate {opts.speculate}"
    pair = fit_pair(target, target_path, draft, draft_path, k, opts, what)
    seq = pair.seq
    board = load_board(opts.board)
    d_opts = draft_options(opts, seq, k)
    try:
        d = prepare(draft, d_opts)
    except UserError as e:
        raise draft_refusal(e, draft, d_opts, seq, what) from None
    d_ram = on_chip_arena_bytes(d.fitted.plan)
    t_opts = dataclasses.replace(opts, speculate=f"lookup:{k}" if k else "lookup", max_seq=seq)
    try:
        t = prepare(target, t_opts, beside(board, d.fitted.plan), opts.ram_budget - d_ram, draft_model=pair.pricing)
    except UserError as e:
        raise over_budget(e, lambda: prepare(target, t_opts).fitted.plan.total_bytes, opts.ram_budget,
                          d.fitted.plan, what) from None
    asked, k = k, t.program.speculate.k
    offset = weights_offset(len(t.program.blob.data), board)
    check_weights(board, offset, len(t.program.blob.data), len(d.program.blob.data), what)
    ids = pair.id_tables
    code = check_code(t.fitted, d.fitted, d.qg.kernels, opts.board, what, id_bytes(ids))
    d_board = draft_board(board, offset)
    d_tree = emit_prepared(d, d_opts, d_board).tree
    record = {**draft_record(draft_path, k, d, offset, d_ram, code, opts.ram_budget, id_bytes(ids)),
              **decided(pair, t.fitted, board, asked is not None)}
    part = DraftPart(dict(d_tree.files), d.fitted.plan, d_board, d.program.blob.data, offset, opts.ram_budget,
                     record, ids)
    return emit_prepared(t, t_opts, draft=part, options={"speculate": f"draft:{draft_path}:{k}"})


def decided(pair: PairFit, target: Fitted, board: Board, asked: bool) -> dict:
    """The draft record's part that the timing model decides: how k was chosen, the predicted decode tokens/s
    with the draft model against without it (timing.draft_prediction: this build's fitted step, and the
    target alone at the same context in the whole budget, as a build without the draft would plan it, pins
    included), and what --max-seq auto chose (only then)."""
    def priced(step) -> tuple:
        chunk = step.stream.options.chunk_bytes if step.stream is not None else DEFAULT_CHUNK_BYTES
        return step_traffic(step).workload(), build_mode(board, step.stream is not None), chunk

    w, mode, chunk = priced(target.step)
    plain = priced(pair.alone.step) if pair.alone is not None else None  # without the draft: the target alone
    k = target.step.speculate.k
    out = {"choice": f"draft:{k} (asked)" if asked else target.speculate_why,
           "predicted": draft_prediction(board, w, pair.acceptance, k, mode, pair.cost, chunk, plain)}
    if pair.seq_note:
        out["context"] = pair.seq_note
    return out


def draft_refusal(err: UserError, draft: ImportedModel, d_opts: CompileOptions, seq: int, what: str) -> UserError:
    """The draft's own refusal (it is planned first, in the whole budget), saying it is the draft's; with the
    full sampler, what its vocabulary-sized buffers take and the top-K alternative."""
    why = f"{what}: the draft model alone does not fit at {seq} tokens: {err}"
    if d_opts.sampler == "full":
        vocab = draft.graph.config.vocab_size
        why += (f" (its --sampler full plans {vocab * 6:,} B for its {vocab:,}-token logits and sampler scratch; "
                "--sampler topk:K plans K x 6 B per guess)")
    return UserError(why)


def on_chip_arena_bytes(plan: MemoryPlan) -> int:
    """The draft's arenas in the RAM budget (an external KV region's bytes are not)."""
    return sum(r.arena_bytes for r in plan.regions if not r.external)


def beside(board: Board, plan: MemoryPlan) -> Board:
    """The board as the target may plan it: every region less what the draft's plan placed there."""
    used = {r.name: r.arena_bytes for r in plan.regions}
    regions = tuple(dataclasses.replace(r, size=r.size - used.get(r.name, 0)) for r in board.memory.regions)
    return dataclasses.replace(board, memory=dataclasses.replace(board.memory, regions=regions))


def over_budget(err: UserError, alone_bytes, budget: int, draft: MemoryPlan, what: str) -> UserError:
    """The target does not fit beside the draft: by how much, if it fits alone (alone_bytes(): its RAM
    planned alone); else its own refusal."""
    try:
        alone = alone_bytes()
    except UserError:
        return err
    d_ram = on_chip_arena_bytes(draft)
    over = alone + d_ram - budget
    if over <= 0:  # the total fits but a region does not hold both: say which
        return UserError(f"{what}: the target does not fit beside the draft model's {d_ram:,} B of arenas "
                         f"({err}); use a smaller --max-seq, or no draft (--speculate lookup)")
    return UserError(f"{what}: the target ({alone:,} B of RAM) and the draft model ({d_ram:,} B: "
                     f"its arena and KV cache at {draft.max_seq} tokens) need {over:,} B more than the "
                     f"{budget:,} B budget: use a smaller --max-seq, or no draft (--speculate lookup)")


def check_weights(board: Board, offset: int, target_bytes: int, draft_bytes: int, what: str) -> None:
    """Both blobs in the board's weights storage (external boards: one file, the draft's after the target's)."""
    limit = board.weights.max_bytes
    total = (offset or target_bytes) + draft_bytes
    if limit is not None and total > limit:
        raise UserError(f"{what}: the target's weights ({target_bytes:,} B) and the draft's ({draft_bytes:,} B) "
                        f"are {total:,} B but board {board.name} holds {limit:,} B of weights: use a smaller "
                        "draft, or no draft (--speculate lookup)")


def check_code(target, draft, kernels: str, board_name: str, what: str, ids: int = 0) -> int | None:
    """The draft's code, vocabulary and id tables (ids bytes) beside the target's in the code flash (the
    runtime is shared, so the draft adds its estimate less the runtime's); returns the draft's bytes (None on
    the host)."""
    if target.code is None or draft.code is None:
        return None
    extra = draft_code_bytes(draft.code, kernels, ids)
    total = target.code.total_bytes + extra
    if total > target.code.capacity_bytes:
        tables = f", id tables {ids:,} B" if ids else ""
        raise UserError(f"{what}: the code flash would hold about {total:,} B (the draft's code and vocabulary"
                        f"{tables}: {extra:,} B of it) but board {board_name} has {target.code.capacity_bytes:,} B: "
                        "use a smaller draft, or no draft (--speculate lookup)")
    return extra


def draft_code_bytes(code, kernels: str, ids: int = 0) -> int:
    """The draft's code flash beside its target: its estimate less the runtime the two share, plus its id
    tables (const in the draft table's C; exact, as the vocabulary's bytes)."""
    return max(0, code.total_bytes - RUNTIME_BYTES.get(kernels, 0)) + ids


def id_bytes(tables: IdTables | None) -> int:
    """A pruned draft's id tables in code flash (0 with the target's vocabulary: no tables)."""
    return tables.bytes if tables is not None else 0


def draft_cost(path: Path, k: int, plan: MemoryPlan, weights_bytes: int, offset: int, ram: int, code: int | None,
               budget: int, ids: int = 0) -> dict:
    """What plan, the manifest and report.json say of the draft: its source, k, and what it costs (ids: its
    id tables' bytes, also in code_flash_bytes where the board has a code flash)."""
    return {"source": str(path), "dir": DRAFT_DIR, "symbol_prefix": DRAFT_PREFIX, "k": k, "max_seq": plan.max_seq,
            "weights_bytes": weights_bytes, "weights_offset": offset,
            "ram_bytes": ram, "kv_cache_bytes": plan.kv_cache_bytes, "external_ram_bytes": plan.external_bytes,
            "code_flash_bytes": code, "id_table_bytes": ids, "budget_bytes": budget}


def draft_record(path: Path, k: int, d, offset: int, ram: int, code: int | None, budget: int, ids: int = 0) -> dict:
    """draft_cost of a prepared draft, with its blob's hash (the manifest's record)."""
    return {**draft_cost(path, k, d.fitted.plan, len(d.program.blob.data), offset, ram, code, budget, ids),
            "model_sha256": d.program.blob.sha256}


def plan_with_draft(model_path: Path, tokenizer: Path | None, opts: CompileOptions, sampler: str, quant: str,
                    stream: str, stream_chunk: int | None, prefill_batch, unroll_layers: bool,
                    speculate: str, target: ImportedModel | None = None) -> tuple[dict, str]:
    """`plan TARGET --speculate draft:DRAFT[:k]`: compile_with_draft's fit without quantizing (fit_pair, then
    compile.plan_model for the target in what the draft leaves); the document's "draft" and the text's last
    lines say what the draft costs and what the timing model predicts with it."""
    what = f"--speculate {speculate}"
    opts = dataclasses.replace(opts, sampler=sampler, quant=quant, stream=stream, stream_chunk=stream_chunk,
                               prefill_batch=prefill_batch, unroll_layers=unroll_layers)
    target, draft, draft_path, k = load_pair(model_path, tokenizer, opts, speculate, target)
    pair = fit_pair(target, Path(model_path), draft, draft_path, k, opts, what)
    seq, d = pair.seq, pair.draft
    board = load_board(opts.board)
    d_ram = on_chip_arena_bytes(d.plan)
    t_opts = dataclasses.replace(opts, max_seq=seq, ram_budget=opts.ram_budget - d_ram)
    args = (model_path, tokenizer, t_opts, sampler, quant, stream, stream_chunk, prefill_batch, unroll_layers,
            f"lookup:{k}" if k else "lookup")
    try:
        doc, text, res = plan_model_fit(*args, board=beside(board, d.plan), draft_model=pair.pricing, model=target)
    except UserError as e:
        alone = dataclasses.replace(t_opts, ram_budget=opts.ram_budget)
        raise over_budget(e, lambda: plan_model(model_path, tokenizer, alone, *args[3:])[0]["total_sram_bytes"],
                          opts.ram_budget, d.plan, what) from None
    offset = weights_offset(doc["weights_bytes"], board)
    check_weights(board, offset, doc["weights_bytes"], d.weights_bytes, what)
    has_code = d.code is not None and doc.get("code_flash_bytes") is not None
    ids = id_bytes(pair.id_tables)
    code = draft_code_bytes(d.code, d.step.kernels, ids) if has_code else None
    doc["draft"] = {**draft_cost(draft_path, res.step.speculate.k, d.plan, d.weights_bytes, offset, d_ram, code,
                                 opts.ram_budget, ids), **decided(pair, res, board, k is not None)}
    return doc, text + draft_text(doc["draft"], doc["total_sram_bytes"])
