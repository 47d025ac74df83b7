"""`compress`: teacher -> prune -> distill -> calibrated-quantization report.

OUT receives the distilled student as a Hugging Face folder (config.json,
model.safetensors, tokenizer.json) that `compile` accepts, plus
compress.json (the before/after table).  Work files (the distillation
checkpoint) live beside it in OUT.work/, so an interrupted run resumes when
the same command is given again; pruning is deterministic and simply redone.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UserError
from .distill import DistillOptions, distill
from .eval import QuantConfig, evaluate, read_documents
from .prune import prune
from .prune_hidden import prune_hidden
from .torch_io import encode_docs, load_torch_model, n_params, perplexity, require_torch, save_model_dir

CALIBRATION_DOCS = 32
HELD_OUT_FRACTION = 0.1


@dataclass(frozen=True)
class CompressOptions:
    prune_heads: float
    prune_ffn: float
    distill: DistillOptions
    prune_hidden: float = 0.0  # fraction of the residual width removed (prune_hidden.py)
    quant_eval_tokens: int = 4000  # 0 = the whole held-out text; the numpy exact reference is the slow part


def work_dir_for(out: Path) -> Path:
    return Path(out).parent / (Path(out).name + ".work")


def train_flops(teacher_params: int, student_params: int, tokens: int) -> float:
    """Distillation compute: teacher forward (2N) + student forward/backward (6N) per token."""
    return (2.0 * teacher_params + 6.0 * student_params) * tokens


def compress(teacher_dir: Path, out: Path, data: Path, opts: CompressOptions, eval_data: Path | None = None,
             progress: bool = True) -> dict:
    for what, f in (("heads", opts.prune_heads), ("ffn", opts.prune_ffn), ("hidden", opts.prune_hidden)):
        if not 0.0 <= f < 1.0:  # before any loading: a typo should cost nothing
            raise UserError(f"--prune-{what} {f} must be in [0, 1): the fraction to remove")
    require_torch()
    from ..frontends import load_model

    teacher_dir, out = Path(teacher_dir), Path(out)
    if not teacher_dir.is_dir():
        raise UserError(f"{teacher_dir}: compress takes a Hugging Face model directory (config.json, "
                        "*.safetensors, tokenizer.json), not a file")
    if not any(teacher_dir.glob("*.safetensors")) and any(teacher_dir.glob("*.onnx")):
        raise UserError(f"{teacher_dir}: an ONNX export; compression trains with torch and needs the Hugging Face "
                        "safetensors directory (save_pretrained) the model came from")
    imported = load_model(teacher_dir)  # also proves the teacher itself compiles
    tok = imported.tokenizer
    if tok is None or not (teacher_dir / "tokenizer.json").is_file():
        raise UserError(f"{teacher_dir}: compress needs tokenizer.json beside the model")
    pad = tok.eos_id if tok.eos_id is not None else 0
    teacher = load_torch_model(teacher_dir)
    ctx = teacher.config.max_position_embeddings
    docs = read_documents(data)
    if eval_data is not None:
        held_docs, train_docs = read_documents(eval_data), docs
    else:
        n_held = max(1, int(len(docs) * HELD_OUT_FRACTION))
        if len(docs) - n_held < opts.distill.batch_size:
            raise UserError(f"{data}: {len(docs)} documents are too few to hold out {n_held} and train on the rest")
        held_docs, train_docs = docs[-n_held:], docs[:-n_held]
    train, held = encode_docs(tok, train_docs, ctx), encode_docs(tok, held_docs, ctx)
    calib = train[:CALIBRATION_DOCS]

    rows = {"teacher": _row(teacher, held, pad)}
    student = copy.deepcopy(teacher)
    report = prune(student, calib, pad, opts.prune_heads, opts.prune_ffn)
    hidden = prune_hidden(student, calib, pad, opts.prune_hidden) if opts.prune_hidden > 0 else None
    work = work_dir_for(out)
    student = load_torch_model(save_model_dir(student, teacher_dir / "tokenizer.json", work / "pruned"))
    rows["pruned"] = _row(student, held, pad)
    res = distill(student, teacher, train, pad, opts.distill, work, progress=progress)
    rows["distilled"] = _row(student, held, pad)
    save_model_dir(student, teacher_dir / "tokenizer.json", out)
    flops = train_flops(rows["teacher"]["params"], rows["distilled"]["params"], res.tokens)
    flops_total = train_flops(rows["teacher"]["params"], rows["distilled"]["params"], res.total_tokens)

    m = load_model(out)
    held_ids = [s for s in held]
    held_ids = _cap(held_ids, opts.quant_eval_tokens)
    from .eval import make_quantizer_from_docs

    configs = [QuantConfig("rtn", 32, 8), QuantConfig("awq", 32, 8)]
    q = evaluate(m, held_ids, configs, make_quantizer_from_docs(m, calib))
    result = {
        "teacher": str(teacher_dir), "out": str(out), "options": asdict(opts), "rows": rows,
        "pruning": {"kept_kv_groups": report.kept_groups, "kv_group_loss_increase": report.group_importance,
                    "heads": list(report.heads), "ffn": report.ffn,
                    "hidden": hidden.hidden_after if hidden else rows["teacher"]["hidden"],
                    "kept_hidden_channels": hidden.kept if hidden else None},
        "distill": {"steps": res.steps, "resumed_from": res.resumed_from, "tokens_this_run": res.tokens,
                    "seconds_this_run": res.seconds, "flops_this_run": flops,
                    "tokens": res.total_tokens, "flops": flops_total},
        "quantized": q,
    }
    (out / "compress.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _cap(seqs, max_tokens):
    if max_tokens <= 0:
        return list(seqs)
    out, total = [], 0
    for s in seqs:
        if out and total + len(s) - 1 > max_tokens:
            break
        out.append(s)
        total += len(s) - 1
    return out


def _row(model, held, pad) -> dict:
    c = model.config
    return {"params": n_params(model), "hidden": c.hidden_size, "heads": c.num_attention_heads,
            "kv_heads": c.num_key_value_heads, "ffn": c.intermediate_size, "ppl": perplexity(model, held, pad)}


def format_report(r: dict) -> str:
    lines = [f"{'model':<26} {'params':>9} {'hidden':>6} {'heads/kv':>9} {'ffn':>5} {'held-out ppl':>13}"]
    for name, row in r["rows"].items():
        lines.append(f"{name + ' (fp32, torch)':<26} {row['params']:>9,} {row['hidden']:>6} "
                     f"{row['heads']:>4}/{row['kv_heads']:<4} {row['ffn']:>5} {row['ppl']:>13.4f}")
    q = r["quantized"]
    lines.append(f"{'distilled fp32 (numpy)':<26} {'':>9} {'':>6} {'':>9} {'':>5} {q['fp32']['ppl']:>13.4f}")
    for name, c in q["configs"].items():
        lines.append(f"{'distilled ' + name:<26} {'':>9} {'':>6} {'':>9} {'':>5} {c['ppl']:>13.4f}  "
                     f"({c['ppl_delta_pct']:+.2f}%, top-1 {100 * c['top1_agreement']:.1f}%)")
    d = r["distill"]
    lines.append(f"distillation: {d['steps']} steps ({d['resumed_from']} resumed), {d['tokens_this_run']:,} tokens "
                 f"and {d['flops_this_run']:.3g} FLOPs this run, {d['seconds_this_run'] / 60:.1f} min; "
                 f"quantized rows on {q['tokens']:,} held-out tokens")
    return "\n".join(lines)
