"""The pipeline, one named step per stage:

    import -> IR -> quantize -> lower -> fit (plan) -> bind -> emit -> write

`compile_model` returns every intermediate so the CLI, tests and reports
can look at any stage; `write_tree` puts the emitted files on disk
atomically (all or nothing).  The graph is lowered once; the searches
(fit/search.py) plan that one step at every candidate they try."""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .bind import Program, bind, verify_program
from .board import Board, load_board
from .context import ContextRoll, context_roll, parse_context_policy
from .emit import EmittedTree, emit_tree
from .errors import UserError, first_line
from .fit.search import (AUTO, KV_REGIONS, FitRequest, Planner, check_code, check_weights, model_context,
                         speculate_note, speculation_cost)
from .fit.search import fit as fit_step
from .fit.tradeoffs import prefill_rows, prefill_text, sampler_saving, stream_rows, stream_text
from .frontends import ImportedModel, Tokenizer, load_model
from .ir import output_weight_name
from .kernels.c_names import DEFAULT_PREFIX, check_symbol_prefix
from .lower.blob import build_blob
from .lower.records import StepSource, source_of
from .lower.speculate import parse_speculate
from .lower.step import lower_step
from .plan.memory import MemoryPlan
from .plan.regions import check_kv_region
from .plan.report import plan_json, plan_text
from .quant.calibrated import calibration_documents, quantize_calibrated
from .quant.classifier_q4 import CLASSIFIER_QUANTS, requantize_classifier
from .quant.formats import KERNEL_SETS, WEIGHT_QUANTS, QuantizedGraph
from .quant.gguf_keep import kept_formats, quantize_gguf
from .quant.kv import KV8, KVBits, kv4_key_scales, kv_centering, kv_rotation, kv_rotation_note, parse_kv_bits
from .quant.kv_center import kv_calibration_documents, kv_centers
from .quant.per_channel import calibration_tokens, quantize_per_channel
from .quant.rtn import quantize_graph
from .quant.verify import verify_quantized
from .frontends.vocab_map import vocab_map
from .reference.draft import DraftModel
from .reference.executor import Executor, FloatKernels, QuantKernels, rope_tables
from .reference.sampler import sampler_problem
from .plan.traffic import kv_read, step_traffic
from .timing import predicted_for
from .verify import verify_graph
from .vocab import check_vocab_fits, vocabulary_of

DEFAULT_RAM_BUDGET = 512 * 1024
MAX_RAM_BUDGET = 1 << 32  # a Cortex-M7's whole address space
# Output trees are never written into kernel pseudo-filesystems.
_VIRTUAL_ROOTS = ("/proc", "/sys", "/dev")


