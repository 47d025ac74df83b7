#!/usr/bin/env python3
"""Held-out loss per story, grouped by how often its hero appears in the corpus.

    python scripts/loss_by_hero_rank.py build/teacher build/scratch-260k build/distilled

The corpus's heroes are residents of a fixed world met with Zipf frequencies
(scripts/make_corpus.py).  Stories about the most frequent residents show what
the templates alone cost (their facts are learnt by any model); the rarer
ones add the facts a model has not learnt yet.  Comparing models bucket by
bucket shows where a larger model, or more tokens, pays.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import make_corpus  # noqa: E402

BUCKETS = ((1, 10), (11, 100), (101, 1000), (1001, 10**9))


def story_losses(model_dir: Path, stories: list[str]) -> list[float]:
    """Summed next-token NLL (nats) of BOS + story + EOS, one float per story."""
    from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, sequence_nll
    from tinyllm_gen.frontends import load_model

    tok = load_model(model_dir).tokenizer
    model = load_torch_model(model_dir)
    ctx = model.config.max_position_embeddings
    seqs = encode_docs(tok, stories, ctx)  # cut at the context: a story that fills it may have been cut
    if len(seqs) != len(stories) or any(len(s) >= ctx for s in seqs):
        sys.exit(f"{model_dir}: a held-out story is longer than the model's context; shorten the corpus stories")
    return sequence_nll(model, seqs, tok.eos_id)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", type=Path, nargs="+")
    ap.add_argument("--corpus", type=Path, default=ROOT / "build" / "corpus")
    ap.add_argument("--seed", type=int, default=make_corpus.DEFAULT_SEED)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    valid = args.corpus / "valid.txt"
    if not valid.is_file():
        sys.exit(f"{valid} is missing: make it with `python scripts/make_corpus.py --out {args.corpus}`")
    stories = make_corpus.split_stories(valid.read_text(encoding="utf-8"))
    world, heroes = make_corpus.held_out_heroes(args.seed, len(stories))
    if any(h.who.name not in story for h, story in zip(heroes, stories)):
        sys.exit(f"{valid} was not made by this make_corpus.py with seed {args.seed}: "
                 f"regenerate it with `python scripts/make_corpus.py --out {args.corpus}`")
    ranks = [world.rank(h) for h in heroes]
    counts = [sum(lo <= r <= hi for r in ranks) for lo, hi in BUCKETS]
    print("nats per held-out story by the hero's frequency rank (stories in each bucket below)")
    print(f"{'model':<28}" + "".join(f"{f'{lo}-{hi}' if hi < 10**9 else f'{lo}+':>12}" for lo, hi in BUCKETS))
    print(f"{'(stories)':<28}" + "".join(f"{c:>12}" for c in counts))
    for m in args.models:
        loss = story_losses(m, stories)
        means = [sum(x for x, r in zip(loss, ranks) if lo <= r <= hi) / max(1, c)
                 for (lo, hi), c in zip(BUCKETS, counts)]
        print(f"{str(m):<28}" + "".join(f"{v:>12.2f}" for v in means))


if __name__ == "__main__":
    main()
