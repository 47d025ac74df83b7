"""Program -> firmware source tree.

`emit_tree` returns every output file as path -> bytes (nothing is written
here); compile.py writes the tree atomically.  Output is a pure function of
its inputs: no timestamps, sorted iteration, and a manifest of hashes."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import jinja2
import numpy as np

from .. import __version__
from ..abi import ABI_VERSION  # ABI_VERSION: the runtime's TLLM_ABI_VERSION (firmware/tllm_abi.h)
from ..bind import Program
from ..board import Board
from ..context import ContextRoll
from ..families import config_header, family_files
from ..frontends.tokenizer import Tokenizer
from ..kernels import Attention, FcS4PerChannel
from ..kernels.c_names import (DEFAULT_PREFIX, MODEL_SYMBOLS, arena_macro, arena_symbol, canary_macro, check_unique,
                               offset_macro, prefixed, region_macro, vector_macro)
from ..kernels.c_text import block_comment
from ..kernels.refs import GGUFRef, Q4Ref
from ..lower.step import GUESS_VALUES, kv4_group_of
from ..lower.stream import BUFFERS, PINNED
from ..plan.human import report_files
from ..plan.memory import CANARY_BYTES
from ..plan.report import plan_json, plan_text
from ..plan.traffic import kv_read, traffic_of
from ..quant.kv import KV8V4
from ..quant.kv_center import K_CENTER, V_CENTER, center_name
from ..reference.exact import c_float_literal
from ..resources import cmake_dir, firmware_dir, templates_dir
from ..timing import LOOKUP_ACCEPTANCE, build_mode, predicted_for, speculative_prediction
from ..vocab import vocabulary_of
from .filters import FILTERS
from .draft_tree import DRAFT_PREFIX, DRAFT_TABLE, DraftPart
from .layer_table import c_layer_table, step_form
from .link_layout import arena_regions, linker_variables
from .stream_tables import head_run, pin_table, pinned_at, schedule_json, stream_runs


# OUT/runtime: the C runtime as cmake/TinyLLM.cmake builds it (tinyllm::runtime and the
# model-bound files), plus the console protocol the OUT's own firmware adds to its board code
# (CONSOLE_SOURCES: not part of the library a user's firmware links).
CONSOLE_SOURCES = ("tllm_main.c", "tllm_frame.c")
RUNTIME_SOURCES = ("tllm_kernels.c", "tllm_kernels_m7.c", "tllm_kernels_gguf.c", "tllm_kernels_gguf_m7.c", "tllm_cmsis.c",
                   "tllm_sampler.c", "tllm_engine.c", "tllm_weights.c") + CONSOLE_SOURCES
RUNTIME_HEADERS = ("tllm_abi.h", "tllm_api.h", "tllm_board.h", "tllm_numerics.h", "tllm_math.h", "tllm_kernels.h",
                   "tllm_kernels_m7.h", "tllm_kernels_gguf.h", "tllm_kernels_gguf_m7.h", "tllm_cmsis.h", "tllm_model_api.h",
                   "tllm_request.h", "tllm_sampler.h", "tllm_frame.h", "tllm_stream.h", "tllm_topk.h", "tllm_draft.h",
                   "tllm_verify.h", "tllm_crc32.h", "tllm_m7_asm.h")
# OUT/cmake: the CMake functions (the same file a user's project includes) and the toolchain file.
CMAKE_FILES = ("TinyLLM.cmake",)
VOCAB_CHUNK = 64  # tokens per string literal line in tllm_vocab.c


@dataclass(frozen=True)
class EmittedTree:
    files: Mapping[str, bytes]  # relative path -> contents

    def manifest_entry(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest()


def _env(prefix: str = DEFAULT_PREFIX) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.filters["offset_macro"] = offset_macro
    env.filters.update(block_comment=block_comment, c_layer_table=c_layer_table)
    env.filters.update(arena_symbol=lambda region: arena_symbol(region, prefix), arena_macro=arena_macro,
                       canary_macro=canary_macro, region_macro=region_macro)
    return env


def _option_lines(words: list[str], width: int = 100) -> list[str]:
    """The banner's options, a few per line so every generated file fits 120 columns."""
    lines = [""]
    for w in words:
        if lines[-1] and len(lines[-1]) + 1 + len(w) > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {w}".strip()
    return lines


def _vocab(tokenizer: Tokenizer, vocab_size: int) -> tuple[list[bytes], list[list[int]]]:
    pieces = vocabulary_of(tokenizer, vocab_size).pieces
    offsets = [0]
    for p in pieces:
        offsets.append(offsets[-1] + len(p))
    chunks = [b"".join(pieces[i:i + VOCAB_CHUNK]) for i in range(0, len(pieces), VOCAB_CHUNK)]
    chunks = [c for c in chunks if c] or [b""]
    rows = [offsets[i:i + 16] for i in range(0, len(offsets), 16)]
    return chunks, rows