@dataclass(frozen=True)
class CompileOptions:
    board: str = "qemu-mps2-an500"
    group_size: int = 32
    kv_bits: KVBits = KV8  # --kv-bits 8, 4 or 8:4 (quant/kv.py; an int or a spelling given here is parsed)
    # int4 KV: Hadamard rotation of k and q per head (quant/kv.py): auto (on where head_dim is a power of two),
    # hadamard, off; resolved into QuantizedGraph.kv_rotate by quantize()
    kv_rotate: str = "auto"
    # the rotated int4 cache centred on calibration text (quant/kv_center.py): auto (wherever the keys are
    # rotated), calibrated (asked for: an error elsewhere), off
    kv_center: str = "auto"
    max_seq: int | str | None = None  # None: the model's context; "auto": the longest that fits (fit/search.py)
    ram_budget: int = DEFAULT_RAM_BUDGET
    kernels: str = "auto"  # "auto": the board's (Cortex-M7 boards: "cortex-m7"), or "portable" / "cortex-m7"
    quant: str = "group"  # "group": W4A8 group-wise; "per-channel": CMSIS-NN arithmetic (quant/per_channel.py)
    calibration: Path | None = None  # text for per-channel static scales (None: the built-in sample)
    # group scheme's weights: "auto" (a GGUF input's Q4_0/Q4_1/Q8_0 blocks kept as they are, "gguf";
    # otherwise "rtn"), gguf (quant/gguf_keep.py), rtn | clip | awq (INT4, quant/calibrated.py, uses `calibration`)
    weight_quant: str = "auto"
    sampler: str = "full"  # "greedy": argmax only, no logits vector or sampler scratch in RAM (plan/lifetimes.py)
    # weight streaming (lower/stream.py): off | all | auto (boards whose weights are external: pin what fits,
    # stream the rest; elsewhere off)
    stream: str = "auto"
    stream_chunk: int | None = None  # bytes per stream chunk (None: 16 KiB, less when SRAM is short)
    unroll_layers: bool = False  # print each layer's calls instead of the loop over LAYERS (emit/layer_table.py)
    prefill_batch: str | int = "auto"  # prompt tokens per weight pass (lower/prefill.py): auto (fit's) or 1..4
    # a kept GGUF's classifier: keep its blocks (lossless), or "q4": re-rounded to Q4_0 (quant/classifier_q4.py)
    classifier_quant: str = "keep"
    # where the KV cache goes (fit/search.py): sram (the RAM budget), sdram (a board's external RAM, outside
    # the budget), auto (SRAM when the context fits there, else SDRAM; where no max_seq is given and the
    # model's context fits nowhere, the longest context in SDRAM: fit/search.longest_context)
    kv_region: str = "auto"
    # speculative decoding (lower/speculate.py): off (plain decoding, the default), lookup (k by the timing
    # model), lookup:k, or auto (lookup where the timing model predicts a gain and the plan fits, else off)
    speculate: str = "off"
    # when the KV cache is full (context.py): stop (the default), or roll[:sinks] (keep the sinks and a window)
    context_policy: str = "stop"
    # the C symbols' prefix (kernels/c_names.py): tllm_model_ (the default, what the engine calls), or another
    # (tllm_draft_) so that this model links beside a second one
    symbol_prefix: str = DEFAULT_PREFIX
    # a top-K draft model's guesses per pass whose q (K candidates each) it keeps for the engine
    # (compile_draft.py sets it; 0: none)
    draft_guesses: int = 0

    def __post_init__(self):
        object.__setattr__(self, "kv_bits", parse_kv_bits(self.kv_bits))


@dataclass(frozen=True)
class Compiled:
    model: ImportedModel
    qgraph: QuantizedGraph
    plan: MemoryPlan
    program: Program
    tree: EmittedTree
    trade_off: str = ""  # what --max-seq auto chose, and the other KV precision's figure
    speculate_note: str = ""  # how speculation was decided, and what it costs (fit/search.py)
    draft: dict | None = None  # --speculate draft:MODEL: what the manifest records of the draft (compile_draft.py)


def parse_size(text: str | int) -> int:
    """'512K', '1M', '512KiB', '300000' -> bytes (an int passes through,
    checked the same way).  ASCII digits only, at most 4 GiB."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        t = str(text).strip().upper().removesuffix("B").removesuffix("I")
        mult = {"K": 1024, "M": 1024 * 1024}.get(t[-1:], 1) if t else 1
        digits = t[:-1] if t[-1:] in ("K", "M") else t
        if not digits or len(digits) > 12 or not (digits.isascii() and digits.isdigit()):
            raise UserError(f"bad size {str(text)[:40]!r}: use bytes or a K/M suffix, e.g. 512K")
        value = int(digits) * mult
    if value <= 0:
        raise UserError(f"bad size {str(text)[:40]!r}: must be positive")
    if value > MAX_RAM_BUDGET:
        raise UserError(f"bad size {str(text)[:40]!r}: more than the 4 GiB a Cortex-M7 can address")
    return value


def resolve_max_seq(model: ImportedModel, requested: int | None) -> int:
    return model_context(model.graph.config, requested)


def require_tokenizer(model: ImportedModel) -> Tokenizer:
    if model.tokenizer is None:
        raise UserError(f"{model.source}: no tokenizer found: add tokenizer.json to the model directory "
                        "or pass --tokenizer tokenizer.bin")
    return model.tokenizer


def check_draft(draft: ImportedModel, path: Path, target: ImportedModel, target_path: Path, max_seq: int):
    """A draft model's fitness beside its target, one line each: a tokenizer, at least the target's
    context, and a vocabulary mapped onto the target's (vocab_map.py); returns the VocabMap."""
    if draft.tokenizer is None:
        raise UserError(f"--speculate draft:{path}: the draft has no tokenizer, so its ids cannot be matched to "
                        f"{target_path}'s; put its tokenizer.json beside it")
    if draft.graph.config.max_seq < max_seq:
        raise UserError(f"--speculate draft:{path}: the draft was trained for {draft.graph.config.max_seq} "
                        f"positions but {target_path} runs {max_seq}: use --max-seq {draft.graph.config.max_seq}")
    return vocab_map(require_tokenizer(target), target.graph.config.vocab_size, draft.tokenizer,
                     draft.graph.config.vocab_size, str(target_path), str(path))


