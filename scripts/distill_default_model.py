#!/usr/bin/env python3
"""Make the bundled model a product of the compression pipeline:
teacher (scripts/train_teacher.py) -> prune half the heads and FFN -> distill.

    python scripts/distill_default_model.py [--replace]

1. trains the teacher into build/teacher/ if it is not there (train_teacher.py);
2. runs `tinyllm_gen.compress.pipeline.compress` (what `tinyllm-gen compress`
   runs): prune 50% of the KV groups (16/8 heads -> 8/4) and 50% of the FFN
   (344 -> 172), which is exactly the bundled shape, then distill on
   build/corpus/train.txt for --steps steps (KL at T=2 + data loss);
3. scores the distilled student and the current models/story-260k on the
   whole held-out split (build/corpus/valid.txt) with the same function,
   and prints the comparison with the compute each took;
4. with --replace, and only if the student is at least as good, copies its
   config.json + model.safetensors over models/story-260k (the tokenizer is
   the same file) and records the provenance in models/story-260k/DISTILLED.md.

Deterministic for a given seed and step count (fixed threads, deterministic
torch algorithms, batch k a function of (seed, k)); an interrupted run
resumes from build/distilled.work/checkpoint.pt when rerun.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from tinyllm_gen.compress.distill import DistillOptions  # noqa: E402
from tinyllm_gen.compress.pipeline import CompressOptions, compress, format_report  # noqa: E402
from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, perplexity  # noqa: E402
from tinyllm_gen.compress.eval import read_documents  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402

BUNDLED = ROOT / "models" / "story-260k"
BUNDLED_STEPS, BUNDLED_SEED = 2000, 1234  # how models/story-260k was trained (its README.md)


def bundled_train_flops(n_params: int, corpus: Path) -> float:
    """6 * N * tokens of the from-scratch run, replaying its (deterministic) batch stream."""
    import train_default_model as base
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    stories = base.make_corpus.split_stories((corpus / "train.txt").read_text(encoding="utf-8"))
    stream = base.batches(base.encode_stories(tok, stories, 512), 16, BUNDLED_SEED)
    tokens = sum(int((next(stream)[1] != -100).sum()) for _ in range(BUNDLED_STEPS))
    return 6.0 * n_params * tokens


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", type=Path, default=ROOT / "build" / "teacher")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "distilled")
    ap.add_argument("--corpus", type=Path, default=ROOT / "build" / "corpus")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--replace", action="store_true", help="overwrite models/story-260k if the student is as good")
    args = ap.parse_args(argv)

    if not (args.teacher / "model.safetensors").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "train_teacher.py"), "--out", str(args.teacher),
                        "--corpus", str(args.corpus)], check=True)
    opts = CompressOptions(0.5, 0.5, DistillOptions(steps=args.steps, lr=args.lr, temperature=args.temperature,
                                                    alpha=args.alpha, seed=args.seed))
    result = compress(args.teacher, args.out, args.corpus / "train.txt", opts, args.corpus / "valid.txt")
    print(format_report(result))

    # Whole held-out split, same function for both models.
    tok = load_model(BUNDLED).tokenizer
    held = encode_docs(tok, read_documents(args.corpus / "valid.txt"), 512)
    ppl_student = perplexity(load_torch_model(args.out), held, tok.eos_id)
    ppl_bundled = perplexity(load_torch_model(BUNDLED), held, tok.eos_id)
    teacher_info = json.loads((args.teacher / "train_info.json").read_text())
    summary = {
        "teacher": {"ppl": result["rows"]["teacher"]["ppl"], "params": teacher_info["params"],
                    "train_flops": teacher_info["flops"], "steps": teacher_info["steps"]},
        "pruned": {"ppl": result["rows"]["pruned"]["ppl"]},
        "distilled": {"ppl": ppl_student, "distill_flops": result["distill"]["flops_this_run"],
                      "distill_steps": result["distill"]["steps"]},
        "bundled_from_scratch": {"ppl": ppl_bundled, "steps": BUNDLED_STEPS,
                                 "train_flops": bundled_train_flops(260032, args.corpus)},
    }
    gap = ppl_bundled - summary["teacher"]["ppl"]
    summary["gap_closed"] = (ppl_bundled - ppl_student) / gap if gap > 0 else None
    print(json.dumps(summary, indent=2))
    (args.out.parent / "distill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.replace:
        if ppl_student <= ppl_bundled:
            for f in ("config.json", "model.safetensors"):
                shutil.copyfile(args.out / f, BUNDLED / f)
            (BUNDLED / "DISTILLED.md").write_text(provenance(args, summary))
            print(f"replaced {BUNDLED} (held-out ppl {ppl_bundled:.4f} -> {ppl_student:.4f})")
        else:
            print(f"kept {BUNDLED}: the student ({ppl_student:.4f}) is worse than it ({ppl_bundled:.4f})")


def provenance(args, s) -> str:
    return f"""# story-260k: distilled

These weights are the pruned and distilled student of the teacher trained by
`scripts/train_teacher.py`; they replaced the from-scratch model because they
score better on the held-out split.

    python scripts/train_teacher.py
    python scripts/distill_default_model.py --steps {args.steps} --seed {args.seed} --replace

| model | held-out ppl | compute |
|---|---|---|
| teacher ({s['teacher']['params']:,} params, {s['teacher']['steps']} steps) | {s['teacher']['ppl']:.4f} | {s['teacher']['train_flops']:.3g} FLOPs |
| pruned (before distillation) | {s['pruned']['ppl']:.4f} | - |
| distilled ({s['distilled']['distill_steps']} steps) | {s['distilled']['ppl']:.4f} | +{s['distilled']['distill_flops']:.3g} FLOPs |
| previous from-scratch story-260k ({s['bundled_from_scratch']['steps']} steps) | {s['bundled_from_scratch']['ppl']:.4f} | {s['bundled_from_scratch']['train_flops']:.3g} FLOPs |
"""


if __name__ == "__main__":
    main()
