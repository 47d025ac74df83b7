"""`compile TARGET --speculate draft:DRAFT:k` writes one tree holding both
models (codegen/compile_draft.py, emit/draft_tree.py), and the tree's own
build drafts with its draft model: on the host board a greedy generation's
tokens are `reference --speculate draft:...`'s and plain decoding's, and
every pass's token count is the reference's, also into the context's end;
sampled requests (temperature, top-p, a top-K tree; several seeds) give the
reference's tokens and passes bit for bit; so too greedy ones with a
vocabulary-pruned student (compress --prune-vocab), drafting through the id
tables its tree holds (a target token it lacks read as its first
character's), greedy and sampled.  The tree is deterministic and keeps the draft in draft/,
compiled with the target's sampler; `run` refuses a sampled request to an
older tree's greedy-only draft in one line; bad drafts (no such path, a
shorter context, another vocabulary) and a draft over the RAM budget are
refused in one line, exit 2, nothing written."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from bounds import BACKSTOP_S
from cli_inprocess import cli
from drafts import draft_reference, random_draft, renamed_token_draft, target_and_student, vocab_pruned_student
from firmware_harness import need
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, load_draft, write_tree
from tinyllm_gen.compile_draft import compile_draft_path
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.sampler import SamplingOptions, top_k_of
from tinyllm_gen.run.check import tree_id_tables
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import pack_request

pytestmark = pytest.mark.host
pytest.importorskip("torch")

PROMPT = "Once upon a time there was a little cat. The"
SEQ, K = 64, 3


def options(models, board: str = "host", **extra) -> CompileOptions:
    return CompileOptions(board=board, max_seq=SEQ, speculate=f"draft:{models['draft']}:{K}", **extra)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-tree")
    target, draft = target_and_student(root)
    return {"root": root, "target": target, "draft": draft}


def built_tree(models, name: str, **extra):
    need("cmake")
    need("gcc")
    out = models["root"] / name
    write_tree(compile_draft_path(models["target"], options(models, **extra)).tree, out)
    build(out)
    return out


@pytest.fixture(scope="module")
def tree(models):
    return built_tree(models, "host-tree")


@pytest.fixture(scope="module")
def topk_tree(models):
    return built_tree(models, "host-tree-topk", sampler="topk:8")


@pytest.mark.parametrize("max_new", [20, 60])  # the token limit; the context's end (20 prompt tokens + 60 > 64)
def test_the_tree_drafts_with_its_draft_model_as_the_reference_does(models, tree, max_new):
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    got = run_firmware(tree, ids, max_new, SamplingOptions(), timeout_s=BACKSTOP_S).output
    spec, plain = draft_reference(models["target"], models["draft"], ids, max_new, SEQ, K)
    assert got.generated_ids == spec.generated_ids == plain.generated_ids and got.generated_ids
    assert got.pass_tokens == spec.pass_tokens
    assert spec.accepted > 0 and max(got.pass_tokens) == K + 1  # the draft's guesses were kept, not only tried
    assert got.canary_ok is True and got.canary_regions["draft"] is True  # its arenas are guarded too


def test_the_tree_is_deterministic_and_holds_the_draft_in_draft(models, tree):
    again = compile_draft_path(models["target"], options(models)).tree.files
    on_disk = {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*")
               if p.is_file() and "build" not in p.relative_to(tree).parts}
    assert on_disk == dict(again)
    assert {"draft/src/tllm_model.c", "draft/src/tllm_model.h", "draft/src/tllm_vocab.c", "draft/src/tllm_weights.S",
            "draft/weights.bin", "draft/manifest.json", "draft/tllm_draft_table.c"} <= set(again)
    assert not any(k.startswith(("draft/runtime/", "draft/board/", "draft/tokenizer/")) for k in again)
    manifest = json.loads(again["manifest.json"])
    d = manifest["draft"]
    assert (d["source"], d["k"], d["dir"]) == (str(models["draft"]), K, "draft")
    assert d["weights_bytes"] == len(again["draft/weights.bin"]) and d["weights_offset"] == 0  # linked in: its own
    assert d["ram_bytes"] > d["kv_cache_bytes"] > 0
    assert manifest["options"]["speculate"] == f"draft:{models['draft']}:{K}"
    assert json.loads(again["report.json"])["draft"] == d
    draft_manifest = json.loads(again["draft/manifest.json"])
    assert set(draft_manifest["files"]) == {k[len("draft/"):] for k in again if k.startswith("draft/")} - {
        "manifest.json", "tllm_draft_table.c"}


# (sampler, temperature, top_p): the full sampler with and without a nucleus, top-K with and without one
SAMPLED = [("full", 0.9, 1.0), ("full", 1.2, 0.9), ("topk:8", 1.0, 1.0), ("topk:8", 1.4, 0.8)]


@pytest.mark.parametrize("sampler,temperature,top_p", SAMPLED)
def test_sampled_requests_draft_as_the_reference_does(models, tree, topk_tree, sampler, temperature, top_p):
    """Seed by seed, the tree's tokens and every pass's token count are the reference's: the draft's coins and
    q, the acceptance test and the residual draw after a rejection, bit for bit."""
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    out = tree if sampler == "full" else topk_tree
    guessed = accepted = 0
    for seed in (3, 99, 2024):
        sampling = SamplingOptions(temperature, top_p, seed)
        got = run_firmware(out, ids, 16, sampling, timeout_s=BACKSTOP_S).output
        spec, _ = draft_reference(models["target"], models["draft"], ids, 16, SEQ, K, sampling=sampling,
                                  top_k=top_k_of(sampler))
        assert got.generated_ids == spec.generated_ids and got.pass_tokens == spec.pass_tokens, seed
        guessed, accepted = guessed + spec.guessed, accepted + spec.accepted
    assert guessed > accepted > 0  # guesses kept and rejected
    draft_manifest = json.loads((out / "draft" / "manifest.json").read_text())
    assert draft_manifest["options"]["sampler"] == sampler  # the draft samples as the target
    # a top-K draft keeps its q per guess (K candidates each, in its plan); a full one computes it again
    kept = "tllm_draft_guess_values" in (out / "draft" / "tllm_draft_table.c").read_text()
    assert kept == (sampler != "full")
    report = (out / "draft" / "memory_report.txt").read_text()
    assert (f"guess_q.value (float[{K * top_k_of(sampler)}]" in report) == kept  # counted by its plan


def test_run_refuses_a_sampled_request_to_a_greedy_only_draft(models, tree):
    """A tree compiled before the draft got the target's sampler (its draft greedy-only): refused in one line."""
    old = models["root"] / "old-tree"
    shutil.copytree(tree, old)
    manifest = json.loads((old / "draft" / "manifest.json").read_text())
    manifest["options"]["sampler"] = "greedy"
    (old / "draft" / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = cli(["run", str(old), "--prompt", PROMPT, "--temperature", "0.8", "--max-new-tokens", "5"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "greedy requests only" in err, err


BAD_DRAFTS = {  # name -> (how to make it from the target, the words its refusal must hold)
    "missing": (lambda root, target: root / "no-such-draft", "does not exist"),
    "shorter-context": (lambda root, target: random_draft(root / "short", context=32), "--max-seq 32"),
    "other-vocabulary": (lambda root, target: renamed_token_draft(target, root / "renamed"), "vocabular"),
}


@pytest.mark.parametrize("bad", sorted(BAD_DRAFTS))
def test_a_bad_draft_is_refused_in_one_line_and_nothing_is_written(models, bad):
    make, words = BAD_DRAFTS[bad]
    where = models["root"] / f"bad-{bad}"
    where.mkdir()
    draft = make(where, models["target"])
    out = models["root"] / f"out-{bad}"
    code, _, err = cli(["compile", str(models["target"]), "-o", str(out), "--board", "host", "--max-seq", str(SEQ),
                        "--speculate", f"draft:{draft}:2"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_draft_tree_keeps_the_targets_default_symbols(models):
    out = models["root"] / "out-prefixed"
    code, _, err = cli(["compile", str(models["target"]), "-o", str(out), "--board", "host", "--max-seq", str(SEQ),
                        "--symbol-prefix", "tllm_other_", "--speculate", f"draft:{models['draft']}"])
    assert code == 2 and "drop --symbol-prefix" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_draft_over_the_ram_budget_is_refused_naming_the_bytes(models):
    """The target fits the budget alone; beside the draft's arena it does not (weights read in place: pins
    would take whatever SRAM is left)."""
    from tinyllm_gen.compile import compile_path

    alone = compile_path(models["target"], CompileOptions(board="qemu-mps2-an500", max_seq=SEQ, stream="off",
                                                          speculate=f"lookup:{K}")).plan.total_bytes
    out = models["root"] / "out-over"
    budget = -(-alone // 1024) + 1  # KiB: room for the target alone, not for the draft's 4 KiB beside it
    code, _, err = cli(["compile", str(models["target"]), "-o", str(out), "--max-seq", str(SEQ),
                        "--ram-budget", f"{budget}K", "--stream", "off", "--speculate", f"draft:{models['draft']}:{K}"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "more than the" in err and "--max-seq" in err and "no draft" in err and not out.exists()


def test_plan_and_report_say_what_the_draft_costs(models, tree):
    """plan's figures are the compiled tree's, and both say them in a line."""
    code, out, _ = cli(["plan", str(models["target"]), "--board", "host", "--max-seq", str(SEQ), "--json",
                        "--speculate", f"draft:{models['draft']}:{K}"])
    assert code == 0
    planned = json.loads(out)["draft"]
    built = json.loads((tree / "manifest.json").read_text())["draft"]
    same = ("k", "max_seq", "ram_bytes", "kv_cache_bytes", "weights_bytes", "weights_offset", "budget_bytes")
    assert {k: planned[k] for k in same} == {k: built[k] for k in same}
    assert json.loads(out)["total_sram_bytes"] + planned["ram_bytes"] <= planned["budget_bytes"]
    code, out, _ = cli(["report", str(tree)])
    line = next(line for line in out.splitlines() if line.startswith("draft model"))
    assert f"RAM {built['ram_bytes']:,} B" in line and f"weights {built['weights_bytes']:,} B" in line
    code, _, err = cli(["plan", str(models["target"]), "--max-seq", str(SEQ), "--ram-budget", "18K", "--stream", "off",
                        "--speculate", f"draft:{models['draft']}:{K}"])
    assert code == 2 and "B more than the 18,432 B budget" in err and len(err.strip().splitlines()) == 1


def test_an_auto_context_tree_builds_and_drafts_at_the_context_it_chose(models):
    """--max-seq auto with a draft model (compile_draft.fit_pair): the largest context at which both fit the
    budget (weights read in place); the tree's own build runs into that context's end with the reference's
    tokens and passes at it."""
    budget = 17000  # B: the pair fits at 53 of the 64 trained positions
    opts = CompileOptions(board="host", max_seq="auto", ram_budget=budget, stream="off",
                          speculate=f"draft:{models['draft']}:{K}")
    compiled = compile_draft_path(models["target"], opts)
    seq = compiled.plan.max_seq
    assert 8 < seq < 64 and compiled.draft["max_seq"] == seq and "--max-seq auto" in compiled.draft["context"]
    out = models["root"] / "auto-tree"
    write_tree(compiled.tree, out)
    report = json.loads((out / "report.json").read_text())
    assert report["draft"] == compiled.draft and report["speculate"]["predicted"] == compiled.draft["predicted"]
    code, text, _ = cli(["report", str(out)])
    assert code == 0 and "predicted decode with the draft model" in text and "--max-seq auto with the draft" in text
    build(out)
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    got = run_firmware(out, ids, 64, SamplingOptions(), timeout_s=BACKSTOP_S).output
    spec, plain = draft_reference(models["target"], models["draft"], ids, 64, seq, K)
    assert got.generated_ids == spec.generated_ids == plain.generated_ids
    assert got.stop_reason == "context" and len(ids) + len(got.generated_ids) == seq
    assert got.pass_tokens == spec.pass_tokens


@pytest.mark.parametrize("policy", ["roll", "roll:2"])
def test_a_rolling_draft_tree_shifts_the_drafts_cache_as_the_reference(models, policy):
    """--context-policy with a draft model: the draft is built with the target's roll, and each context
    shift moves its cache too (tllm_draft_model_shift, DraftModel.shift); past several shifts the tokens
    are plain decoding's and every pass's token count is the reference's.  (That the shift saves the
    draft's steps is counted in tests/host/test_draft_engine_host.py: a draft stepping again from the
    sinks after each shift guesses the same here.)"""
    out = models["root"] / f"rolling-{policy.replace(':', '')}"
    write_tree(compile_draft_path(models["target"], options(models, context_policy=policy)).tree, out)
    build(out)
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    max_new = 3 * SEQ
    got = run_firmware(out, ids, max_new, SamplingOptions(), timeout_s=BACKSTOP_S).output
    spec, plain = draft_reference(models["target"], models["draft"], ids, max_new, SEQ, K, context_policy=policy)
    assert got.generated_ids == spec.generated_ids == plain.generated_ids
    assert len(got.generated_ids) == max_new and got.shifts >= 2  # the generation ran through several shifts
    assert got.pass_tokens == spec.pass_tokens and max(got.pass_tokens) == K + 1


def test_a_draft_that_does_not_fit_alone_is_refused_as_the_drafts(models):
    """The draft is planned first, in the whole budget: its own refusal says it is the draft's and, with the
    full sampler, what the vocabulary-sized buffers take and the top-K alternative."""
    code, _, err = cli(["plan", str(models["target"]), "--max-seq", str(SEQ), "--ram-budget", "4K", "--stream", "off",
                        "--speculate", f"draft:{models['draft']}:{K}"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"the draft model alone does not fit at {SEQ} tokens: memory plan needs" in err and "--sampler topk:K" in err


def test_run_check_compares_a_sampled_request_with_the_reference_drafting_with_the_trees_draft(models, tree):
    """run --check rebuilds the draft from OUT/draft/ as the target from OUT: a sampled request's tokens are
    those of the reference drafting with it (the lookup reference's differ)."""
    args = ["run", str(tree), "--prompt", PROMPT, "--temperature", "1.2", "--top-p", "0.9", "--seed", "3",
            "--max-new-tokens", "16", "--check"]
    code, out, err = cli(args)
    assert code == 0 and "differs" not in out + err, out + err


PRUNED_PROMPT = "Once upon a time there was a little dog. The"  # "dog" is not in the student's domain text
PRUNED_IDS = 270  # of the target's 300


@pytest.fixture(scope="module")
def pruned(models):
    """The target's vocabulary-pruned student and its tree's host build."""
    need("cmake")
    need("gcc")
    draft, _ = vocab_pruned_student(models["target"], models["root"] / "pruned", PRUNED_IDS)
    out = models["root"] / "pruned-tree"
    opts = CompileOptions(board="host", max_seq=SEQ, speculate=f"draft:{draft}:{K}")
    write_tree(compile_draft_path(models["target"], opts).tree, out)
    build(out)
    m = load_model(models["target"])
    return {"draft": draft, "tree": out, "vocab": load_draft(draft, m, models["target"], opts, SEQ).vocab}


def test_the_pruned_students_tree_holds_its_id_tables_and_counts_their_bytes(models, tree, pruned):
    table = (pruned["tree"] / "draft" / "tllm_draft_table.c").read_text()
    tables = tree_id_tables(table, PRUNED_IDS)  # what run --check reads back: the C's own arrays
    to_draft, to_target = list(tables.to_draft), list(tables.to_target)
    assert to_draft == list(pruned["vocab"].to_draft) and to_target == list(pruned["vocab"].to_target)
    assert (len(to_draft), len(to_target)) == (300, PRUNED_IDS)
    assert "TO_DRAFT, TO_TARGET, 300u,\n};" in table
    d = json.loads((pruned["tree"] / "manifest.json").read_text())["draft"]
    assert d["id_table_bytes"] == 2 * (300 + PRUNED_IDS)
    code, out, _ = cli(["report", str(pruned["tree"])])
    line = next(line for line in out.splitlines() if line.startswith("draft model"))
    assert f"id tables {2 * (300 + PRUNED_IDS):,} B" in line
    shared = json.loads((tree / "manifest.json").read_text())["draft"]
    assert shared["id_table_bytes"] == 0  # the target's own vocabulary: no tables


@pytest.mark.parametrize("max_new", [20, 60])  # the token limit; the context's end
def test_a_vocabulary_pruned_student_drafts_through_its_id_tables_as_the_reference_does(models, pruned, max_new):
    ids = load_model(models["target"]).tokenizer.encode(PRUNED_PROMPT)
    got = run_firmware(pruned["tree"], ids, max_new, SamplingOptions(), timeout_s=BACKSTOP_S).output
    spec, plain = draft_reference(models["target"], pruned["draft"], ids, max_new, SEQ, K)
    assert got.generated_ids == spec.generated_ids == plain.generated_ids and got.generated_ids
    assert got.pass_tokens == spec.pass_tokens
    assert spec.accepted > 0 and max(got.pass_tokens) > 1  # guesses mapped back to target ids were kept
    v = pruned["vocab"]
    lacked = [t for t in ids + got.generated_ids if v.to_target[v.to_draft[t]] != t]
    assert lacked  # the draft read target tokens it lacks (as their first character's token)
    assert got.canary_ok is True and got.canary_regions["draft"] is True


@pytest.mark.parametrize("seed", [1, 7, 12345])
def test_a_pruned_drafts_sampled_requests_are_the_references(models, pruned, seed):
    """Sampled with a vocabulary-pruned student: its q is asked by target id through the tree's id tables (0
    for a token it lacks: tllm_dist_at, DraftModel._q's spread), so tokens and passes are the reference's for
    the seed, through kept and rejected guesses; `run --check` agrees."""
    ids = load_model(models["target"]).tokenizer.encode(PRUNED_PROMPT)
    sampling = SamplingOptions(1.1, 0.9, seed)
    got = run_firmware(pruned["tree"], ids, 24, sampling, timeout_s=BACKSTOP_S).output
    spec, _ = draft_reference(models["target"], pruned["draft"], ids, 24, SEQ, K, sampling=sampling)
    assert got.generated_ids == spec.generated_ids and got.pass_tokens == spec.pass_tokens
    assert spec.guessed > spec.accepted > 0  # kept and rejected guesses: the residual draw ran
    code, out, err = cli(["run", str(pruned["tree"]), "--prompt", PRUNED_PROMPT, "--temperature", "1.1",
                          "--top-p", "0.9", "--seed", str(seed), "--max-new-tokens", "24", "--check"])
    assert code == 0 and "differs" not in out + err, out + err