def load_draft(path: Path, target: ImportedModel, target_path: Path, opts: CompileOptions, max_seq: int,
               fp32: bool = False) -> DraftModel:
    """`--speculate draft:MODEL`: the draft model quantized with the target's
    options (or float, as the target runs), with its own KV cache for the
    target's context, and its ids mapped onto the target's (vocab_map.py)."""
    draft = load_model(path)
    vmap = check_draft(draft, path, target, target_path, max_seq)
    kernels = FloatKernels(draft.graph, max_seq) if fp32 else \
        QuantKernels(quantize(draft, opts, max_seq=max_seq), max_seq)
    return DraftModel(Executor(draft.graph, kernels), vmap, target.graph.config.vocab_size)


def resolve_kernels(opts: CompileOptions, board: Board | None = None) -> str:
    """Which kernel set (and so weight layout) the firmware uses. The
    arithmetic is the same for all of them: the reference does not care."""
    if opts.kernels != "auto":
        if opts.kernels not in KERNEL_SETS:
            raise UserError(f"--kernels {opts.kernels} is not known: choose auto, {', '.join(KERNEL_SETS)}")
        return opts.kernels
    if board is None:
        return "portable"
    return board.kernels


def check_sampler(opts: CompileOptions) -> None:
    if (why := sampler_problem(opts.sampler)) is not None:
        raise UserError(f"--sampler {why}")
    if opts.sampler != "full" and opts.quant == "per-channel":
        raise UserError(f"--sampler {opts.sampler} streams the group-wise classifier; --quant per-channel keeps "
                        "the full sampler: drop one of them")


def resolve_weight_quant(model: ImportedModel, weight_quant: str) -> str:
    """"auto": keep a GGUF file's llama.cpp blocks ("gguf") when it has any, else "rtn"."""
    if weight_quant not in ("auto",) + WEIGHT_QUANTS:
        raise UserError(f"--weight-quant {weight_quant} is not known: choose auto, {', '.join(WEIGHT_QUANTS)}")
    blocks = getattr(model, "blocks", None)
    if weight_quant == "gguf" and blocks is None:
        raise UserError(f"--weight-quant gguf keeps a GGUF file's blocks; {model.source} is not a GGUF file: "
                        "use rtn, clip or awq")
    if weight_quant != "auto":
        return weight_quant
    return "gguf" if blocks and kept_formats(blocks) else "rtn"


def quantize(model: ImportedModel, opts: CompileOptions, board: Board | None = None,
             max_seq: int | None = None) -> QuantizedGraph:
    """The weights as the build stores them, with the KV cache's rotation
    resolved and, where it is centred, its centres for a context of max_seq
    (None: opts.max_seq where it is a number, else the model's context)."""
    qg = quantize_uncentred(model, opts, board)
    if isinstance(opts.max_seq, int) and max_seq is None:
        max_seq = opts.max_seq
    return with_kv_centers(qg, model, opts, max_seq or qg.config.max_seq)


def quantize_uncentred(model: ImportedModel, opts: CompileOptions, board: Board | None = None) -> QuantizedGraph:
    """quantize without the KV centres, which need the context the plan decides."""
    rotation = kv_rotation(opts.kv_rotate, opts.kv_bits, model.graph.config.head_dim)  # a bad option first
    kv_centering(opts.kv_center, opts.kv_bits, rotation)  # and a centring that cannot apply
    return replace(quantize_weights(model, opts, board), kv_rotate=rotation)


def with_kv_centers(qg: QuantizedGraph, model: ImportedModel, opts: CompileOptions, max_seq: int) -> QuantizedGraph:
    """qg with the centres of its KV cache (quant/kv_center.py) for a context of max_seq, where opts centre it."""
    if not kv_centering(opts.kv_center, opts.kv_bits, qg.kv_rotate):
        return qg
    docs = kv_calibration_documents(require_tokenizer(model), opts.calibration, qg.config.max_seq)
    return replace(qg, kv_centers=kv_centers(qg.graph, docs, max_seq))


