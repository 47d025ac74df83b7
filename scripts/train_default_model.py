#!/usr/bin/env python3
"""Train the project's bundled default model, ``models/story-260k/``.

Reproduce with one command (from the repository root):

    python scripts/train_default_model.py

That command
  1. generates the synthetic story corpus into ``build/corpus/`` with
     ``scripts/make_corpus.py`` if it is not there yet,
  2. trains a byte-level BPE tokenizer (vocab 512; ``<s>`` = id 0 = BOS,
     ``</s>`` = id 1 = EOS),
  3. trains a ~260K-parameter ``LlamaForCausalLM`` on CPU for a fixed number
     of steps (default ``DEFAULT_STEPS``, about 8-10 minutes on 2 cores),
  4. reports held-out perplexity and writes config.json, model.safetensors
     (float32), tokenizer.json and README.md to ``models/story-260k/``.

Determinism: the result depends only on ``--seed`` and ``--steps`` (plus the
torch version and thread count, which change float summation order).  The
``--minutes`` option instead measures the step speed of this machine and picks
the step count that fills that budget; it prints the chosen count so the run
can be repeated exactly with ``--steps``.

Every training sequence is one whole story: BOS + story tokens + EOS, so the
model always sees BOS at position 0 (as on the MCU) and learns to stop.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_corpus  # noqa: E402  (sibling script, not a package)

BOS, EOS = "<s>", "</s>"
BOS_ID, EOS_ID = 0, 1          # fixed by the order of special_tokens below
VOCAB_SIZE = 512
DEFAULT_STEPS = 2000
DEFAULT_SEED = 1234
NUM_THREADS = 2


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------

def train_tokenizer(stories: list[str]) -> Tokenizer:
    """Byte-level BPE: every byte is in the base alphabet, so no <unk> is needed."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS],  # listed first -> ids 0 and 1
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stories, trainer=trainer)
    # Like HF Llama tokenizers: encode() prepends BOS by default, so a prompt
    # tokenized with add_special_tokens=True is ready to feed the model.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID), (EOS, EOS_ID)])
    assert tok.token_to_id(BOS) == BOS_ID and tok.token_to_id(EOS) == EOS_ID
    assert tok.get_vocab_size() == VOCAB_SIZE
    return tok


def encode_stories(tok: Tokenizer, stories: list[str], max_len: int) -> list[torch.Tensor]:
    """One tensor per story: BOS + tokens + EOS."""
    out = []
    for enc in tok.encode_batch(stories, add_special_tokens=False):
        ids = [BOS_ID] + enc.ids + [EOS_ID]
        if len(ids) > max_len:
            raise ValueError(f"story of {len(ids)} tokens exceeds max_position_embeddings={max_len}")
        out.append(torch.tensor(ids, dtype=torch.long))
    return out


# --------------------------------------------------------------------------
# Model and data
# --------------------------------------------------------------------------

def make_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=172,
        num_hidden_layers=5, num_attention_heads=8, num_key_value_heads=4,
        max_position_embeddings=512, tie_word_embeddings=True,
        rope_theta=10000.0, rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID,
    )


PAD_MULTIPLE = 32


