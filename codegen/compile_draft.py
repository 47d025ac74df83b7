"""`compile TARGET --speculate draft:DRAFT[:k]`: one firmware tree holding
both models (emit/draft_tree.py says where the draft's files go).

The steps, on top of compile.py's:

1. the draft is checked beside the target (compile.check_draft: a tokenizer,
   at least the target's context, the target's vocabulary: a pruned one
   needs id tables the C does not have yet, so it is refused);
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
   many bytes, and the fixes (a smaller --max-seq, or no draft);
4. the draft's C is emitted for its place in the weights storage (after the
   target's blob on an external-weights board) and the two trees become
   one: the target's, with the draft in draft/, both arenas in the linker
   script's one budget, both blobs against the board's weights storage."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .board import Board, load_board
from .compile import (CompileOptions, Compiled, check_draft, emit_prepared, plan_model, plan_source, prepare,
                      resolve_max_seq)
from .context import parse_context_policy
from .emit.draft_tree import DRAFT_DIR, DRAFT_PREFIX, DraftPart, draft_board, draft_text, weights_offset
from .errors import UserError
from .fit.search import AUTO, KV_REGIONS, FitRequest
from .fit.search import fit as fit_step
from .frontends import ImportedModel, load_model
from .kernels.c_names import DEFAULT_PREFIX
from .lower.speculate import parse_draft
from .lower.step import lower_step
from .plan.codesize import RUNTIME_BYTES
from .plan.memory import MemoryPlan
from .plan.regions import check_kv_region
from .reference.sampler import top_k_of
from .vocab import vocabulary_of


def compile_draft_path(model_path: Path, opts: CompileOptions, tokenizer: Path | None = None) -> Compiled:
    """compile_path for `--speculate draft:DRAFT[:k]` (opts.speculate)."""
    target, draft, draft_path, k = load_pair(model_path, tokenizer, opts, opts.speculate)
    return compile_with_draft(target, Path(model_path), draft, draft_path, k, opts)


def load_pair(model_path: Path, tokenizer: Path | None, opts: CompileOptions,
              speculate: str) -> tuple[ImportedModel, ImportedModel, Path, int]:
    """(target, draft, the draft's path, k) of `--speculate draft:DRAFT[:k]`, read after the cheap checks."""
    check_kv_region(load_board(opts.board), opts.kv_region, KV_REGIONS)  # before the models are read
    draft_path, k = parse_draft(speculate)
    if opts.symbol_prefix != DEFAULT_PREFIX:
        raise UserError(f"--speculate {speculate} builds the console firmware, whose engine calls the target "
                        f"by the default names (the draft is {DRAFT_PREFIX}): drop --symbol-prefix")
    if not Path(draft_path).exists():
        raise UserError(f"--speculate {speculate}: {draft_path} does not exist: give the draft model's "
                        "path (a Hugging Face folder, a GGUF or a llama2.c checkpoint)")
    return load_model(Path(model_path), tokenizer), load_model(Path(draft_path)), Path(draft_path), k


def checked_context(target: ImportedModel, target_path: Path, draft: ImportedModel, draft_path: Path,
                    opts: CompileOptions, what: str) -> int:
    """The context both run at, once the draft is fit to run beside the target (compile.check_draft,
    and the same vocabulary: the C has no id tables for a pruned one yet)."""
    if opts.max_seq == AUTO:
        raise UserError(f"{what}: --max-seq auto searches one model's context; with a draft model give the "
                        "context: --max-seq N")
    seq = resolve_max_seq(target, opts.max_seq)
    if not check_draft(draft, draft_path, target, target_path, seq).shared:
        raise UserError(f"{what}: {draft_path}'s vocabulary is a pruned part of {target_path}'s, and the firmware "
                        "has no id tables to map it yet: use a draft with the target's whole vocabulary "
                        "(compress without --prune-vocab), or --speculate lookup")
    return seq


def draft_options(opts: CompileOptions, max_seq: int, k: int) -> CompileOptions:
    """The draft's build: the target's quantization, KV options and sampler (full, topk:K or greedy: the
    engine draws a sampled request's guesses from its output with the request's sampler), token by token, its
    own symbols; a top-K draft keeps its q (its K candidates) for each of the k guesses; its weights read in
    place unless the target streams all of them (pins would take the SRAM the target plans in)."""
    return dataclasses.replace(opts, symbol_prefix=DRAFT_PREFIX, speculate="off", prefill_batch=1, max_seq=max_seq,
                               draft_guesses=k if top_k_of(opts.sampler) else 0,
                               stream="all" if opts.stream == "all" else "off",
                               stream_chunk=opts.stream_chunk if opts.stream == "all" else None)


def compile_with_draft(target: ImportedModel, target_path: Path, draft: ImportedModel, draft_path: Path, k: int,
                       opts: CompileOptions) -> Compiled:
    what = f"--speculate {opts.speculate}"
    seq = checked_context(target, target_path, draft, draft_path, opts, what)
    board = load_board(opts.board)
    d_opts = draft_options(opts, seq, k)
    try:
        d = prepare(draft, d_opts)
    except UserError as e:
        raise draft_refusal(e, draft, d_opts, what) from None
    d_ram = on_chip_arena_bytes(d.fitted.plan)
    t_opts = dataclasses.replace(opts, speculate=f"lookup:{k}", max_seq=seq)
    try:
        t = prepare(target, t_opts, beside(board, d.fitted.plan), opts.ram_budget - d_ram)
    except UserError as e:
        raise over_budget(e, lambda: prepare(target, t_opts).fitted.plan.total_bytes, opts.ram_budget,
                          d.fitted.plan, what) from None
    offset = weights_offset(len(t.program.blob.data), board)
    check_weights(board, offset, len(t.program.blob.data), len(d.program.blob.data), what)
    code = check_code(t.fitted, d.fitted, d.qg.kernels, opts.board, what)
    d_board = draft_board(board, offset)
    d_tree = emit_prepared(d, d_opts, d_board).tree
    record = draft_record(draft_path, k, d, offset, d_ram, code, opts.ram_budget)
    part = DraftPart(dict(d_tree.files), d.fitted.plan, d_board, d.program.blob.data, offset, opts.ram_budget,
                     record)
    return emit_prepared(t, t_opts, draft=part, options={"speculate": f"draft:{draft_path}:{k}"})


def draft_refusal(err: UserError, draft: ImportedModel, d_opts: CompileOptions, what: str) -> UserError:
    """The draft's own refusal (it is planned first, in the whole budget), saying it is the draft's; with the
    full sampler, what its vocabulary-sized buffers take and the top-K alternative."""
    why = f"{what}: the draft model: {err}"
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


def check_code(target, draft, kernels: str, board_name: str, what: str) -> int | None:
    """The draft's code and vocabulary beside the target's in the code flash (the runtime is shared, so the
    draft adds its estimate less the runtime's); returns the draft's bytes (None on the host)."""
    if target.code is None or draft.code is None:
        return None
    extra = draft_code_bytes(draft.code, kernels)
    total = target.code.total_bytes + extra
    if total > target.code.capacity_bytes:
        raise UserError(f"{what}: the code flash would hold about {total:,} B (the draft's code and vocabulary "
                        f"{extra:,} B of it) but board {board_name} has {target.code.capacity_bytes:,} B: use a "
                        "smaller draft, or no draft (--speculate lookup)")
    return extra


def draft_code_bytes(code, kernels: str) -> int:
    """The draft's code flash beside its target: its estimate less the runtime the two share."""
    return max(0, code.total_bytes - RUNTIME_BYTES.get(kernels, 0))


def draft_cost(path: Path, k: int, plan: MemoryPlan, weights_bytes: int, offset: int, ram: int, code: int | None,
               budget: int) -> dict:
    """What plan, the manifest and report.json say of the draft: its source, k, and what it costs."""
    return {"source": str(path), "dir": DRAFT_DIR, "symbol_prefix": DRAFT_PREFIX, "k": k, "max_seq": plan.max_seq,
            "weights_bytes": weights_bytes, "weights_offset": offset,
            "ram_bytes": ram, "kv_cache_bytes": plan.kv_cache_bytes, "external_ram_bytes": plan.external_bytes,
            "code_flash_bytes": code, "budget_bytes": budget}


def draft_record(path: Path, k: int, d, offset: int, ram: int, code: int | None, budget: int) -> dict:
    """draft_cost of a prepared draft, with its blob's hash (the manifest's record)."""
    return {**draft_cost(path, k, d.fitted.plan, len(d.program.blob.data), offset, ram, code, budget),
            "model_sha256": d.program.blob.sha256}


def plan_with_draft(model_path: Path, tokenizer: Path | None, opts: CompileOptions, sampler: str, quant: str,
                    stream: str, stream_chunk: int | None, prefill_batch, unroll_layers: bool,
                    speculate: str) -> tuple[dict, str]:
    """`plan TARGET --speculate draft:DRAFT[:k]`: compile_with_draft's fit without quantizing (compile.plan_model
    for the target, in what the draft leaves); the document's "draft" and the text's last line say what the
    draft costs."""
    what = f"--speculate {speculate}"
    target, draft, draft_path, k = load_pair(model_path, tokenizer, opts, speculate)
    seq = checked_context(target, Path(model_path), draft, draft_path, opts, what)
    board = load_board(opts.board)
    d_opts = draft_options(dataclasses.replace(opts, stream=stream, stream_chunk=stream_chunk, sampler=sampler), seq, k)
    src = plan_source(draft, d_opts, quant, board)
    vocab = vocabulary_of(draft.tokenizer, draft.graph.config.vocab_size).size
    req = FitRequest(board, opts.ram_budget, seq, d_opts.stream, d_opts.stream_chunk, 1, vocab, unroll_layers,
                     opts.kv_region, ("off", None), parse_context_policy(opts.context_policy) is not None)
    try:
        d = fit_step(lower_step(src, d_opts.sampler, d_opts.draft_guesses), src, req)
    except UserError as e:
        raise draft_refusal(e, draft, d_opts, what) from None
    d_ram = on_chip_arena_bytes(d.plan)
    t_opts = dataclasses.replace(opts, max_seq=seq, ram_budget=opts.ram_budget - d_ram)
    args = (model_path, tokenizer, t_opts, sampler, quant, stream, stream_chunk, prefill_batch, unroll_layers,
            f"lookup:{k}")
    try:
        doc, text = plan_model(*args, board=beside(board, d.plan))
    except UserError as e:
        alone = dataclasses.replace(t_opts, ram_budget=opts.ram_budget)
        raise over_budget(e, lambda: plan_model(model_path, tokenizer, alone, *args[3:])[0]["total_sram_bytes"],
                          opts.ram_budget, d.plan, what) from None
    offset = weights_offset(doc["weights_bytes"], board)
    check_weights(board, offset, doc["weights_bytes"], d.weights_bytes, what)
    has_code = d.code is not None and doc.get("code_flash_bytes") is not None
    code = draft_code_bytes(d.code, src.kernels) if has_code else None
    doc["draft"] = draft_cost(draft_path, k, d.plan, d.weights_bytes, offset, d_ram, code, opts.ram_budget)
    return doc, text + draft_text(doc["draft"], doc["total_sram_bytes"])
