"""The draft model inside a speculative tree (`compile TARGET --speculate
draft:DRAFT[:k]`, compile_draft.py): where its files go and what the
target's tree says about it.

The draft is a second generated model under the symbol prefix tllm_draft_
(kernels/c_names.py), in OUT/draft/: its src/ (tllm_model.c/h, tllm_vocab.c,
tllm_weights.S where the board links the weights in), its manifest and
memory report.  The runtime, board code, CMake functions and tokenizer are
the target's (the draft's ids are the target's, or a compress --prune-vocab
student's mapped onto them by the id tables in draft/tllm_draft_table.c).  Its arenas get their own output
sections (.tllm_draft_arena.<region>) so that the linker script checks
each model's arena against its own plan and both against the one RAM
budget.  On a board whose weights are external (flashed at an address),
OUT/weights.bin is the target's blob, zeros up to WEIGHTS_ALIGN, then the
draft's: one file to flash, and the draft's C reads its weights at that
offset; where the weights are linked in, draft/weights.bin is its own."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ..board import Board
from ..plan.memory import MemoryPlan
from ..timing import draft_prediction_text
from .link_layout import LinkArena, link_arenas

DRAFT_DIR = "draft"
DRAFT_PREFIX = "tllm_draft_"
DRAFT_TABLE = f"{DRAFT_DIR}/tllm_draft_table.c"  # the tllm_draft_model the console hands the engine
DRAFT_ARENA_SECTION = ".tllm_draft_arena"
DRAFT_ARENA_STEM = "__tllm_draft_arena"
# The draft's blob starts on a 4 KiB boundary of the weights storage: a QSPI NOR sector (and so a D-cache
# line and the stream's 32-byte alignment), whatever the target's blob length.
WEIGHTS_ALIGN = 4096
# What OUT/draft/ keeps of the draft's own tree (beside src/): the rest is the target's.
KEPT = ("manifest.json", "memory_report.txt")
ID_BYTES = 2  # an id table entry: uint16_t, as the engine's token buffer


@dataclass(frozen=True)
class IdTables:
    """A vocabulary-pruned draft's id tables (frontends/vocab_map.VocabMap, not shared), const in the draft
    table's C: in code flash on a Cortex-M board, counted with the draft's code."""

    to_draft: tuple[int, ...]  # target id -> the draft id it is read as (a lacked token: its first character's)
    to_target: tuple[int, ...]  # draft id -> target id

    @property
    def bytes(self) -> int:
        return ID_BYTES * (len(self.to_draft) + len(self.to_target))

    @classmethod
    def of(cls, vmap) -> "IdTables | None":
        """The tables of a VocabMap; None when the vocabulary is shared (the engine's NULL tables)."""
        if vmap is None or vmap.shared:
            return None
        return cls(tuple(int(i) for i in vmap.to_draft), tuple(int(i) for i in vmap.to_target))


def draft_board(board: Board, weights_offset: int) -> Board:
    """The board as the draft's C is emitted for it: its arenas in their own sections, its weights
    `weights_offset` bytes into the board's weights storage (external boards)."""
    weights = board.weights
    if weights.address is not None:
        weights = dataclasses.replace(weights, address=weights.address + weights_offset)
    return dataclasses.replace(board, weights=weights,
                               arena_section=DRAFT_ARENA_SECTION if board.arena_section else board.arena_section)


def weights_offset(target_blob_bytes: int, board: Board) -> int:
    """Where the draft's blob starts in OUT/weights.bin: after the target's (external boards), or 0."""
    if board.weights.storage != "external":
        return 0
    return -(-target_blob_bytes // WEIGHTS_ALIGN) * WEIGHTS_ALIGN


@dataclass(frozen=True)
class DraftPart:
    """The draft model a target's tree holds (emit_tree's `draft`)."""

    files: dict  # its tree's files (path -> bytes), as emit_tree made them under DRAFT_PREFIX
    plan: MemoryPlan
    board: Board  # draft_board(): what its C was emitted for
    blob: bytes
    weights_offset: int  # in OUT/weights.bin (external boards); 0 where the weights are linked in
    budget_bytes: int  # the RAM budget target and draft share
    record: dict  # what OUT's manifest and report say of it (compile_draft.draft_record)
    id_tables: IdTables | None = None  # a vocabulary-pruned draft's; None: the target's vocabulary

    @property
    def arenas(self) -> tuple[LinkArena, ...]:
        return link_arenas(self.plan, self.board, DRAFT_ARENA_STEM)

    def tree_files(self, external_weights: bool) -> dict[str, bytes]:
        """OUT/draft/...: its sources, its weights where they are linked in, its manifest (listing
        exactly these files) and memory report."""
        keep = {k: v for k, v in self.files.items() if k.startswith("src/") or k in KEPT}
        if not external_weights:
            keep["weights.bin"] = self.files["weights.bin"]
        manifest = json.loads(keep["manifest.json"])
        manifest["files"] = {k: v for k, v in manifest["files"].items() if k in keep}
        keep["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        return {f"{DRAFT_DIR}/{k}": keep[k] for k in sorted(keep)}

    def speculate_doc(self, doc: dict) -> dict:
        """report.json's "speculate" of the target's verification pass, saying who drafts; its prediction is
        the draft model's (the record's, timing.draft_prediction), not the prompt-lookup draft's."""
        d = self.record
        choice = d["choice"].replace(f"draft:{d['k']}", f"draft:{d['source']}:{d['k']}", 1)  # "draft:k (asked)" or why
        return dict(doc, draft="model", choice=choice, predicted=d["predicted"],
                    why=f"Speculative decoding with the draft model {d['source']} ({d['dir']}/): {d['k']} steps "
                        f"of it per pass (each guess drawn by the request's sampler), verified with the last "
                        f"accepted token as {d['k'] + 1} positions "
                        "through every weight together (tllm_model_verify).")

    def weights_bin(self, target_blob: bytes) -> bytes:
        """OUT/weights.bin on an external-weights board: the target's blob, padding, the draft's."""
        return target_blob + bytes(self.weights_offset - len(target_blob)) + self.blob


def draft_text(d: dict, target_ram: int | None = None) -> str:
    """One line of what the draft costs (d: the manifest's and report's "draft"), for compile, plan and
    report; target_ram: the target's RAM, to say what the two take of the shared budget."""
    ram = f"RAM {d['ram_bytes']:,} B (its KV cache {d['kv_cache_bytes']:,} B at {d['max_seq']} tokens)"
    if target_ram is not None:
        ram += f", with the target's {target_ram + d['ram_bytes']:,} B of the {d['budget_bytes']:,} B budget"
    where = f" at +{d['weights_offset']:,} B in weights.bin" if d["weights_offset"] else f" in {d['dir']}/weights.bin"
    code = f", code flash about {d['code_flash_bytes']:,} B" if d.get("code_flash_bytes") is not None else ""
    if d.get("id_table_bytes"):
        code += f", id tables {d['id_table_bytes']:,} B (a vocabulary-pruned draft)"
    text = (f"draft model {d['source']} ({d['dir']}/, {d['k']} guesses per pass): {ram}, weights "
            f"{d['weights_bytes']:,} B{where}{code}\n")
    if "context" in d:
        text += f"  {d['context']}\n"
    if "predicted" in d:
        text += draft_prediction_text(d["predicted"])
    return text
