"""Measure speculative decoding with a draft model on the bundled story-260k
(the quantized reference, `reference --speculate draft:MODEL:k`, greedy).

The drafts, all built here from story-260k (5 blocks) and its own corpus:

* `depth2`: its first 2 blocks (embedding, final norm and classifier kept),
  no training: a depth-pruned student as pruning alone leaves it;
* `depth2-distilled`: `compress --prune-layers 0.6 --prune-heads 0
  --prune-ffn 0 --distill-steps STEPS` (the 2 most important blocks, then
  distilled on a generated story corpus, scripts/make_corpus.py);
* `self`: story-260k itself, the upper bound (every guess kept);
* and the prompt-lookup draft for comparison (no weights).

With --firmware BOARD, the distilled draft is also built into firmware
(`compile --speculate draft:DRAFT:k --board BOARD`, one tree holding both
models) and the same prompts run on it (QEMU for qemu-mps2-an500): its
tokens are checked against plain decoding's and its passes against the
reference's, and its tokens per pass and what the draft costs (RAM, weights)
are reported.

Prompts: the first two sentences of the first N stories of the corpus's
held-out split.  For every draft and k = 1..3, every prompt runs greedily
(max_seq 512, MAX_NEW new tokens), its tokens are checked against plain
decoding's, and the mean tokens per pass over the target's weights is
reported (all generated tokens / all passes, and the mean of the
per-prompt ratios), with the draft's steps per pass and its parameter count
against the target's (what a pass costs in draft weights).

    python scripts/measure_draft.py [--work DIR] [--prompts 12] [--max-new-tokens 100] [--steps 300]
        [--firmware qemu-mps2-an500] [--json out.json]

With --firmware-only and --temperature T (--top-p P, --seed S: every prompt's seed), the firmware rows are
sampled requests: each prompt's tokens and passes checked against the sampled reference drafting with the
same draft, and the share of passes that rejected a guess reported (a full-sampler draft steps once more in
each of them to compute the rejected guess's q again).

About 10 minutes on a 2-core machine (the distillation's 4 of them)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from drafts import shallow_student  # noqa: E402
from tinyllm_gen.build.cmake import build  # noqa: E402
from tinyllm_gen.compile import CompileOptions, load_draft, quantize, write_tree  # noqa: E402
from tinyllm_gen.compile_draft import compile_draft_path  # noqa: E402
from tinyllm_gen.compress.distill import DistillOptions  # noqa: E402
from tinyllm_gen.compress.pipeline import CompressOptions, compress  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402
from tinyllm_gen.reference.executor import Executor, QuantKernels  # noqa: E402
from tinyllm_gen.reference.sampler import SamplingOptions  # noqa: E402
from tinyllm_gen.reference.speculative import generate_speculative  # noqa: E402
from tinyllm_gen.run.firmware import run_firmware  # noqa: E402

STORY = ROOT / "models" / "story-260k"
SEQ = 512
KS = (1, 2, 3)


def build_drafts(work: Path, steps: int) -> dict:
    corpus = work / "corpus"
    if not (corpus / "train.txt").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_corpus.py"), "--out", str(corpus),
                        "--train-bytes", "600000", "--valid-bytes", "60000"], check=True)
    depth2 = work / "depth2"
    if not (depth2 / "config.json").is_file():
        shallow_student(STORY, depth2, layers=2)
    distilled = work / f"depth2-distilled-{steps}"
    if not (distilled / "config.json").is_file():
        opts = CompressOptions(0.0, 0.0, DistillOptions(steps=steps, threads=1), prune_layers=0.6,
                               quant_eval_tokens=300)
        compress(STORY, distilled, corpus / "train.txt", opts, corpus / "valid.txt", progress=False)
    return {"depth2": depth2, "depth2-distilled": distilled, "self": STORY}


def prompts_of(valid: Path, n: int, tok) -> list[list[int]]:
    stories = [s for s in valid.read_text().split("\n\n") if s.strip()][:n]
    return [tok.encode(". ".join(s.split(". ")[:2]) + ".") for s in stories]


def measure_firmware(work: Path, draft: Path, prompts: list, max_new: int, board: str, want: dict,
                     sampling: SamplingOptions = SamplingOptions()) -> dict:
    """The distilled draft built into firmware for each k: its tokens per pass on `board` (tokens checked
    against plain decoding's, passes against the reference's: want[k] per prompt) and what it costs."""
    rows = {}
    for k in KS:
        out = work / f"firmware-{board}-k{k}"
        compiled = compile_draft_path(STORY, CompileOptions(board=board, max_seq=SEQ, speculate=f"draft:{draft}:{k}"))
        write_tree(compiled.tree, out)
        build(out)
        runs = [run_firmware(out, p, max_new, sampling, timeout_s=3600).output for p in prompts]
        for r, (ids, passes) in zip(runs, want[k]):
            assert (r.generated_ids, r.pass_tokens) == (ids, passes), k  # the reference's, to the pass
        tokens, passes = sum(len(r.generated_ids) for r in runs), sum(len(r.pass_tokens) for r in runs)
        d = compiled.draft
        rows[f"firmware:{k}"] = {"tokens_per_pass": tokens / passes, "tokens": tokens, "passes": passes,
                                 "draft_ram_bytes": d["ram_bytes"], "draft_weights_bytes": d["weights_bytes"],
                                 "target_ram_bytes": compiled.plan.total_bytes, "board": board,
                                 "rejecting_passes": sum(t < n for r in runs  # a run's last pass may stop early
                                                         for t, n in zip(r.pass_tokens[:-1], r.pass_positions))}
    return rows


def measure_firmware_only(work: Path, n_prompts: int, max_new: int, steps: int, board: str,
                          sampling: SamplingOptions = SamplingOptions()) -> dict:
    """--firmware-only: the distilled draft in firmware alone, each k's reference run with a fresh target
    executor and a fresh draft (measure()'s reference reuses them across drafts and k)."""
    draft = build_drafts(work, steps)["depth2-distilled"]
    m = load_model(STORY)
    opts, eos = CompileOptions(), m.graph.config.eos_ids
    prompts = prompts_of(work / "corpus" / "valid.txt", n_prompts, m.tokenizer)
    want = {}
    for k in KS:
        ex = Executor(m.graph, QuantKernels(quantize(m, opts), SEQ))
        d = load_draft(draft, m, STORY, opts, SEQ)
        gens = [generate_speculative(ex, p, max_new, SEQ, eos, sampling, k=k, draft=d) for p in prompts]
        if sampling.temperature == 0:
            plain = [generate_speculative(ex, p, max_new, SEQ, eos, sampling).generated_ids for p in prompts]
            assert [g.generated_ids for g in gens] == plain, k  # greedy speculation is plain decoding
        want[k] = [(g.generated_ids, g.pass_tokens) for g in gens]
    rows = measure_firmware(work, draft, prompts, max_new, board, want, sampling)
    return {"prompts": len(prompts), "max_new_tokens": max_new, "distill_steps": steps, "rows": rows,
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed}}


