"""`compress`: teacher -> prune vocabulary -> prune depth, heads, FFN, width
-> (cache the teacher's logits) -> distill -> calibrated-quantization report.

With --prune-vocab the vocabulary-pruned teacher (the original one's logits
on the kept ids, checked bit for bit on calibration documents) is the
teacher of every later step, and the student shares its tokenizer.

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

from tokenizers import Tokenizer as HFTokenizer

from ..errors import UserError
from .distill import DistillOptions, distill
from .eval import QuantConfig, evaluate, make_quantizer_from_docs, read_documents
from .prune import prune
from .prune_depth import prune_depth
from .prune_hidden import prune_hidden
from .prune_vocab import (check_kept_logits, count_tokens, plan_vocab, pruned_tokenizer_config,
                          pruned_tokenizer_spec, slice_vocab)
from .teacher_cache import build_teacher_cache, check_top_k
from .torch_io import encode_docs, load_torch_model, n_params, perplexity, require_torch, save_model_dir
from ..frontends import load_model
from ..frontends.tokenizer import Tokenizer

CALIBRATION_DOCS = 32
HELD_OUT_FRACTION = 0.1
VOCAB_CHECK_DOCS = 8  # documents scored by both teachers to prove the vocabulary pruning exact


@dataclass(frozen=True)
class CompressOptions:
    prune_heads: float
    prune_ffn: float
    distill: DistillOptions
    prune_hidden: float = 0.0  # fraction of the residual width removed (prune_hidden.py)
    quant_eval_tokens: int = 4000  # 0 = the whole held-out text; the numpy exact reference is the slow part
    prune_vocab: int = 0  # vocabulary size kept (prune_vocab.py); 0 = unchanged
    prune_vocab_data: str | None = None  # text the kept tokens are counted on (None: the distillation text)
    prune_layers: float = 0.0  # fraction of the blocks removed (prune_depth.py)
    teacher_top_k: int = 0  # > 0: distil from cached top-k teacher logits (teacher_cache.py); 0: live teacher
    calibration_docs: int = CALIBRATION_DOCS  # documents every importance forward runs on (one per block/group)


def work_dir_for(out: Path) -> Path:
    return Path(out).parent / (Path(out).name + ".work")


def train_flops(teacher_params: int, student_params: int, tokens: int) -> float:
    """Distillation compute: teacher forward (2N) + student forward/backward (6N) per token."""
    return (2.0 * teacher_params + 6.0 * student_params) * tokens


def cached_train_flops(student_params: int, tokens: int) -> float:
    """Distillation from a teacher cache: the student's forward/backward only
    (the teacher's pass is counted once, in the cache's row)."""
    return 6.0 * student_params * tokens


def compress(teacher_dir: Path, out: Path, data: Path, opts: CompressOptions, eval_data: Path | None = None,
             progress: bool = True) -> dict:
    for what, f in (("heads", opts.prune_heads), ("ffn", opts.prune_ffn), ("hidden", opts.prune_hidden),
                    ("layers", opts.prune_layers)):
        if not 0.0 <= f < 1.0:  # before any loading: a typo should cost nothing
            raise UserError(f"--prune-{what} {f} must be in [0, 1): the fraction to remove")
    if opts.prune_vocab < 0 or opts.teacher_top_k < 0:
        raise UserError("--prune-vocab and --teacher-top-k must be >= 0 (0 = off)")
    if opts.calibration_docs < 1:
        raise UserError(f"--calibration-docs {opts.calibration_docs} must be >= 1")
    require_torch()

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
    tok_json, tok_cfg = teacher_dir / "tokenizer.json", teacher_dir / "tokenizer_config.json"
    work = work_dir_for(out)

    rows = {"teacher": _row(teacher, held, pad)}
    vocab = None
    if opts.prune_vocab:
        counted = train if opts.prune_vocab_data is None else encode_docs(
            tok, read_documents(Path(opts.prune_vocab_data)), ctx)
        plan = plan_vocab(json.loads(tok_json.read_text(encoding="utf-8")), count_tokens(counted), opts.prune_vocab)
        tok_json, tok_cfg = _write_pruned_tokenizer(tok_json, tok_cfg, plan, work / "vocab")
        tok = _load_tokenizer(tok_json, teacher, plan)
        old_check = train[:VOCAB_CHECK_DOCS]
        train, held = encode_docs(tok, train_docs, ctx), encode_docs(tok, held_docs, ctx)
        pruned_teacher = copy.deepcopy(teacher)
        slice_vocab(pruned_teacher, plan)
        check = check_kept_logits(teacher, pruned_teacher, old_check, train[:VOCAB_CHECK_DOCS], plan)
        teacher = pruned_teacher  # the teacher of every later step: same logits on the kept ids
        pad = tok.eos_id if tok.eos_id is not None else 0
        rows["teacher, vocab pruned"] = _row(teacher, held, pad)
        vocab = {"plan": {k: v for k, v in asdict(plan).items() if k != "kept"}, "check": asdict(check)}
    if opts.teacher_top_k:
        check_top_k(opts.teacher_top_k, teacher.config.vocab_size)  # before the pruning's forwards
    calib = train[:opts.calibration_docs]

    student = copy.deepcopy(teacher)
    depth = prune_depth(student, calib, pad, opts.prune_layers) if opts.prune_layers > 0 else None
    report = prune(student, calib, pad, opts.prune_heads, opts.prune_ffn)
    hidden = prune_hidden(student, calib, pad, opts.prune_hidden) if opts.prune_hidden > 0 else None
    student = load_torch_model(save_model_dir(student, tok_json, work / "pruned", tok_cfg))
    rows["pruned"] = _row(student, held, pad)
    cache, cache_row = None, None
    if opts.teacher_top_k:
        cache, stats = build_teacher_cache(teacher, train, pad, opts.teacher_top_k, opts.distill.temperature,
                                           work / "teacher-cache", progress=progress)
        cache_row = dict(asdict(stats), flops=2.0 * n_params(teacher) * stats.tokens)
    res = distill(student, teacher if cache is None else None, train, pad, opts.distill, work, progress=progress,
                  cache=cache)
    rows["distilled"] = _row(student, held, pad)
    save_model_dir(student, tok_json, out, tok_cfg)
    t_params = n_params(teacher)
    if cache is None:
        flops = train_flops(t_params, rows["distilled"]["params"], res.tokens)
        flops_total = train_flops(t_params, rows["distilled"]["params"], res.total_tokens)
    else:
        flops = cached_train_flops(rows["distilled"]["params"], res.tokens)
        flops_total = cached_train_flops(rows["distilled"]["params"], res.total_tokens) + cache_row["flops"]

    m = load_model(out)
    held_ids = [s for s in held]
    held_ids = _cap(held_ids, opts.quant_eval_tokens)

    configs = [QuantConfig("rtn", 32, 8), QuantConfig("awq", 32, 8)]
    q = evaluate(m, held_ids, configs, make_quantizer_from_docs(m, calib))
    result = {
        "teacher": str(teacher_dir), "out": str(out), "options": asdict(opts), "rows": rows,
        "pruning": {"kept_kv_groups": report.kept_groups, "kv_group_loss_increase": report.group_importance,
                    "heads": list(report.heads), "ffn": report.ffn,
                    "hidden": hidden.hidden_after if hidden else rows["teacher"]["hidden"],
                    "kept_hidden_channels": hidden.kept if hidden else None,
                    "layers": student.config.num_hidden_layers,
                    "kept_layers": depth.kept if depth else None,
                    "layer_loss_increase": depth.loss_increase if depth else None,
                    "vocab": vocab},
        "distill": {"steps": res.steps, "resumed_from": res.resumed_from, "tokens_this_run": res.tokens,
                    "seconds_this_run": res.seconds, "flops_this_run": flops,
                    "tokens": res.total_tokens, "flops": flops_total, "teacher_cache": cache_row},
        "quantized": q,
    }
    (out / "compress.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _write_pruned_tokenizer(tok_json: Path, tok_cfg: Path, plan, where: Path) -> tuple:
    """tokenizer.json (+ tokenizer_config.json) of the pruned vocabulary in `where`."""
    where.mkdir(parents=True, exist_ok=True)
    text = json.dumps(pruned_tokenizer_spec(json.loads(tok_json.read_text(encoding="utf-8")), plan),
                      ensure_ascii=False, indent=1) + "\n"
    HFTokenizer.from_str(text)  # refuses an inconsistent file here, not in a user's build
    (where / "tokenizer.json").write_text(text, encoding="utf-8")
    cfg = where / "tokenizer_config.json"
    cfg.unlink(missing_ok=True)
    if tok_cfg.is_file():
        cfg.write_text(pruned_tokenizer_config(tok_cfg.read_text(encoding="utf-8"), plan), encoding="utf-8")
    return where / "tokenizer.json", cfg


def _load_tokenizer(tok_json: Path, teacher, plan):
    remap = plan.old_to_new()
    eos = teacher.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    bos = teacher.config.bos_token_id
    return Tokenizer.from_hf_json(tok_json, bos_id=remap.get(bos) if bos is not None else None,
                                  eos_id=remap.get(eos) if eos is not None else None, vocab_size=len(plan.kept))


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
            "kv_heads": c.num_key_value_heads, "ffn": c.intermediate_size, "layers": c.num_hidden_layers,
            "vocab": c.vocab_size, "ppl": perplexity(model, held, pad)}


def format_report(r: dict) -> str:
    lines = [f"{'model':<34} {'params':>11} {'vocab':>6} {'layers':>6} {'hidden':>6} {'heads/kv':>9} {'ffn':>5} "
             f"{'held-out ppl':>13}"]
    for name, row in r["rows"].items():
        lines.append(f"{name + ' (fp32, torch)':<34} {row['params']:>11,} {row['vocab']:>6} {row['layers']:>6} "
                     f"{row['hidden']:>6} {row['heads']:>4}/{row['kv_heads']:<4} {row['ffn']:>5} {row['ppl']:>13.4f}")
    q = r["quantized"]
    gap = " " * (11 + 6 + 6 + 6 + 9 + 5 + 6)  # the shape columns and their separators
    lines.append(f"{'distilled fp32 (numpy)':<34} {gap}{q['fp32']['ppl']:>13.4f}")
    for name, c in q["configs"].items():
        lines.append(f"{'distilled ' + name:<34} {gap}{c['ppl']:>13.4f}  "
                     f"({c['ppl_delta_pct']:+.2f}%, top-1 {100 * c['top1_agreement']:.1f}%)")
    v = r["pruning"]["vocab"]
    if v:
        c = v["check"]
        lines.append(f"vocabulary: {v['plan']['vocab_before']:,} -> {r['rows']['pruned']['vocab']:,} tokens, "
                     f"{100 * v['plan']['coverage']:.2f}% of the counted text's tokens kept; logits on kept ids "
                     f"{'bit-identical' if c['bit_identical'] else 'max diff %.3g' % c['max_abs_diff']} on "
                     f"{c['docs_same_tokens']}/{c['docs']} documents whose tokens did not change (the rest are "
                     f"not compared); held-out ppl rows after the teacher use the pruned tokenizer")
    d = r["distill"]
    if d["teacher_cache"]:
        tc = d["teacher_cache"]
        lines.append(f"teacher cache: top-{r['options']['teacher_top_k']} over {tc['positions']:,} positions, "
                     f"{tc['bytes'] / 2**20:.1f} MiB, {tc['flops']:.3g} FLOPs, {tc['seconds'] / 60:.1f} min "
                     f"(counted in the distillation's total)")
    lines.append(f"distillation: {d['steps']} steps ({d['resumed_from']} resumed), {d['tokens_this_run']:,} tokens "
                 f"and {d['flops_this_run']:.3g} FLOPs this run, {d['seconds_this_run'] / 60:.1f} min; "
                 f"quantized rows on {q['tokens']:,} held-out tokens")
    return "\n".join(lines)
