"""Program -> firmware source tree.

`emit_tree` returns every output file as path -> bytes (nothing is written
here); compile.py writes the tree atomically.  Output is a pure function of
its inputs: no timestamps, sorted iteration, and a manifest of hashes."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import jinja2

from .. import __version__
from ..frontends.tokenizer import Tokenizer
from ..lower import FcS4PerChannel, Program, Q4Ref
from ..plan.lifetimes import GEN_STATE_BYTES
from ..plan.memory import CANARY_BYTES
from ..plan.human import report_files
from ..plan.report import plan_json, plan_text
from ..quant.kv import kv_layout
from .filters import FILTERS
from .names import arena_macro, arena_symbol, canary_macro, check_unique, offset_macro, region_macro
from ..resources import boards_dir, firmware_dir, templates_dir
from .regions import arena_regions, board_file, linker_variables


def renode_files_for(board: dict, request_capacity: int) -> dict[str, bytes]:
    from ..run_renode import renode_files, supports

    return renode_files(board, request_capacity) if supports(board) else {}

ABI_VERSION = 2
RUNTIME_SOURCES = ("tllm_kernels.c", "tllm_kernels_m7.c", "tllm_cmsis.c", "tllm_sampler.c", "tllm_main.c", "tllm_weights.c", "tllm_frame.c")
RUNTIME_HEADERS = ("tllm_board.h", "tllm_math.h", "tllm_kernels.h", "tllm_kernels_m7.h", "tllm_cmsis.h", "tllm_model_api.h", "tllm_request.h", "tllm_sampler.h", "tllm_frame.h")
VOCAB_CHUNK = 64  # tokens per string literal line in tllm_vocab.c


@dataclass(frozen=True)
class EmittedTree:
    files: Mapping[str, bytes]  # relative path -> contents

    def manifest_entry(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest()


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    env.filters["offset_macro"] = offset_macro
    env.filters.update(arena_symbol=arena_symbol, arena_macro=arena_macro, canary_macro=canary_macro,
                       region_macro=region_macro)
    return env


def _matrices_of(args) -> list[Q4Ref]:
    """Q4 matrices a call reads through a tllm_q4(x4)_matrix descriptor
    (per-channel layers carry their own descriptor, see c_fc)."""
    if isinstance(args, FcS4PerChannel):
        return []
    for attr in ("matrix", "table"):
        if hasattr(args, attr):
            return [getattr(args, attr)]
    return []


def _calls_with_layer_marks(program: Program) -> list[dict]:
    out, prev = [], None
    for call in program.calls:
        out.append({"call": call, "layer": call.layer, "layer_start": call.layer is not None and call.layer != prev})
        prev = call.layer if call.layer is not None else prev
    return out


def _vocab(tokenizer: Tokenizer, vocab_size: int) -> tuple[list[bytes], list[list[int]]]:
    pieces = [tokenizer.token_bytes(i) if i < tokenizer.vocab_size else b"" for i in range(vocab_size)]
    offsets = [0]
    for p in pieces:
        offsets.append(offsets[-1] + len(p))
    chunks = [b"".join(pieces[i:i + VOCAB_CHUNK]) for i in range(0, len(pieces), VOCAB_CHUNK)]
    chunks = [c for c in chunks if c] or [b""]
    rows = [offsets[i:i + 16] for i in range(0, len(offsets), 16)]
    return chunks, rows


def emit_tree(program: Program, tokenizer: Tokenizer, board: dict, options: Mapping[str, object]) -> EmittedTree:
    c = program.config
    plan = program.plan
    env = _env()
    buffers = program.buffers()
    check_unique([b.name for b in buffers], "buffer")
    matrices = sorted({m for call in program.calls for m in _matrices_of(call.args)}, key=lambda m: m.name)
    fc_layers = sorted({call.args.layer for call in program.calls if isinstance(call.args, FcS4PerChannel)},
                       key=lambda f: f.name)
    assert all(isinstance(m, Q4Ref) for m in matrices)
    check_unique([m.name for m in matrices], "matrix")
    vectors = sorted({e.name: e for e in program.blob.entries if e.kind == "f32"}.values(), key=lambda e: e.name)
    vector_refs = [{"name": e.name, "offset": e.offset, "count": e.nbytes // 4} for e in vectors]
    external = board["weights"]["storage"] == "external"
    eos_ids = list(c.eos_ids)[:4] or [-1]
    option_text = " ".join(f"{k}={options[k]}" for k in sorted(options))
    vocab_chunks, vocab_rows = _vocab(tokenizer, c.vocab_size)
    arena_attribute = f'__attribute__((section("{board["arena_section"]}")))' if board.get("arena_section") else ""

    ctx = {
        "version": __version__, "abi_version": ABI_VERSION, "model_sha256": program.blob.sha256,
        "arch": c.arch, "n_params": f"{c.n_params():,}", "options": option_text,
        "c": c, "max_seq": program.max_seq, "group_size": program.group_size, "kv_bits": program.kv_bits,
        "plan": plan, "buffers": buffers, "canary_offset": plan.arena_bytes - CANARY_BYTES,
        "gen_state_bytes": GEN_STATE_BYTES, "blob_bytes": len(program.blob.data), "blob_checksum": program.blob.checksum,
        "weights_external": external, "weights_address": board["weights"].get("address", ""),
        "matrices": matrices, "vectors": vector_refs, "fc_layers": fc_layers,
        "request_capacity": plan.buffer("request").request.count,
        "q4_layout_note": ("q4x4 tiles for the Cortex-M7 SMLAD kernels" if program.kernels == "cortex-m7"
                           else "packed nibbles and float32 scales"), "attention_scale": program.attention_scale,
        "kv_layers": [{"k": f"l{i}.k_cache", "v": f"l{i}.v_cache", "k_scale": f"l{i}.k_scale", "v_scale": f"l{i}.v_scale"}
                      for i in range(c.n_layers)],
        "eos_ids": [str(e) for e in eos_ids] if c.eos_ids else [], "calls": _calls_with_layer_marks(program),
        "rope_cos": program.rope_cos.name, "rope_sin": program.rope_sin.name, "logits": program.logits.name,
        "vocab_chunks": vocab_chunks, "vocab_offset_rows": vocab_rows, "weights_file": "../weights.bin",
        "gnu_stack_note": board["toolchain"] == "host", "arena_attribute": arena_attribute,
        "arena_regions": arena_regions(plan, board), "kv4": program.kv_bits == 4,
        "kv4_group": kv_layout(c, 4).group if program.kv_bits == 4 else 0, "greedy": program.greedy,
    }
    if not c.eos_ids:
        ctx["eos_ids"] = []

    def render(name: str, **extra) -> bytes:
        return env.get_template(name).render(**ctx, **extra).encode()

    files: dict[str, bytes] = {
        "src/tllm_model.h": render("tllm_model.h.j2"),
        "src/tllm_model.c": render("tllm_model.c.j2"),
        "src/tllm_vocab.c": render("tllm_vocab.c.j2"),
        "weights.bin": program.blob.data,
        "plan.json": (json.dumps(plan_json(plan, program), indent=2, sort_keys=True) + "\n").encode(),
        "memory_report.txt": plan_text(plan).encode(),
        **report_files(plan_json(plan, program)),
    }
    if not external:
        files["src/tllm_weights.S"] = render("tllm_weights.S.j2")
    for name in RUNTIME_SOURCES + RUNTIME_HEADERS:
        files[f"runtime/{name}"] = (firmware_dir() / name).read_bytes()
    files["cmake/arm-none-eabi.cmake"] = (firmware_dir() / "cmake" / "arm-none-eabi.cmake").read_bytes()
    board_dir = boards_dir() / board["name"]
    for name in board["sources"]:
        files[f"board/{name}"] = board_file(board, name).read_bytes()
    files["board/board.json"] = (board_dir / "board.json").read_bytes()
    files.update(renode_files_for(board, ctx["request_capacity"]))  # OUT/renode/ for STM32H750 boards
    if board.get("linker_script"):
        lds = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True).from_string(
            board_file(board, board["linker_script"]).read_text())
        files["board/linker.ld"] = lds.render(**linker_variables(plan, board, len(program.blob.data))).encode()
    files["CMakeLists.txt"] = render(
        "CMakeLists.txt.j2", board=board, sources=sorted(k for k in files if k.endswith((".c", ".S"))),
        has_linker_script="board/linker.ld" in files, uses_cmsis_layers=bool(fc_layers), is_arm=board["toolchain"] == "arm-none-eabi")
    kind, _, tok_path = tokenizer.source.partition(":")
    tok_name = {"hf": "tokenizer/tokenizer.json", "llama2c": "tokenizer/tokenizer.bin"}[kind]
    files[tok_name] = Path(tok_path).read_bytes()
    tok_config = Path(tok_path).parent / "tokenizer_config.json"
    if kind == "hf" and tok_config.is_file():  # its chat_template is what `serve` and `chat` render with
        files["tokenizer/tokenizer_config.json"] = tok_config.read_bytes()
    manifest = {
        "tokenizer": {"file": tok_name, "kind": kind, "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id,
                      "vocab_size": c.vocab_size},
        "eos_ids": list(c.eos_ids),
        "max_seq": program.max_seq,
        "generator": f"tinyllm-gen {__version__}",
        "abi_version": ABI_VERSION,
        "board": board["name"],
        "options": {k: options[k] for k in sorted(options)},
        "model_sha256": program.blob.sha256,
        "files": {path: hashlib.sha256(files[path]).hexdigest() for path in sorted(files)},
    }
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return EmittedTree(files=dict(sorted(files.items())))