def quantize_weights(model: ImportedModel, opts: CompileOptions, board: Board | None = None) -> QuantizedGraph:
    graph = verify_graph(model.graph)
    weight_quant = resolve_weight_quant(model, opts.weight_quant)
    if opts.quant == "per-channel" and opts.weight_quant == "auto":
        weight_quant = "rtn"
    opts = replace(opts, weight_quant=weight_quant)
    if opts.quant == "per-channel" and opts.weight_quant != "rtn":
        raise UserError(f"--weight-quant {opts.weight_quant} applies to --quant group only: drop one of them")
    if opts.quant == "per-channel":
        tokens = calibration_tokens(require_tokenizer(model), graph.config.max_seq, opts.calibration)
        return quantize_per_channel(graph, tokens, opts.kv_bits)
    if opts.quant != "group":
        raise UserError(f"--quant {opts.quant} is not known: choose group or per-channel")
    if opts.classifier_quant not in CLASSIFIER_QUANTS:
        raise UserError(f"--classifier-quant {opts.classifier_quant} is not known: choose {', '.join(CLASSIFIER_QUANTS)}")
    if opts.classifier_quant != "keep" and opts.weight_quant != "gguf":
        raise UserError("--classifier-quant q4 re-rounds a GGUF file's kept classifier; this build re-rounds every "
                        "matrix already (--weight-quant): drop one of them")
    if opts.weight_quant == "gguf":  # lossless: the file's own blocks (quant/gguf_keep.py), tiled for the M7
        qg = quantize_gguf(graph, model.blocks, opts.group_size, opts.kv_bits, resolve_kernels(opts, board))
        if opts.classifier_quant == "q4":
            docs = calibration_documents(require_tokenizer(model), opts.calibration, graph.config.max_seq)
            qg = requantize_classifier(qg, docs)
        return qg
    if opts.weight_quant != "rtn":
        docs = calibration_documents(require_tokenizer(model), opts.calibration, graph.config.max_seq)
        return quantize_calibrated(graph, docs, opts.weight_quant, opts.group_size, opts.kv_bits,
                                   resolve_kernels(opts, board))
    return quantize_graph(graph, opts.group_size, opts.kv_bits, resolve_kernels(opts, board))


def fit_request(opts: CompileOptions, board: Board, vocab: tuple[int, int] | None) -> FitRequest:
    return FitRequest(board, opts.ram_budget, opts.max_seq, opts.stream, opts.stream_chunk, opts.prefill_batch,
                      vocab, opts.unroll_layers, opts.kv_region, parse_speculate(opts.speculate),
                      parse_context_policy(opts.context_policy) is not None)


def manifest_options(opts: CompileOptions, qg: QuantizedGraph, program: Program,
                     roll: ContextRoll | None = None) -> dict:
    """The options the manifest and every banner record."""
    options = {"board": opts.board, "group_size": opts.group_size, "kv_bits": opts.kv_bits.json_value(),
               "max_seq": program.max_seq, "ram_budget": opts.ram_budget, "quant": qg.method,
               "kernels": qg.kernels, "sampler": opts.sampler}
    if qg.kv_bits == 4:  # int4 trees say which rotation their cache uses; int8 trees keep their manifests
        # and how its keys' group scales are chosen (quant/kv.kv4_key_scales)
        options.update(kv_rotate=qg.kv_rotate, kv4_k_scales=kv4_key_scales(qg.kv_rotate))
        if qg.kv_centers is not None:  # only when centred: the other int4 trees keep their manifests
            options.update(kv_center="calibrated")
    if program.stream is not None:  # only when on: trees compiled without it keep their manifests
        options.update(stream=opts.stream, stream_chunk=program.stream.options.chunk_bytes)
    if opts.unroll_layers:  # only when asked: other trees keep their manifests' options
        options.update(unroll_layers=True)
    if opts.classifier_quant != "keep":
        options.update(classifier_quant=opts.classifier_quant)
    if program.plan.kv_region_option == "sdram":  # where it went, only when outside: SRAM trees stay as they were
        options.update(kv_region="sdram")
    if program.speculate is not None:  # only when on: plain trees keep their manifests' options
        options.update(speculate=f"{program.speculate.draft}:{program.speculate.k}")
    if roll is not None:  # only when rolling: trees that stop keep their manifests' options
        options.update(context_policy=roll.policy)
    if opts.symbol_prefix != DEFAULT_PREFIX:  # only when asked: the default trees keep their manifests
        options.update(symbol_prefix=opts.symbol_prefix)
    return options


