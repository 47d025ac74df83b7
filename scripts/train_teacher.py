#!/usr/bin/env python3
"""Train the teacher that the bundled model is distilled from.

    python scripts/train_teacher.py            # -> build/teacher/ (not committed: rerun to reproduce)

Same tokenizer (models/story-260k/tokenizer.json), batches, optimiser and
schedule as scripts/train_default_model.py, on 12x more of the same generated
corpus (build/corpus-large, 48 MB; made here if missing).  The teacher is
twice as wide everywhere as the bundled model: hidden 128, 16 heads / 8 KV
heads (head_dim 8), FFN 344, the same depth (5), 973K parameters.  Pruning
half of the heads, the FFN and the residual width (`compress --prune-heads
0.5 --prune-ffn 0.5 --prune-hidden 0.5`) gives exactly the bundled shape,
ready for scripts/distill_default_model.py.

DEFAULT_STEPS (2000) sets the compute budget (6 * params * tokens, 4.57e13
FLOPs); the equal-compute baseline is the bundled shape trained from scratch
until it first reaches that compute, 7498 steps
(scripts/distill_default_model.py BASELINE_STEPS).
Before training, the script writes build/teacher/train_plan.json with the
compute the run will take (the batch stream is deterministic, so the tokens
are known in advance); `train_default_model.py --match-compute` reads it.

About 40 minutes on 1 thread, running side by side with the baseline (about
60 minutes on the other core).  Deterministic for a given --seed, --steps
and --threads (the thread count changes float summation order).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_default_model as base  # noqa: E402  (sibling script)

TEACHER_HIDDEN, TEACHER_HEADS, TEACHER_KV_HEADS, TEACHER_FFN = 128, 16, 8, 344
DEFAULT_STEPS = 2000  # 6*params*tokens just under the baseline's BASELINE_STEPS at 260K: equal compute
DEFAULT_THREADS = 1  # part of the recipe: the thread count changes float summation order
# The same generator and seed as build/corpus, only more of it: the 4 MB
# default train split is a prefix of this one and the held-out split is the
# same file, so nothing is repeated within the teacher's 2000 steps.
LARGE_CORPUS = Path("build/corpus-large")
LARGE_TRAIN_BYTES = 48_000_000


def ensure_large_corpus(path: Path) -> None:
    if not ((path / "train.txt").is_file() and (path / "valid.txt").is_file()):
        print(f"generating the {LARGE_TRAIN_BYTES // 1_000_000} MB corpus in {path}", flush=True)
        base.make_corpus.write_corpus(path, seed=base.make_corpus.DEFAULT_SEED, train_bytes=LARGE_TRAIN_BYTES)


def teacher_config():
    cfg = base.make_config()
    cfg.hidden_size = TEACHER_HIDDEN
    cfg.num_attention_heads, cfg.num_key_value_heads = TEACHER_HEADS, TEACHER_KV_HEADS
    cfg.head_dim = base.make_config().hidden_size // base.make_config().num_attention_heads  # keep head_dim 8
    cfg.intermediate_size = TEACHER_FFN
    return cfg


def compute_flops(n_params: int, tokens: int) -> float:
    """Training compute, the usual 6 * N * D estimate (forward + backward)."""
    return 6.0 * n_params * tokens


def planned_tokens(seqs, batch_size: int, seed: int, steps: int) -> int:
    return sum(itertools.islice(base.tokens_per_step(seqs, batch_size, seed), steps))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=base.DEFAULT_SEED)
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--corpus", type=Path, default=LARGE_CORPUS)
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--tokenizer", type=Path, default=Path("models/story-260k/tokenizer.json"))
    ap.add_argument("--out", type=Path, default=Path("build/teacher"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    if args.corpus == LARGE_CORPUS:
        ensure_large_corpus(args.corpus)

    train_text, valid_text = base.load_corpus(args.corpus, base.make_corpus.DEFAULT_SEED)
    tok = Tokenizer.from_file(str(args.tokenizer))
    config = teacher_config()
    train_seqs = base.encode_stories(tok, train_text, config.max_position_embeddings)
    valid_seqs = base.encode_stories(tok, valid_text, config.max_position_embeddings)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"teacher: {n_params:,} parameters, {args.steps} steps", flush=True)
    opt = base.make_optimizer(model, args.lr)
    # The batch stream is deterministic, so the compute is known before training:
    # write it first, so the equal-compute baseline can start at the same time
    # (train_default_model.py --match-compute build/teacher/train_plan.json).
    planned = planned_tokens(train_seqs, args.batch_size, args.seed, args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "train_plan.json").write_text(json.dumps(
        dict(params=n_params, steps=args.steps, tokens=planned, flops=compute_flops(n_params, planned)), indent=2) + "\n")
    stream = base.batches(train_seqs, args.batch_size, args.seed)
    t0, tokens = time.perf_counter(), 0
    model.train()
    for step in range(args.steps):
        ids, labels = next(stream)
        tokens += int((labels != -100).sum())
        loss = base.train_step(model, opt, ids, labels, lr=base.lr_at(step, args.steps, args.lr, args.warmup))
        if step % 50 == 0:
            print(f"step {step:5d}/{args.steps}  loss {loss:.4f}  {time.perf_counter() - t0:6.0f}s", flush=True)
        if args.eval_every and step and step % args.eval_every == 0:
            print(f"step {step:5d}  held-out ppl {base.evaluate(model, valid_seqs):.4f}", flush=True)
    minutes = (time.perf_counter() - t0) / 60
    ppl = base.evaluate(model, valid_seqs)
    print(f"done: {args.steps} steps in {minutes:.1f} min, held-out ppl {ppl:.4f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float32).save_pretrained(args.out, safe_serialization=True)
    tok.save(str(args.out / "tokenizer.json"))
    base.patch_config(args.out / "config.json")
    (args.out / "generation_config.json").unlink(missing_ok=True)
    info = dict(params=n_params, steps=args.steps, seed=args.seed, batch_size=args.batch_size, tokens=tokens,
                flops=compute_flops(n_params, tokens), minutes=minutes, valid_ppl=ppl, torch=torch.__version__,
                threads=args.threads, corpus=str(args.corpus))
    (args.out / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"saved to {args.out}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
