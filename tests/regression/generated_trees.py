"""A fixed set of builds whose generated trees are recorded file by file
(sha256), so a change that should not alter the output (a refactor) is
proven not to, and one that should says which files it changed.

How the record was produced: `python tests/regression/generated_trees.py
--update` compiles every CASE below with the tree's own code and writes
generated_trees.json beside this file.  The models are the bundled
story-260k (committed) and two random models from torch 2.13.0 (pinned)
with the bundled tokenizer, so no record depends on a tokenizer trainer's
version: a tied llama (FFN 128, whole GGUF blocks), written as GGUF files
with llama.cpp's own `gguf` package (numpy quantizers, deterministic), and
a qwen2 with biases and an untied classifier.

Which files count: everything compile writes.  The runtime and board files
are copies of firmware/ and boards/, so a firmware change shows up here too
(update the record in the same commit and say why)."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RECORD = HERE / "generated_trees.json"
BUNDLED = ROOT / "models" / "story-260k"
sys.path.insert(0, str(HERE.parent))


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # "bundled" | "gguf-Q4_0" | "gguf-Q4_1" | "gguf-Q8_0" | "gguf-mixed" | "qwen2"
    options: dict = field(default_factory=dict)


CASES = (
    Case("qemu-default", "bundled"),
    Case("host-default", "bundled", {"board": "host"}),
    Case("weact-default", "bundled", {"board": "weact-h750"}),
    Case("dk-stream-all", "bundled", {"board": "stm32h750b-dk", "stream": "all"}),
    Case("weact-stream-auto-seq-auto", "bundled", {"board": "weact-h750", "stream": "auto", "max_seq": "auto"}),
    Case("dk-stream-all-greedy-p1", "bundled", {"board": "stm32h750b-dk", "stream": "all", "sampler": "greedy",
                                                "prefill_batch": 1}),
    Case("qemu-kv4-greedy", "bundled", {"kv_bits": 4, "sampler": "greedy"}),
    Case("qemu-topk-p2", "bundled", {"sampler": "topk:8", "prefill_batch": 2}),
    Case("qemu-per-channel", "bundled", {"quant": "per-channel"}),
    Case("qemu-portable-unrolled", "bundled", {"kernels": "portable", "unroll_layers": True}),
    Case("host-g64-seq96", "bundled", {"board": "host", "group_size": 64, "max_seq": 96}),
    Case("dk-stream-all-topk-kv4", "bundled", {"board": "stm32h750b-dk", "stream": "all", "sampler": "topk:4",
                                               "kv_bits": 4, "stream_chunk": 2048}),
    Case("qemu-gguf-q4_0", "gguf-Q4_0"),
    Case("qemu-gguf-q4_1-greedy", "gguf-Q4_1", {"sampler": "greedy"}),
    Case("host-gguf-q8_0", "gguf-Q8_0", {"board": "host"}),
    Case("dk-gguf-mixed-topk", "gguf-mixed", {"board": "stm32h750b-dk", "sampler": "topk:8", "kv_bits": 4}),
    Case("qemu-qwen2", "qwen2"),
    Case("dk-qwen2-stream-all", "qwen2", {"board": "stm32h750b-dk", "stream": "all"}),
    Case("host-qwen2-unrolled-kv4", "qwen2", {"board": "host", "unroll_layers": True, "kv_bits": 4}),
    Case("qemu-roll-seq32", "bundled", {"context_policy": "roll", "max_seq": 32}),
    Case("dk-stream-all-kv4-roll2", "bundled", {"board": "stm32h750b-dk", "stream": "all", "kv_bits": 4,
                                                "context_policy": "roll:2", "max_seq": 32}),
    Case("qemu-kv8v4-roll2-seq32", "bundled", {"kv_bits": "8:4", "context_policy": "roll:2", "max_seq": 32}),
)


def model_path(kind: str, work: Path) -> Path:
    """The model file or directory for a case's `model` (built under work once)."""
    if kind == "bundled":
        return BUNDLED
    if kind.startswith("gguf-"):
        from gguf_models import hf_to_gguf

        qtype = kind.removeprefix("gguf-")
        out = work / f"llama-{qtype}.gguf"
        if not out.exists():
            src = model_path("llama", work)
            if qtype == "mixed":  # SmolLM2's mix: Q8_0 tied embedding, Q4_1 matrices
                hf_to_gguf(src, out, "Q4_1", embd_qtype="Q8_0")
            else:
                hf_to_gguf(src, out, qtype)
        return out
    if kind in ("qwen2", "llama"):  # random weights from torch (pinned), the bundled tokenizer
        from tinymodels import make_hf_model

        out = work / kind
        if not out.exists():
            make_hf_model(out, kind, dim=64, hidden=128 if kind == "llama" else 96, layers=3, heads=4, kv_heads=2,
                          vocab=512, context=128, tied=kind == "llama", seed=11)
            shutil.copy(BUNDLED / "tokenizer.json", out / "tokenizer.json")
        return out
    raise ValueError(kind)


def tree_hashes(case: Case, work: Path) -> dict[str, str]:
    from tinyllm_gen.compile import CompileOptions, compile_path

    opts = CompileOptions(**case.options)
    tree = compile_path(model_path(case.model, work), opts).tree
    return {path: hashlib.sha256(data).hexdigest() for path, data in sorted(tree.files.items())}


def record(work: Path) -> dict:
    return {c.name: tree_hashes(c, work) for c in CASES}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/regression/generated_trees.py --update")
    with tempfile.TemporaryDirectory() as d:
        doc = record(Path(d))
    RECORD.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {RECORD}: {len(doc)} builds, {sum(len(v) for v in doc.values())} files")