@dataclass(frozen=True)
class Prepared:
    """A model through bind, not emitted yet: what `emit_prepared` renders
    (draft.py plans a draft model and its target before emitting either)."""

    model: ImportedModel
    qg: QuantizedGraph
    fitted: object  # fit/search.Fitted
    program: Program
    board: Board
    tokenizer: Tokenizer
    roll: ContextRoll | None


def prepare(model: ImportedModel, opts: CompileOptions, board: Board | None = None,
            budget: int | None = None, draft_model=None) -> Prepared:
    """Quantize, lower, fit and bind.  board / budget: what the plan may use
    when it is not the whole of opts' board and budget (a draft model beside
    this one holds the rest, compile_draft.py); the manifest still records opts'.
    draft_model: (timing.Acceptance, timing.DraftCost) of the draft model the
    verification pass serves, which prices the k (FitRequest.draft_model)."""
    check_sampler(opts)  # option errors first: they cost nothing to fix
    parse_speculate(opts.speculate)
    parse_context_policy(opts.context_policy)
    check_symbol_prefix(opts.symbol_prefix)
    board = board or load_board(opts.board)
    check_kv_region(board, opts.kv_region, KV_REGIONS)
    tokenizer = require_tokenizer(model)
    qg = verify_quantized(quantize_uncentred(model, opts, board))  # every stage's output is checked at its boundary
    vocab = vocabulary_of(tokenizer, qg.config.vocab_size)
    src = replace(source_of(qg), kv_center=centring_of(opts, model))
    req = replace(fit_request(replace(opts, ram_budget=opts.ram_budget if budget is None else budget), board,
                              vocab.size), draft_model=draft_model)
    fitted = fit_step(lower_step(src, opts.sampler, opts.draft_guesses), src, req)  # lowered once
    qg = with_kv_centers(qg, model, opts, fitted.plan.max_seq)  # the centres of the context the plan chose
    check_code(fitted, opts.board)  # the code flash, before the linker would say so
    external_vocab = fitted.vocab_in_weights  # too big for the code flash: into the weights blob
    cos, sin = rope_tables(qg.config.head_dim, qg.config.rope_theta, fitted.plan.max_seq)
    blob = build_blob(qg, cos, sin, vocab.text if external_vocab else None, vocab.offsets if external_vocab else None)
    program = verify_program(bind(fitted.step, fitted.plan, blob, qg))
    check_vocab_fits(board, vocab, len(blob.data), external_vocab)
    limit = board.weights.max_bytes
    if limit is not None and len(blob.data) > limit:
        raise UserError(f"weights are {len(blob.data):,} B but board {opts.board} holds {limit:,} B "
                        "of weights: use a smaller model")
    roll = context_roll(opts.context_policy, program.max_seq)
    return Prepared(model, qg, fitted, program, board, tokenizer, roll)


def emit_prepared(p: Prepared, opts: CompileOptions, board: Board | None = None, draft=None,
                  options: dict | None = None) -> Compiled:
    """Render a prepared model's tree (board: the one its C is emitted for, default the planned one;
    draft: emit.draft_tree.DraftPart, the draft model the tree also holds; options: manifest options
    that replace what opts would record)."""
    recorded = manifest_options(opts, p.qg, p.program, p.roll) | (options or {})
    tree = emit_tree(p.program, p.tokenizer, board or p.board, recorded, opts.unroll_layers, p.roll,
                     opts.symbol_prefix, draft)
    return Compiled(p.model, p.qg, p.fitted.plan, p.program, tree, p.fitted.trade_off, speculate_note(p.fitted),
                    draft.record if draft is not None else None)


def compile_model(model: ImportedModel, opts: CompileOptions) -> Compiled:
    return emit_prepared(prepare(model, opts), opts)