def measure(work: Path, n_prompts: int, max_new: int, steps: int, firmware: str | None = None) -> dict:
    drafts = build_drafts(work, steps)
    m = load_model(STORY)
    opts = CompileOptions()
    ex = Executor(m.graph, QuantKernels(quantize(m, opts), SEQ))
    eos, greedy = m.graph.config.eos_ids, SamplingOptions()
    prompts = prompts_of(work / "corpus" / "valid.txt", n_prompts, m.tokenizer)
    plain = [generate_speculative(ex, p, max_new, SEQ, eos, greedy).generated_ids for p in prompts]
    params = {name: load_model(d).graph.config.n_params() for name, d in drafts.items()}
    rows, want = {}, {}
    for name in ("lookup", *drafts):
        draft = None if name == "lookup" else load_draft(drafts[name], m, STORY, opts, SEQ)
        for k in KS:
            gens = [generate_speculative(ex, p, max_new, SEQ, eos, greedy, k=k, draft=draft) for p in prompts]
            for g, want in zip(gens, plain):
                assert g.generated_ids == want, (name, k)  # greedy speculation is plain decoding
            tokens, passes = sum(len(g.generated_ids) for g in gens), sum(g.passes for g in gens)
            rows[f"{name}:{k}"] = {
                "tokens_per_pass": tokens / passes,
                "mean_of_prompts": sum(g.tokens_per_pass for g in gens) / len(gens),
                "accepted_of_guessed": sum(g.accepted for g in gens) / max(1, sum(g.guessed for g in gens)),
                "draft_steps_per_pass": sum(g.draft_steps for g in gens) / passes,
                "draft_params_of_target": params.get(name, 0) / m.graph.config.n_params(),
                "tokens": tokens, "passes": passes}
            if name == "depth2-distilled":
                want[k] = [(g.generated_ids, g.pass_tokens) for g in gens]
    if firmware:
        rows.update(measure_firmware(work, drafts["depth2-distilled"], prompts, max_new, firmware, want))
    return {"prompts": len(prompts), "max_new_tokens": max_new, "distill_steps": steps, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "draft")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300, help="distillation steps of the depth2-distilled draft")
    ap.add_argument("--firmware", default=None, metavar="BOARD",
                    help="also build the distilled draft into firmware for BOARD and run the prompts on it")
    ap.add_argument("--firmware-only", action="store_true", help="with --firmware: only the firmware rows")
    ap.add_argument("--temperature", type=float, default=0.0, help="with --firmware-only: sampled requests")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    sampling = SamplingOptions(a.temperature, a.top_p, a.seed)
    if sampling.temperature and not a.firmware_only:
        ap.error("--temperature needs --firmware BOARD --firmware-only (the reference rows are greedy)")
    res = (measure_firmware_only(a.work, a.prompts, a.max_new_tokens, a.steps, a.firmware, sampling)
           if a.firmware_only else measure(a.work, a.prompts, a.max_new_tokens, a.steps, a.firmware))
    how = (f"sampled (temperature {a.temperature:g}, top-p {a.top_p:g}, seed {a.seed}); every row's tokens and "
           "passes are the sampled reference's" if sampling.temperature else "greedy; every row's tokens are plain "
           "decoding's")
    print(f"{res['prompts']} prompts, {res['max_new_tokens']} new tokens each, max_seq {SEQ}, {how}")
    print(f"{'draft:k':<22} {'tokens/pass':>11} {'per-prompt':>10} {'kept':>6} {'draft steps/pass':>16} "
          f"{'draft params':>12}")
    for key, r in res["rows"].items():
        if key.startswith("firmware:"):
            print(f"{key:<22} {r['tokens_per_pass']:>11.3f}   on {r['board']}: draft RAM {r['draft_ram_bytes']:,} B, "
                  f"weights {r['draft_weights_bytes']:,} B (target RAM {r['target_ram_bytes']:,} B), "
                  f"{r['rejecting_passes']} of {r['passes']} passes rejected a guess")
            continue
        print(f"{key:<22} {r['tokens_per_pass']:>11.3f} {r['mean_of_prompts']:>10.3f} "
              f"{100 * r['accepted_of_guessed']:>5.1f}% {r['draft_steps_per_pass']:>16.2f} "
              f"{100 * r['draft_params_of_target']:>11.1f}%")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
