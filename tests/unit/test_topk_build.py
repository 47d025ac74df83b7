"""`--sampler topk:K` in the pipeline: lowering drops the [vocab] logits
vector and the top-p scratch for one 64-row chunk and a K-entry set, the
plan lives them from the classifier to the sampler and `plan` prints what
the full sampler would add; bad K values end in one line, exit status 2."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tinyllm_gen.ir import ModelConfig, build_decoder_graph
from tinyllm_gen.kernels import ArgmaxClassifier, TopKClassifier
from tinyllm_gen.kernels.classifier import CHUNK_ROWS as ARGMAX_CHUNK_ROWS
from tinyllm_gen.lower.records import StepSource
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.plan.lifetimes import lifetimes_of
from tinyllm_gen.reference.sampler import TOP_K_MAX, sampler_problem, top_k_of

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
CONFIG = ModelConfig("qwen2", 96, 160, 3, 6, 2, 16, 320, 96, tied_embeddings=False, qkv_bias=True, eos_ids=(1,))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("kernels", ["portable", "cortex-m7"])
def test_topk_lowering_has_no_logits_vector(kernels):
    step = lower_step(StepSource(build_decoder_graph(CONFIG, {}), 32, 8, kernels, "rtn"), "topk:100")
    decls = {d.name: d for d in step.decls}
    assert "sample_idx" not in decls and decls["logits"].count == ARGMAX_CHUNK_ROWS
    assert (decls["topk.value"].ctype, decls["topk.value"].count) == ("float", 100)
    assert (decls["topk.id"].ctype, decls["topk.id"].count) == ("uint16_t", 100)
    cls = step.calls[-1].args
    assert isinstance(cls, TopKClassifier) and not isinstance(cls, ArgmaxClassifier) and cls.k == 100 == step.top_k
    life = lifetimes_of(step)
    for name in ("topk.value", "topk.id", "logits"):  # written by the classifier, read by the sampler after it
        b = life.by_name(name)
        assert (b.first, b.last) == (len(step.calls) - 1, life.n_steps)


def test_sampler_values():
    assert [sampler_problem(s) for s in ("full", "greedy", "topk:1", f"topk:{TOP_K_MAX}")] == [None] * 4
    for bad in ("topk", "topk:0", f"topk:{TOP_K_MAX + 1}", "topk:-3", "topk:x", "topk:07", "top:5", "beam"):
        assert sampler_problem(bad) is not None, bad
    assert (top_k_of("topk:40"), top_k_of("full"), top_k_of("greedy")) == (40, 0, 0)


@pytest.mark.parametrize("value,needle", [("topk:0", "K must be in 1..1024"), ("topk:abc", "choose full, greedy or topk:K"),
                                          ("topk:600", "larger than the vocabulary (512 tokens)")])
def test_bad_k_is_one_line(tmp_path, value, needle):
    out = tmp_path / "out"
    proc = cli("compile", STORY, "-o", out, "--sampler", value)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert needle in lines[0] and not out.exists()


def test_plan_shows_the_bytes_saved(tmp_path):
    """stories15M's shape (vocab 32,000): the full sampler's logits vector and
    top-p scratch are 192,000 B; topk:40 keeps a 64-row chunk and the set."""
    from tinyllm_gen.bench.synthetic import SHAPES, write_random_llama

    model = write_random_llama(tmp_path / "m", SHAPES["stories15m"])
    proc = cli("plan", model, "--sampler", "topk:40", "--max-seq", 64, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["sampler"]
    assert doc["full_sampler_bytes"] == 32000 * 4 + 32000 * 2
    assert doc["sampler_bytes"] == 64 * 4 + 40 * 4 + 80  # chunk, values, ids (16-byte aligned)
    assert doc["saved_bytes"] == doc["full_sampler_total_bytes"] - doc["total_bytes"] > 150_000
    text = cli("plan", model, "--sampler", "topk:40", "--max-seq", 64).stdout
    assert f"the plan needs {doc['full_sampler_total_bytes']:,} B, {doc['saved_bytes']:,} B more" in text