def context_for(model: ImportedModel, opts: CompileOptions, budget: int) -> int:
    """The context `reference --max-seq auto` runs at: what compile would pick for the default board."""
    if opts.max_seq != AUTO:
        return resolve_max_seq(model, opts.max_seq)
    src = StepSource(model.graph, opts.group_size, opts.kv_bits,
                     kv_rotate=kv_rotation(opts.kv_rotate, opts.kv_bits, model.graph.config.head_dim),
                     kv_center=centring_of(opts, model))
    return Planner(load_board(opts.board), budget).auto_max_seq(lower_step(src), model.graph.config.max_seq)


def speculate_k_for(qg: QuantizedGraph, opts: CompileOptions, sampler: str, budget: int) -> int:
    """The k `compile --speculate lookup` picks on opts' board (the
    reference's default board) for this quantized model: its kernel set's
    layouts, planned without the vocabulary (the reference prints none)."""
    board = load_board(opts.board)
    src = source_of(qg)
    if not src.kept:  # the board's kernel set decides the layouts (and so the timing model's rates)
        src = replace(src, kernels=resolve_kernels(opts, board))
    req = fit_request(replace(opts, speculate="lookup", ram_budget=budget, sampler=sampler), board, None)
    return fit_step(lower_step(src, sampler), src, req).step.speculate.k


def compile_path(model_path: Path, opts: CompileOptions, tokenizer: Path | None = None) -> Compiled:
    check_kv_region(load_board(opts.board), opts.kv_region, KV_REGIONS)  # before the model is read
    return compile_model(load_model(Path(model_path), tokenizer), opts)


def _os_error(out: Path, e: OSError) -> UserError:
    what = {errno.ENOSPC: "the disk is full", errno.EFBIG: "a file exceeds the file-size limit",
            errno.ENAMETOOLONG: "a path component is longer than the file system allows",
            errno.EDQUOT: "the disk quota is exceeded"}.get(e.errno, e.strerror or first_line(e))
    return UserError(f"cannot write {out}: {what}; nothing was written (an existing output is kept)")


def check_out_dir(out: Path) -> Path:
    """Validate -o before any work and return the directory to replace.

    OUT may be new, empty, or an earlier tinyllm-gen output.  A symlink to
    a directory is written through: its target is replaced atomically and
    the link still points at the new tree.  A dangling symlink, a path
    under a regular file, a path in /proc, /sys or /dev and a path the OS
    cannot name are refused in one line."""
    out = Path(out)
    try:
        if os.path.islink(out):
            target = Path(os.path.realpath(out))
            if not target.exists():
                raise UserError(f"{out} is a symlink to {os.readlink(out)}, which does not exist: "
                                "create the directory it points to, or choose another -o")
            if not target.is_dir():
                raise UserError(f"{out} is a symlink to {target}, which is not a directory: choose another -o")
            out = target
        else:
            out = Path(os.path.abspath(out))
        if any(str(out) == r or str(out).startswith(r + "/") for r in _VIRTUAL_ROOTS):
            raise UserError(f"{out} is in a kernel pseudo-filesystem ({str(out).split('/')[1]}): choose another -o")
        if out.exists() and not out.is_dir():
            raise UserError(f"{out} exists and is not a directory: choose another -o")
        if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").is_file():
            raise UserError(f"{out} is not empty and not a tinyllm-gen output (no manifest.json): "
                            "choose an empty or new directory")
        for parent in out.parents:  # the nearest existing ancestor must be a directory
            if parent.exists() or os.path.islink(parent):
                if not parent.is_dir():
                    raise UserError(f"cannot write {out}: {parent} is not a directory")
                break
        for part in out.parts:
            if len(os.fsencode(part)) > 200:  # leaves room for the temporary sibling's prefix and suffix
                raise UserError(f"cannot write {out}: a path component is {len(os.fsencode(part))} bytes, "
                                "longer than tinyllm-gen accepts (200)")
    except OSError as e:
        raise _os_error(out, e) from None
    return out


