#!/usr/bin/env python3
"""Train the teacher that the bundled model is distilled from.

    python scripts/train_teacher.py            # -> build/teacher/ (not committed: rerun to reproduce)

Same corpus, tokenizer (models/story-260k/tokenizer.json), batches, optimiser
and schedule as scripts/train_default_model.py; only the width differs: the
teacher has twice the attention heads (16 heads / 8 KV heads, head_dim 8)
and twice the FFN (344), with the SAME hidden size (64) and depth (5).
That is deliberate: structured pruning removes heads and FFN channels, not
the residual width, so pruning half of each gives exactly the bundled
shape (8 / 4 heads, FFN 172), ready for scripts/distill_default_model.py.

The default step count makes the teacher's training compute (6 * params *
tokens) about equal to the bundled 260K model's 2000 steps, so the
comparison "teacher vs a from-scratch model of the bundled size" is at equal
compute.  Deterministic for a given --seed/--steps (torch version and thread
count fixed, as in train_default_model.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_default_model as base  # noqa: E402  (sibling script)

TEACHER_HEADS, TEACHER_KV_HEADS, TEACHER_FFN = 16, 8, 344
DEFAULT_STEPS = 1100  # ~ 2000 * 260K / 486K: equal compute with the bundled model


def teacher_config():
    cfg = base.make_config()
    cfg.num_attention_heads, cfg.num_key_value_heads = TEACHER_HEADS, TEACHER_KV_HEADS
    cfg.head_dim = cfg.hidden_size // base.make_config().num_attention_heads  # keep head_dim 8
    cfg.intermediate_size = TEACHER_FFN
    return cfg


def compute_flops(n_params: int, tokens: int) -> float:
    """Training compute, the usual 6 * N * D estimate (forward + backward)."""
    return 6.0 * n_params * tokens


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=base.DEFAULT_SEED)
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--corpus", type=Path, default=Path("build/corpus"))
    ap.add_argument("--tokenizer", type=Path, default=Path("models/story-260k/tokenizer.json"))
    ap.add_argument("--out", type=Path, default=Path("build/teacher"))
    args = ap.parse_args(argv)
    torch.set_num_threads(base.NUM_THREADS)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    train_text, valid_text = base.load_corpus(args.corpus, base.make_corpus.DEFAULT_SEED)
    tok = Tokenizer.from_file(str(args.tokenizer))
    config = teacher_config()
    train_seqs = base.encode_stories(tok, train_text, config.max_position_embeddings)
    valid_seqs = base.encode_stories(tok, valid_text, config.max_position_embeddings)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"teacher: {n_params:,} parameters, {args.steps} steps", flush=True)
    opt = base.make_optimizer(model, args.lr)
    stream = base.batches(train_seqs, args.batch_size, args.seed)
    t0, tokens = time.perf_counter(), 0
    model.train()
    for step in range(args.steps):
        ids, labels = next(stream)
        tokens += int((labels != -100).sum())
        loss = base.train_step(model, opt, ids, labels, lr=base.lr_at(step, args.steps, args.lr, args.warmup))
        if step % 50 == 0:
            print(f"step {step:5d}/{args.steps}  loss {loss:.4f}  {time.perf_counter() - t0:6.0f}s", flush=True)
    minutes = (time.perf_counter() - t0) / 60
    ppl = base.evaluate(model, valid_seqs)
    print(f"done: {args.steps} steps in {minutes:.1f} min, held-out ppl {ppl:.4f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float32).save_pretrained(args.out, safe_serialization=True)
    tok.save(str(args.out / "tokenizer.json"))
    base.patch_config(args.out / "config.json")
    (args.out / "generation_config.json").unlink(missing_ok=True)
    info = dict(params=n_params, steps=args.steps, seed=args.seed, batch_size=args.batch_size, tokens=tokens,
                flops=compute_flops(n_params, tokens), minutes=minutes, valid_ppl=ppl, torch=torch.__version__)
    (args.out / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"saved to {args.out}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