def _stream_context(program: Program, pinned: dict) -> dict:
    """The weight stream's C tables (stream_tables.py, firmware/tllm_stream.h)."""
    plan = program.stream
    if plan is None:
        return {"stream": None, "pinned_at": {}}
    streamed = bool(plan.buffer_bytes)
    return {"pinned_at": pinned, "stream": {
        "runs": stream_runs(program),
        "pins": [{"src": p.src, "len": p.copy_bytes, "dst": p.dst, "name": p.name} for p in pin_table(program)],
        "buf0": BUFFERS[0] if streamed else "", "buf1": BUFFERS[1] if streamed else "", "streamed": streamed,
        "pinned": PINNED if plan.pinned else "", "buffer_bytes": plan.buffer_bytes, "mode": plan.options.mode,
        "head_run": head_run(program)}}


# A run's guest-instruction bound (run/firmware.py): far above what the kernels take (the portable q4 kernel,
# the slowest, is 14.8 instructions per MAC; attention about 10 per MAC of q.k and v), so only a firmware that
# hangs or loops reaches it, however busy the host that emulates it.
BOUND_PER_MAC = 40
BOUND_PER_VOCAB_ENTRY = 400  # the full sampler's top-p pass over the logits
BOUND_PER_TOKEN_FIXED = 1_000_000
BOUND_PER_BLOB_WORD = 10  # boot: the weights checksum (one multiply-add per word) and the pinned copies
BOUND_BOOT_FIXED = 10_000_000