def make_batch(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest story, rounded up to PAD_MULTIPLE.

    With causal attention the padding only comes *after* real tokens, so no
    attention mask is needed; labels of -100 keep the padding out of the loss.
    The rounding matters for speed: every new tensor shape makes the CPU
    kernels re-plan, and a handful of widths instead of ~150 made steps ~30%
    faster (and several times faster than fully ragged widths early on)."""
    width = -(-max(len(s) for s in seqs) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = torch.full((len(seqs), width), EOS_ID, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, :len(s)] = s
        labels[row, :len(s)] = s
    return ids, labels


def batches(seqs: list[torch.Tensor], batch_size: int, seed: int, pool: int = 64):
    """Endless stream of batches; epoch e is shuffled by a generator seeded with (seed, e).

    Stories differ in length and attention cost grows with the padded width,
    so each pool of `pool` batches' worth of stories is sorted by length before
    it is cut into batches (similar lengths together = little padding); the
    batch order is then shuffled again so lengths do not trend through the epoch.
    """
    epoch = 0
    while True:
        g = torch.Generator().manual_seed(seed * 1000 + epoch)
        order = torch.randperm(len(seqs), generator=g).tolist()
        epoch_batches = []
        for start in range(0, len(order), pool * batch_size):
            chunk = sorted(order[start:start + pool * batch_size], key=lambda j: (len(seqs[j]), j))
            epoch_batches += [chunk[i:i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
        for b in torch.randperm(len(epoch_batches), generator=g).tolist():
            yield make_batch([seqs[j] for j in epoch_batches[b]])
        epoch += 1


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% of peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    # No weight decay on norms (1-D weights): decaying their gains to zero only hurts.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)


@torch.no_grad()
def evaluate(model: LlamaForCausalLM, seqs: list[torch.Tensor], batch_size: int = 64) -> float:
    """Held-out perplexity per BPE token (every token after BOS, EOS included)."""
    model.eval()
    total_nll, total_tokens = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        ids, labels = make_batch(seqs[i:i + batch_size])
        logits = model(input_ids=ids).logits[:, :-1]
        target = labels[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100, reduction="sum")
        total_nll += nll.item()
        total_tokens += int((target != -100).sum())
    model.train()
    return math.exp(total_nll / total_tokens)


def train_step(model, opt, ids, labels, lr: float) -> float:
    for group in opt.param_groups:
        group["lr"] = lr
    loss = model(input_ids=ids, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def steps_for_budget(model, opt, stream, minutes: float, peak_lr: float) -> int:
    """Time a few warmup-LR steps to estimate how many steps fit in `minutes`.
    These steps are real training steps (they also start the warmup)."""
    train_step(model, opt, *next(stream), lr=peak_lr / 100)  # first step pays one-off costs
    t0, n = time.perf_counter(), 10
    for _ in range(n):
        train_step(model, opt, *next(stream), lr=peak_lr / 100)
    per_step = (time.perf_counter() - t0) / n
    return max(100, int(minutes * 60 / per_step))


# --------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------

def save(model: LlamaForCausalLM, tok: Tokenizer, out: Path, info: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float32).save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    patch_config(out / "config.json")
    (out / "README.md").write_text(readme_text(info), encoding="utf-8")
    for stray in ("generation_config.json",):  # keep the folder to the files we document
        (out / stray).unlink(missing_ok=True)


def patch_config(path: Path) -> None:
    """transformers 5 writes `dtype` and `rope_parameters`; also write the
    transformers-4 spellings (`torch_dtype`, `rope_theta`) so that readers of
    either layout find them.  Both versions load the result."""
    cfg = json.loads(path.read_text())
    assert cfg.get("rope_scaling") is None and cfg.get("sliding_window") is None
    rope = cfg.get("rope_parameters") or {}
    assert rope.get("rope_type", "default") == "default"
    cfg["rope_theta"] = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    cfg.pop("rope_scaling", None)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def readme_text(i: dict) -> str:
    return f"""# story-260k

Default model bundled with tinyllm-gen: a {i['params']:,}-parameter Llama
(`LlamaForCausalLM`, float32) that writes very simple children's stories.
Trained from scratch by this project; no third-party weights or data.

## Reproduce

```
{i['command']}
```

(from the repository root; CPU only, torch {i['torch']}, {i['threads']} threads.
The corpus is generated by `scripts/make_corpus.py` into `build/corpus/` if missing.)

| | |
|---|---|
| seed | {i['seed']} |
| steps | {i['steps']} (batch {i['batch_size']} stories, peak LR {i['lr']}, AdamW, cosine) |
| training time | {i['train_minutes']:.1f} min on {i['threads']} CPU threads |
| corpus | {i['train_bytes']:,} bytes / {i['train_stories']:,} stories train, {i['valid_bytes']:,} bytes / {i['valid_stories']:,} stories held out (synthetic grammar, corpus seed {i['corpus_seed']}) |
| held-out perplexity | {i['valid_ppl']:.3f} per BPE token |
| parameters | {i['params']:,} (tied input/output embeddings) |
| architecture | hidden 64, MLP 172, 5 layers, 8 heads / 4 KV heads, head_dim 8, RoPE theta 10000, max 512 positions |
| tokenizer | byte-level BPE, vocab {VOCAB_SIZE}; `<s>` = {BOS_ID} (BOS), `</s>` = {EOS_ID} (EOS); `tokenizer.json` prepends BOS when encoding with special tokens |

Each training sequence is one story: `<s>` + story + `</s>`. Start generation
from `<s>` (plus an optional prompt such as "Once upon a time") and stop at `</s>`.

Greedy sample from "Once upon a time":

> {i['sample']}
"""


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def greedy_sample(model: LlamaForCausalLM, tok: Tokenizer, prompt: str, max_new: int = 300) -> str:
    ids = torch.tensor([tok.encode(prompt).ids])  # BOS is prepended by the post-processor
    model.eval()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new, do_sample=False,
                             eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    return tok.decode(out[0].tolist(), skip_special_tokens=True)


def load_corpus(corpus_dir: Path, corpus_seed: int) -> tuple[list[str], list[str]]:
    train_path, valid_path = corpus_dir / "train.txt", corpus_dir / "valid.txt"
    if not (train_path.exists() and valid_path.exists()):
        print(f"corpus missing, generating it in {corpus_dir}")
        make_corpus.write_corpus(corpus_dir, seed=corpus_seed)
    return (make_corpus.split_stories(train_path.read_text(encoding="utf-8")),
            make_corpus.split_stories(valid_path.read_text(encoding="utf-8")))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--minutes", type=float, default=None,
                    help="pick the step count from measured speed instead of --steps (not reproducible across machines)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--corpus", type=Path, default=Path("build/corpus"))
    ap.add_argument("--corpus-seed", type=int, default=make_corpus.DEFAULT_SEED)
    ap.add_argument("--out", type=Path, default=Path("models/story-260k"))
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=NUM_THREADS,
                    help="torch CPU threads (part of the recipe: it changes float summation order)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="reuse this tokenizer.json instead of training one on the corpus")
    ap.add_argument("--match-compute", type=Path, default=None, metavar="TRAIN_INFO_JSON",
                    help="pick --steps so that 6*params*tokens first reaches the 'flops' of this run "
                         "(a teacher's train_info.json): the from-scratch baseline at equal compute")
    return ap.parse_args(argv)


def tokens_per_step(seqs: list[torch.Tensor], batch_size: int, seed: int):
    """The real (non-padding) tokens of each step of the deterministic batch
    stream: training compute is known before training."""
    for _ids, labels in batches(seqs, batch_size, seed):
        yield int((labels != -100).sum())


def steps_for_flops(seqs: list[torch.Tensor], batch_size: int, seed: int, n_params: int, flops: float) -> int:
    """The first step count whose training compute 6 * params * tokens reaches `flops`."""
    tokens = 0
    for steps, n in enumerate(tokens_per_step(seqs, batch_size, seed)):
        if 6.0 * n_params * tokens >= flops:
            return steps
        tokens += n


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    train_text, valid_text = load_corpus(args.corpus, args.corpus_seed)
    tok = Tokenizer.from_file(str(args.tokenizer)) if args.tokenizer else train_tokenizer(train_text)
    config = make_config()
    train_seqs = encode_stories(tok, train_text, config.max_position_embeddings)
    valid_seqs = encode_stories(tok, valid_text, config.max_position_embeddings)
    n_train_tokens = sum(len(s) for s in train_seqs)
    print(f"corpus: {len(train_seqs)} train stories ({n_train_tokens} tokens), {len(valid_seqs)} held out")

    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters")
    opt = make_optimizer(model, args.lr)
    stream = batches(train_seqs, args.batch_size, args.seed)

    t_start = time.perf_counter()
    step0, steps = 0, args.steps
    if args.match_compute is not None:
        target = json.loads(args.match_compute.read_text())["flops"]
        steps = steps_for_flops(train_seqs, args.batch_size, args.seed, n_params, target)
        print(f"--match-compute: {steps} steps reach {target:.4g} FLOPs")
    if args.minutes is not None:
        steps = steps_for_budget(model, opt, stream, args.minutes, args.lr)
        step0 = 11
        print(f"--minutes {args.minutes}: training {steps} steps (rerun with --steps {steps} is not identical: "
              f"the timing steps are extra)")

    model.train()
    tokens = 0
    for step in range(step0, steps):
        ids, labels = next(stream)
        tokens += int((labels != -100).sum())
        loss = train_step(model, opt, ids, labels, lr=lr_at(step, steps, args.lr, args.warmup))
        if step % 50 == 0:
            print(f"step {step:5d}/{steps}  loss {loss:.4f}  {time.perf_counter() - t_start:6.0f}s", flush=True)
        if args.eval_every and step and step % args.eval_every == 0:
            print(f"step {step:5d}  held-out ppl {evaluate(model, valid_seqs):.3f}", flush=True)
    train_minutes = (time.perf_counter() - t_start) / 60

    ppl = evaluate(model, valid_seqs)
    sample = greedy_sample(model, tok, "Once upon a time")
    print(f"done: {steps} steps in {train_minutes:.1f} min, held-out ppl {ppl:.3f}")
    print(f"sample: {sample}")

    command = "python scripts/train_default_model.py"
    defaults = parse_args([])
    if args.minutes is None and steps != defaults.steps:  # --match-compute is recorded as the steps it chose
        command += f" --steps {steps}"
    for flag in ("seed", "batch_size", "lr", "warmup", "corpus_seed", "threads", "corpus", "tokenizer", "out"):
        if getattr(args, flag) != getattr(defaults, flag):
            command += f" --{flag.replace('_', '-')} {getattr(args, flag)}"
    if args.minutes is not None:
        command += f" --minutes {args.minutes}"
    save(model, tok, args.out, dict(
        command=command, seed=args.seed, steps=steps, batch_size=args.batch_size, lr=args.lr,
        train_minutes=train_minutes, valid_ppl=ppl, params=n_params, torch=torch.__version__,
        train_bytes=sum(len(s.encode()) for s in train_text), train_stories=len(train_text),
        valid_bytes=sum(len(s.encode()) for s in valid_text), valid_stories=len(valid_text),
        corpus_seed=args.corpus_seed, sample=sample, threads=args.threads))
    info = dict(params=n_params, steps=steps, seed=args.seed, batch_size=args.batch_size, tokens=tokens,
                flops=6.0 * n_params * tokens, minutes=train_minutes, valid_ppl=ppl, torch=torch.__version__,
                threads=args.threads, command=command)
    (args.out / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"saved to {args.out}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