def write_tree(tree: EmittedTree, out: Path) -> None:
    """Write to a sibling temp dir, then swap it in: OUT is either the old
    tree or the complete new one, never half-written.  Any OS error (a full
    disk, a file-size limit) removes what was written and becomes one line."""
    shown = Path(out)
    out = check_out_dir(out)
    created: list[Path] = []  # missing ancestors made here, removed again on failure
    tmp: Path | None = None
    old: Path | None = None
    try:
        for parent in reversed(out.parents):
            if not parent.exists():
                parent.mkdir()
                created.append(parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        for rel, data in tree.files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            if old is not None:
                old.rename(out)
                old = None
            raise
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                break
        if isinstance(e, OSError):
            raise _os_error(shown, e) from None
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def centring_of(opts: CompileOptions, model: ImportedModel) -> bool:
    """Whether opts' build centres its cache (quant/kv_center.kv_centering), without computing the centres."""
    hd = model.graph.config.head_dim
    return kv_centering(opts.kv_center, opts.kv_bits, kv_rotation(opts.kv_rotate, opts.kv_bits, hd))


def plan_source(model: ImportedModel, opts: CompileOptions, quant: str, board: Board) -> StepSource:
    """What `plan` lowers: the graph with the weight layout compile would pick, no weights quantized
    (the kernel set decides the layouts and the activation scratch; a kept file's qtypes, with
    --classifier-quant q4 its classifier's Q4_0, decide the GGUF kernels)."""
    method = "per-channel" if quant == "per-channel" else resolve_weight_quant(model, opts.weight_quant)
    kernels = resolve_kernels(opts, board)
    kept = kept_formats(model.blocks) if method == "gguf" else {}
    classifier = output_weight_name(model.graph.config)
    if opts.classifier_quant == "q4" and classifier in kept:
        kept[classifier] = "Q4_0"  # what requantize_classifier stores
    kept = tuple(sorted(kept.items()))
    return StepSource(verify_graph(model.graph), opts.group_size, opts.kv_bits, kernels, method, kept,
                      kv_rotate=kv_rotation(opts.kv_rotate, opts.kv_bits, model.graph.config.head_dim),
                      kv_center=centring_of(opts, model))


def plan_model(model_path: Path, tokenizer: Path | None, opts: CompileOptions, sampler: str, quant: str, stream: str,
               stream_chunk: int | None, prefill_batch: str | int, unroll_layers: bool,
               speculate: str = "off", board: Board | None = None) -> tuple[dict, str]:
    """`tinyllm-gen plan`: the fit compile would make, without quantizing; (JSON document, text).
    board: the memory the plan may use when it is not all of opts' board's (compile_draft.py)."""
    doc, text, _ = plan_model_fit(model_path, tokenizer, opts, sampler, quant, stream, stream_chunk, prefill_batch,
                                  unroll_layers, speculate, board)
    return doc, text


def plan_model_fit(model_path: Path, tokenizer: Path | None, opts: CompileOptions, sampler: str, quant: str,
                   stream: str, stream_chunk: int | None, prefill_batch: str | int, unroll_layers: bool,
                   speculate: str = "off", board: Board | None = None, draft_model=None, model=None):
    """plan_model's (document, text) and the fit they describe; draft_model: as prepare's; model: the
    ImportedModel at model_path when it is read already."""
    spec = parse_speculate(speculate)
    rolling = parse_context_policy(opts.context_policy) is not None
    board = board or load_board(opts.board)
    check_kv_region(board, opts.kv_region, KV_REGIONS)
    m = model if model is not None else load_model(Path(model_path), tokenizer)
    src = plan_source(m, opts, quant, board)
    vocab = vocabulary_of(m.tokenizer, m.graph.config.vocab_size).size if m.tokenizer is not None else None
    req = FitRequest(board, opts.ram_budget, opts.max_seq, stream, stream_chunk, prefill_batch, vocab, unroll_layers,
                     opts.kv_region, spec, rolling, draft_model=draft_model)
    base = lower_step(src, sampler)
    memo: dict = {}  # one plan per batch size, shared by the choice and the trade-off rows
    res = fit_step(base, src, req, memo)
    req = res.request  # the context it chose where the model's did not fit: the rows below are planned with it
    batch_rows = prefill_rows(base, src, req, memo)
    check_weights(res, opts.board, src.group_size, src.method)
    check_code(res, opts.board)
    # the trade-off of a build that streams (auto resolves to off where nothing can be streamed)
    rows = stream_rows(base, req, res.prefill_batch, res.plan.kv_region_option == "sdram") \
        if res.stream is not None else []
    saved = sampler_saving(lower_step(src, "full"), src, req, res) if sampler != "full" else None
    traffic = step_traffic(res.step)
    pred = predicted_for(traffic.workload(), board, prefill_batch=res.prefill_batch,
                         chunk_bytes=res.stream.chunk_bytes if res.stream else None,
                         kv=kv_read(res.plan, res.step.config))
    doc = _plan_doc(res, stream, pred, saved, batch_rows, rows)
    doc["traffic"] = traffic.json()
    text = _plan_text(res, stream, sampler, saved, batch_rows, rows)
    roll = context_roll(opts.context_policy, res.plan.max_seq)
    if roll is not None:  # only when rolling: plans that stop keep their documents
        doc["context"] = {"policy": roll.policy, "sinks": roll.sinks, "discard": roll.discard}
        text += (f"  context {roll.policy}: past max_seq {res.plan.max_seq} the first {roll.sinks} positions stay "
                 f"and the oldest {roll.discard} after them are dropped per shift (docs/rolling-context.md)\n")
    note = kv_rotation_note(opts.kv_rotate, opts.kv_bits, m.graph.config.head_dim)
    if note:  # auto left the int4 cache unrotated: say why
        doc["kv_rotate_note"] = note
        text += f"  {note}\n"
    return doc, text, res


def _plan_doc(res, stream: str, pred: dict, saved: dict | None, batch_rows: list, rows: list) -> dict:
    doc = plan_json(res.plan)
    doc.update(weights_bytes=res.weights_bytes, weights_capacity_bytes=res.weights_capacity,
               trade_off=res.trade_off or None)
    if res.code is not None:  # the estimate compile checks too (plan/codesize.py)
        doc.update(code_flash_bytes=res.code.total_bytes, code_flash_capacity_bytes=res.code.capacity_bytes,
                   vocab_in_weights=res.vocab_in_weights)
    doc["predicted"] = pred
    if saved is not None:
        doc["sampler"] = saved
    doc["prefill"] = {"batch": res.prefill_batch, "chosen": res.prefill_why, "trade_off": batch_rows}
    if res.speculate_why:
        sp = res.step.speculate
        doc["speculate"] = {"k": sp.k if sp else 0, "chosen": res.speculate_why, "cost": speculation_cost(res)}
    if stream != "off":
        doc["stream"] = {"mode": stream, "chunk_bytes": res.stream.chunk_bytes if res.stream else None,
                         "pinned": sorted(res.stream.pinned) if res.stream else [], "trade_off": rows}
    return doc


def _plan_text(res, stream: str, sampler: str, saved: dict | None, batch_rows: list, rows: list) -> str:
    lines = [plan_text(res.plan).rstrip("\n"),
             f"  weights       {res.weights_bytes:,} B of {res.weights_capacity or 0:,} B in the board's weights storage"]
    if res.code is not None:
        where = "in the weights blob" if res.vocab_in_weights else "in code flash"
        lines.append(f"  code flash    about {res.code.total_bytes:,} B of {res.code.capacity_bytes:,} B "
                     f"({res.code.region}; vocabulary {where})")
    if res.trade_off:
        lines.append("  " + res.trade_off)
    if res.stream is not None:
        lines.append(f"  weight stream --stream {stream}: chunks of at most {res.stream.chunk_bytes:,} B, "
                     f"{len(res.stream.pinned)} weight entries pinned in SRAM")
    text = "\n".join(lines) + "\n" + (stream_text(rows) if rows else "") + prefill_text(res, batch_rows)
    if res.speculate_why:
        text += f"  {speculate_note(res)}\n"
    if saved is not None:
        full = (f"{saved['full_sampler_total_bytes']:,} B, {saved['saved_bytes']:,} B more"
                if saved["full_sampler_total_bytes"] else "more than the budget at this context")
        text += (f"  sampler {sampler}: {saved['sampler_bytes']:,} B of sampler buffers, RAM "
                 f"{saved['total_bytes']:,} B; with the full sampler (the [vocab] logits vector and top-p "
                 f"scratch, {saved['full_sampler_bytes']:,} B) the plan needs {full}\n")
    return text
