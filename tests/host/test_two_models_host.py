"""Two models in one C build, the prerequisite of a draft model in
firmware: a tiny target compiled as usual and its one-block student compiled
with `--symbol-prefix tllm_draft_` (tests/drafts.py) link into one host
program (tests/c/speculate/two_models.c) that decodes with both, their steps
interleaved; each model's greedy tokens equal its own reference's.  Every
external symbol the prefixed model's own objects define carries the prefix
(nm), and its tree builds no console firmware."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from c_program import build_program, write_trees
from drafts import target_and_student
from firmware_harness import need
from tinyllm_gen.compile import CompileOptions, compile_path, quantize
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions

pytestmark = pytest.mark.host
pytest.importorskip("torch")

DRIVER = Path(__file__).resolve().parents[1] / "c" / "speculate" / "two_models.c"
PROMPT = "Once upon a time there was a little cat. The"
SEQ, N_NEW = 64, 40  # 20 prompt tokens: the generation ends 4 positions before the context does
MODEL_OBJECTS = ("tllm_model.c.o", "tllm_vocab.c.o", "tllm_weights.c.o", "tllm_weights.S.o")  # model-bound


def options(prefix: str) -> CompileOptions:
    return CompileOptions(board="host", sampler="greedy", max_seq=SEQ, symbol_prefix=prefix)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    need("cmake")
    need("gcc")
    root = tmp_path_factory.mktemp("two-models")
    target, draft = target_and_student(root)
    trees = write_trees(root, {"out-target": (target, options("tllm_model_")),
                               "out-draft": (draft, options("tllm_draft_"))})
    outs = {"target": trees["out-target"], "draft": trees["out-draft"]}
    exe = build_program(root / "proj", "two_models", DRIVER, {"target": outs["target"], "draft": outs["draft"]})
    return {"target": target, "draft": draft, "outs": outs, "exe": exe, "build": exe.parent}


def reference_tokens(model_dir: Path, prefix: str, ids: list[int]) -> list[int]:
    m = load_model(model_dir)
    ex = Executor(m.graph, QuantKernels(quantize(m, options(prefix)), SEQ))
    return generate(ex, ids, N_NEW, SEQ, (), SamplingOptions()).generated_ids  # no EOS: N_NEW tokens


def test_both_models_decode_their_own_references_tokens_in_one_program(built):
    ids = load_model(built["target"]).tokenizer.encode(PROMPT)
    run = subprocess.run([str(built["exe"]), str(N_NEW), *map(str, ids)], check=True, capture_output=True,
                         text=True, timeout=300)
    got = dict(line.split(":", 1) for line in run.stdout.splitlines())
    for name, prefix in (("target", "tllm_model_"), ("draft", "tllm_draft_")):
        assert [int(t) for t in got[name].split()] == reference_tokens(built[name], prefix, ids), name
    assert got["target"] != got["draft"]  # two models, not one linked twice


def test_every_external_symbol_of_the_prefixed_model_carries_its_prefix(built):
    """The draft library's generated objects and its model-bound runtime file (tllm_weights.c, compiled with
    the model's header) define no strong external symbol without the prefix; the weak board hooks are the
    runtime's defaults, and tllm_cmsis.c (compiled per model for its CMSIS-NN option) holds shared kernels."""
    draft = built["build"] / "CMakeFiles" / "draft.dir"
    objects = [p for p in draft.rglob("*.o") if p.name in MODEL_OBJECTS]
    assert sorted(p.name for p in objects) == sorted(MODEL_OBJECTS), objects
    nm = subprocess.run(["nm", "-g", "--defined-only", *map(str, objects)], check=True, capture_output=True,
                        text=True).stdout
    strong = [line.split() for line in nm.splitlines() if len(line.split()) == 3 and line.split()[1] not in "wWvV"]
    names = [name for _, _, name in strong]
    assert "tllm_draft_step" in names and "tllm_draft_weights_blob" in names and "tllm_draft" in names
    assert all(n.startswith("tllm_draft_") or n == "tllm_draft" for n in names), names
    local = subprocess.run(["nm", str(next(p for p in objects if p.name == "tllm_model.c.o"))], check=True,
                           capture_output=True, text=True).stdout
    assert "tllm_draft_arena_" in local and "tllm_arena_" not in local.replace("tllm_draft_arena_", "")


def test_a_prefixed_tree_is_a_library(built):
    cmake = (built["outs"]["draft"] / "CMakeLists.txt").read_text()
    assert "add_executable(firmware" not in cmake and "tinyllm_add_model(TARGET tllm_model" in cmake
    assert "add_executable(firmware" in (built["outs"]["target"] / "CMakeLists.txt").read_text()


def test_a_bad_prefix_is_refused(built):
    for bad in ("draft_", "tllm_Draft_", "tllm_draft", "tllm__"):
        with pytest.raises(UserError, match="write tllm_<name>_"):
            compile_path(built["draft"], options(bad))