def run_bound(program: Program, traffic) -> dict:
    """Guest instructions a run may take: at boot, and per token (prompt or generated)."""
    c = program.config
    attention_macs = 2 * c.n_layers * c.n_heads * c.head_dim * program.max_seq
    per_token = (BOUND_PER_MAC * (traffic.macs() + attention_macs) + BOUND_PER_VOCAB_ENTRY * c.vocab_size
                 + BOUND_PER_TOKEN_FIXED)
    return {"boot": BOUND_BOOT_FIXED + BOUND_PER_BLOB_WORD * len(program.blob.data) // 4, "per_token": per_token}


def report_doc(program: Program, board: Board) -> dict:
    """report.json: the plan, the weights' bytes, what a token reads (by role and layout) and what
    that predicts on the board's link, the stream schedule and the prefill's decisions."""
    plan = program.plan
    doc = plan_json(plan)
    doc["weights_bytes"] = len(program.blob.data)
    traffic = traffic_of(program.calls, program.head_start, program.stream, program.config.head_dim)
    doc["traffic"] = traffic.json()
    doc["instruction_bound"] = run_bound(program, traffic)
    doc["predicted"] = predicted_for(traffic.workload(), board, program.prefill_batch,
                                     program.stream.options.chunk_bytes if program.stream else None,
                                     kv_read(plan, program.config))
    if program.stream is not None:
        doc["stream_schedule"] = schedule_json(program)
    pre = program.prefill
    if pre is not None:
        doc["prefill"] = {"batch": pre.batch, "why": pre.why, "batched_buffers": sorted(pre.batched),
                          "batched_bytes": sum(b.size for b in plan.buffers if b.name in pre.batched)}
    if program.speculate is not None:  # only when on: plain builds keep their reports
        doc["speculate"] = speculate_doc(program, board, traffic)
    return doc


def speculate_doc(program: Program, board: Board, traffic) -> dict:
    """report.json's "speculate": the verification pass's k and buffers, how k was chosen, and the decode
    tokens/s the timing model predicts with and without it at the draft's measured acceptance."""
    sp, plan = program.speculate, program.plan
    mode = build_mode(board, program.stream is not None)
    chunk = {"chunk_bytes": program.stream.options.chunk_bytes} if program.stream is not None else {}
    outs = sorted(b.name for b in plan.buffers if b.request.kind == "verify")
    return {"draft": sp.draft, "k": sp.k, "positions": sp.positions, "why": sp.why, "choice": sp.choice,
            "batched_buffers": sorted(sp.batched), "verify_outputs": outs,
            "batched_bytes": sum(b.size for b in plan.buffers if b.name in sp.batched or b.name in outs),
            "predicted": speculative_prediction(board, traffic.workload(), LOOKUP_ACCEPTANCE, sp.k, mode, **chunk)}


def _weights_context(program: Program) -> dict:
    """The weight descriptors tllm_model.c declares: Q4 matrices, kept GGUF
    matrices, per-channel layers and float vectors (pinned ones point into
    the SRAM copy)."""
    all_matrices = sorted({m for call in program.calls for m in call.args.descriptors()}, key=lambda m: m.name)
    matrices = [m for m in all_matrices if not isinstance(m, GGUFRef)]
    assert all(isinstance(m, Q4Ref) for m in matrices)
    check_unique([m.name for m in all_matrices], "matrix")
    fc_layers = sorted({call.args.layer for call in program.calls if isinstance(call.args, FcS4PerChannel)},
                       key=lambda f: f.name)
    vectors = sorted({e.name: e for e in program.blob.entries if e.kind == "f32"}.values(), key=lambda e: e.name)
    pinned = pinned_at(program)  # entry -> offset in stream.pinned (copied at boot)
    vector_refs = [{"name": e.name, "offset": pinned.get(e.name, e.offset), "count": e.nbytes // 4,
                    "base": "TLLM_P" if e.name in pinned else "TLLM_W"} for e in vectors]
    gguf = [m for m in all_matrices if isinstance(m, GGUFRef)]
    return {"matrices": matrices, "gguf_matrices": gguf, "gguf_tiled": any(m.tiled for m in gguf),
            "vectors": vector_refs, "fc_layers": fc_layers, **_stream_context(program, pinned)}


def _kv_centers(names: set, layer: int) -> dict:
    """A centred int4 cache's centre pointers for tllm_kv4_layer (quant/kv_center.py), "0" when uncentred;
    names: the blob's float vectors."""
    return {key: vector_macro(center_name(layer, which)) if center_name(layer, which) in names else "0"
            for key, which in (("k_center", K_CENTER), ("v_center", V_CENTER))}


def _vocab_context(program: Program, tokenizer: Tokenizer) -> dict:
    """The vocabulary's tables: in tllm_vocab.c, or in the weights blob (external flash, vocab.py)."""
    blob = program.blob
    external = any(e.name == "vocab" for e in blob.entries)
    chunks, rows = _vocab(tokenizer, program.config.vocab_size) if not external else ([], [])
    return {"vocab_chunks": chunks, "vocab_offset_rows": rows, "vocab_external": external,
            "vocab_offsets_at": blob.entry("vocab", "u32").offset if external else 0,
            "vocab_text_at": blob.entry("vocab", "u8").offset if external else 0}


def _context(program: Program, tokenizer: Tokenizer, board: Board, options: Mapping[str, object],
             unroll_layers: bool) -> dict:
    """Everything the templates read, computed here (templates do no arithmetic)."""
    c, plan = program.config, program.plan
    buffers = program.buffers()
    blob_vectors = {e.name for e in program.blob.entries if e.kind == "f32"}  # a centred cache's centres among them
    step = step_form(program, unroll_layers)
    check_unique([b.name for b in buffers] + [s.name for s in (step.loop.shared if step.loop else ())], "buffer")
    return {
        "version": __version__, "abi_version": ABI_VERSION, "model_sha256": program.blob.sha256,
        "arch": c.arch, "n_params": f"{c.n_params():,}",
        "option_lines": _option_lines([f"{k}={options[k]}" for k in sorted(options)]),
        "c": c, "max_seq": program.max_seq, "group_size": program.group_size, "kv_bits": program.kv_bits.k,
        "kv_v_bits": program.kv_bits.v, "kv_mixed": program.kv_bits.mixed,
        "plan": plan, "buffers": buffers, "canary_offset": plan.arena_bytes - CANARY_BYTES,
        "blob_bytes": len(program.blob.data), "blob_checksum": program.blob.checksum,
        "weights_external": board.weights.storage == "external",
        "weights_address": f"0x{board.weights.address:08X}" if board.weights.address is not None else "",
        "request_capacity": plan.buffer("request").request.count,
        "q4_layout_note": ("q4x4 tiles for the Cortex-M7 SMLAD kernels" if program.kernels == "cortex-m7"
                           else "packed nibbles and float32 scales"), "attention_scale": program.attention_scale,
        "kv_layers": [{"k": f"l{i}.k_cache", "v": f"l{i}.v_cache", "k_scale": f"l{i}.k_scale", "v_scale": f"l{i}.v_scale",
                       **_kv_centers(blob_vectors, i)} for i in range(c.n_layers)],
        "eos_ids": [str(e) for e in c.eos_ids], "eos_initializer": ", ".join(str(e) for e in c.eos_ids) or "-1",
        "norm_eps_literal": c_float_literal(np.float32(c.norm_eps)), "step": step, "head_calls": program.head_calls,
        "rope_cos": program.rope_cos.name, "rope_sin": program.rope_sin.name, "logits": program.logits.name,
        "weights_file": "../weights.bin",
        "gnu_stack_note": board.toolchain == "host", "board": board,
        "board_config": config_header(board, sdram_used=plan.external_bytes > 0),  # bringup.c starts the SDRAM
        "arena_regions": arena_regions(plan, board),
        "budget_arena_regions": [r for r in arena_regions(plan, board) if not r["external"]],
        "kv4": program.kv_bits == 4, "k8v4": program.kv_bits == KV8V4,
        "kv4_hadamard": any(isinstance(c.args, Attention) and c.args.rotate for c in program.calls),  # the shift undoes it
        "kv4_group": kv4_group_of(c, program.kv_bits), "greedy": program.greedy,
        "top_k": program.top_k, "prefill_batch": program.prefill_batch,
        "guess_sets": any(b.name == GUESS_VALUES for b in buffers),
        "speculate_k": program.speculate.k if program.speculate is not None else 0,
        "prefill_why": program.prefill.why if program.prefill is not None else "Token by token.",
        **_weights_context(program), **_vocab_context(program, tokenizer),
    }


def _copied_files(board: Board) -> dict[str, bytes]:
    """The runtime, the CMake functions and the board's own files, as they are."""
    files = {f"runtime/{name}": (firmware_dir() / name).read_bytes() for name in RUNTIME_SOURCES + RUNTIME_HEADERS}
    files["cmake/arm-none-eabi.cmake"] = (firmware_dir() / "cmake" / "arm-none-eabi.cmake").read_bytes()
    for name in CMAKE_FILES:
        files[f"cmake/{name}"] = (cmake_dir() / name).read_bytes()
    for name in board.sources:
        files[f"board/{name}"] = board.file(name).read_bytes()
    files["board/board.json"] = (board.directory / "board.json").read_bytes()
    return files


def _tokenizer_files(tokenizer: Tokenizer) -> tuple[str, str, dict[str, bytes]]:
    """(kind, the tokenizer's path in OUT, the files): what `run OUT` and `serve` decode with."""
    files = {}
    kind, _, tok_path = tokenizer.source.partition(":")
    if tokenizer.hf_json is not None:  # built in memory (a GGUF's metadata): OUT gets it as tokenizer.json
        kind = "hf"
        files["tokenizer/tokenizer.json"] = tokenizer.hf_json.encode()
    tok_name = {"hf": "tokenizer/tokenizer.json", "llama2c": "tokenizer/tokenizer.bin"}[kind]
    if tok_name not in files:
        files[tok_name] = Path(tok_path).read_bytes()
    tok_config = Path(tok_path).parent / "tokenizer_config.json"
    if kind == "hf" and tok_config.is_file():  # its chat_template is what `serve` and `chat` render with
        files["tokenizer/tokenizer_config.json"] = tok_config.read_bytes()
    elif kind == "hf" and (not tokenizer.add_bos or tokenizer.chat_template):
        # what `run OUT` needs beyond tokenizer.json: no BOS (SmolLM2), --chat's template
        files["tokenizer/tokenizer_config.json"] = (json.dumps(
            {"add_bos_token": tokenizer.add_bos, "chat_template": tokenizer.chat_template},
            indent=2, sort_keys=True) + "\n").encode()
    return kind, tok_name, files


def config_doc(c) -> dict:
    """A ModelConfig as JSON (ir.ModelConfig(**doc) with eos_ids as a tuple reads it back)."""
    return {f.name: list(v) if isinstance(v := getattr(c, f.name), tuple) else v for f in dataclasses.fields(c)}


def emit_tree(program: Program, tokenizer: Tokenizer, board: Board, options: Mapping[str, object],
              unroll_layers: bool = False, roll: ContextRoll | None = None,
              prefix: str = DEFAULT_PREFIX, draft: DraftPart | None = None) -> EmittedTree:
    """unroll_layers: print every layer's calls even where the layers could share one loop (layer_table.py).
    roll: the rolling context (context.py; None: generation stops at max_seq).  prefix: the model's C
    symbols' (c_names.prefixed): tllm_model.h renames every external one for all the files that include
    it, so the templates keep the default names; a prefixed tree is a library to link beside another
    model, its console firmware is not built (the runtime's engine calls the default names).  draft: the
    draft model of `--speculate draft:MODEL` (draft_tree.py), built beside this one and handed to the engine
    by the console."""
    c, plan = program.config, program.plan
    env = _env(prefix)
    renames = [(s, prefixed(s, prefix)) for s in MODEL_SYMBOLS] if prefix != DEFAULT_PREFIX else []
    ctx = dict(_context(program, tokenizer, board, options, unroll_layers), context_roll=roll,
               symbol_renames=renames, weights_blob=prefixed("tllm_weights_blob", prefix),
               console_firmware=prefix == DEFAULT_PREFIX)
    report = report_doc(program, board)
    if roll is not None:  # only when rolling: reports of builds that stop stay as they were
        report["context"] = {"policy": roll.policy, "sinks": roll.sinks, "discard": roll.discard}
    if draft is not None:  # only with a draft model: other reports stay as they were
        report["draft"] = draft.record
        report["speculate"] = draft.speculate_doc(report["speculate"])
    weights = program.blob.data if draft is None or not ctx["weights_external"] else draft.weights_bin(program.blob.data)

    def render(name: str, **extra) -> bytes:
        return env.get_template(name).render(**ctx, **extra).encode()

    files: dict[str, bytes] = {
        "src/tllm_model.h": render("tllm_model.h.j2"),
        "src/tllm_model.c": render("tllm_model.c.j2"),
        "src/tllm_vocab.c": render("tllm_vocab.c.j2"),
        "weights.bin": weights,
        "memory_report.txt": plan_text(plan).encode(),
        **report_files(report),
    }
    if not ctx["weights_external"]:
        files["src/tllm_weights.S"] = render("tllm_weights.S.j2")
    files.update(_copied_files(board))
    if draft is not None:
        files.update(draft.tree_files(ctx["weights_external"]))
        names = {s: prefixed(s, DRAFT_PREFIX) for s in ("tllm_model", "tllm_model_step", "tllm_model_greedy_token",
                                                           "tllm_model_tokens", "tllm_weights_check",
                                                           "tllm_model_canary_arm", "tllm_model_canary_ok",
                                                           "tllm_model_topk", "tllm_model_sample_idx",
                                                           "tllm_model_guess_values", "tllm_model_guess_ids")}
        guess_sets = any(b.name == GUESS_VALUES for b in draft.plan.buffers)
        files[DRAFT_TABLE] = render("tllm_draft_table.c.j2", draft_names=names, draft_guess_sets=guess_sets,
                                    id_tables=draft.id_tables)
    files["board/board_config.h"] = render("board_config.h.j2")
    # OUT/renode/ for STM32H750 boards: the chip's memories whole (a draft's target plans a board less the
    # draft's arenas, and Renode's memories must be the chip's, in whole pages)
    chip = dataclasses.replace(board, memory=draft.board.memory) if draft is not None else board
    files.update(family_files(chip, ctx["request_capacity"]))
    if board.linker_script:
        lds = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True).from_string(
            board.file(board.linker_script).read_text())
        extra = (draft.arenas, draft.budget_bytes) if draft is not None else ((), None)
        files["board/linker.ld"] = lds.render(**linker_variables(plan, board, len(weights), *extra)).encode()
    # The console firmware: board code and the console protocol around the model library.
    firmware_sources = (sorted(k for k in files if k.startswith("board/") and k.endswith(".c"))
                        + [f"runtime/{name}" for name in CONSOLE_SOURCES])
    files["CMakeLists.txt"] = render(
        "CMakeLists.txt.j2", firmware_sources=firmware_sources,
        has_linker_script="board/linker.ld" in files, uses_cmsis_layers=bool(ctx["fc_layers"]), is_arm=board.is_arm,
        draft_target=draft is not None)
    kind, tok_name, tok_files = _tokenizer_files(tokenizer)
    files.update(tok_files)
    manifest = {
        "tokenizer": {"file": tok_name, "kind": kind, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id,
                      "vocab_size": c.vocab_size},
        "eos_ids": list(c.eos_ids),
        "max_seq": program.max_seq,
        "prefill_batch": program.prefill_batch,
        "generator": f"tinyllm-gen {__version__}",
        "abi_version": ABI_VERSION,
        "board": board.name,
        "options": {k: options[k] for k in sorted(options)},
        "model_sha256": program.blob.sha256,
        # what `run --check` rebuilds the reference from (lower/blob.read_blob): the architecture and the blob's table
        "config": config_doc(c),
        "blob_entries": [[e.name, e.kind, e.offset, e.nbytes] for e in program.blob.entries],
        "files": {path: hashlib.sha256(files[path]).hexdigest() for path in sorted(files)},
    }
    if draft is not None:  # only with a draft model: other manifests stay as they were
        manifest["draft"] = draft.record
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return EmittedTree(files=dict(sorted(files.items())))
