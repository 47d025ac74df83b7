"""What the timing model decides for `plan/compile TARGET --speculate
draft:DRAFT[:k]` (compile_draft.fit_pair, fit/search.speculation_ks), on a
tiny random target and its one-block student (tests/drafts.py), without
building anything:

* the acceptance measured at compile time (reference/draft_acceptance.py)
  is the speculative reference's own: its passes, positions and draft steps;
* without a k the timing model picks it: the most guesses for a draft that
  is always right, one for a draft that is never right; given, it is kept;
* --max-seq auto with a draft model: the largest context at which both fit
  (the next one does not), the same in plan and compile, and a one-line
  refusal where not even the smallest context fits."""
from __future__ import annotations

import json

import pytest

from tinyllm_gen import compile_draft
from tinyllm_gen.compile import CompileOptions, check_draft, load_draft
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.draft_acceptance import draft_guesses, draft_passes
from tinyllm_gen.reference.executor import Executor, FloatKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.timing import Acceptance

from cli_inprocess import cli
from drafts import target_and_student

pytest.importorskip("torch")

PROMPT = "Once upon a time there was a little cat. The"
BUDGET = 17000  # B: the pair fits at 53 of the 64 trained positions (weights read in place, --stream off)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-plan")
    target, draft = target_and_student(root)
    return {"root": root, "target": target, "draft": draft}


def plan(models, *extra: str, spec: str = "") -> tuple[int, dict | None, str]:
    code, out, err = cli(["plan", str(models["target"]), "--stream", "off", "--json",
                          "--speculate", f"draft:{models['draft']}{spec}", *extra])
    return code, json.loads(out) if code == 0 else None, err


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_measured_passes_are_the_speculative_references(models, k):
    """draft_passes on plain decoding's tokens and the draft's teacher-forced argmaxes gives the passes, the
    positions and the draft's steps (less the prompt's catch-up) that generate_speculative runs, float."""
    m = load_model(models["target"])
    seq, ids = 64, m.tokenizer.encode(PROMPT)
    ex = Executor(m.graph, FloatKernels(m.graph, seq))
    drafter = load_draft(models["draft"], m, models["target"], CompileOptions(), seq, fp32=True)
    spec = generate_speculative(ex, ids, 64, seq, m.graph.config.eos_ids, SamplingOptions(), k=k, draft=drafter)
    assert spec.stop_reason == "context" and spec.accepted > 0  # no EOS: past one the engine may guess on
    tokens = ids + spec.generated_ids
    guesses = draft_guesses(Executor(drafter.executor.graph, FloatKernels(drafter.executor.graph, seq)), tokens,
                            len(ids), drafter.vocab.to_draft)
    got = draft_passes(tokens, guesses, len(ids), k)
    assert got["passes"] == spec.passes and got["tokens"] == len(spec.generated_ids)
    assert {int(key[1:]): n for key, n in got.items() if key.startswith("P")} == {
        p: spec.pass_positions.count(p) for p in set(spec.pass_positions)}
    assert len(ids) + got["draft_steps"] + got["catchup_steps"] == spec.draft_steps


def test_a_draft_that_is_the_target_keeps_every_guess(models):
    m = load_model(models["target"])
    vmap = check_draft(m, models["target"], m, models["target"], 64)
    acc = compile_draft.measure_draft_acceptance(m, m, vmap, None, "itself")
    for k in (1, 2, 3):
        mean_positions = sum(p * f for p, f in acc.positions[k].items())
        assert acc.tokens_per_pass[k] == pytest.approx(mean_positions)  # every verified position kept
        assert acc.catchup_steps[k] > 0  # each pass that kept all guesses steps its last one again
    assert acc.tokens_per_pass[1] < acc.tokens_per_pass[2] < acc.tokens_per_pass[3]


def fixed(tpp: dict) -> Acceptance:
    return Acceptance("fixed", "test", tpp, {k: {k + 1: 1.0} for k in tpp}, {k: float(k) for k in tpp},
                      {k: 0.0 for k in tpp})


@pytest.mark.parametrize("tpp,best", [({1: 2.0, 2: 3.0, 3: 4.0}, 3), ({1: 1.0, 2: 1.0, 3: 1.0}, 1)])
def test_without_a_k_the_timing_model_picks_it(models, monkeypatch, tpp, best):
    """On the DK (the weights over its QUADSPI link, read in place): where compute alone decides (QEMU, the
    portable kernels) a pass over P positions costs P steps and no k pays even for a draft always right."""
    monkeypatch.setattr(compile_draft, "measure_draft_acceptance", lambda *a, **kw: fixed(tpp))
    code, doc, err = plan(models, "--max-seq", "64", "--board", "stm32h750b-dk")
    assert code == 0, err
    d = doc["draft"]
    assert d["k"] == doc["speculate"]["k"] == d["predicted"]["k"] == best
    assert d["choice"].startswith(f"draft:{best}: the timing model")
    p = d["predicted"]
    assert p["tokens_per_pass"] == tpp[best] and p["acceptance"] == "fixed"
    assert p["speedup"] == pytest.approx(p["tokens_per_s"] / p["plain_tokens_per_s"], rel=1e-2)


def test_a_k_given_is_kept_and_priced(models):
    code, doc, err = plan(models, "--max-seq", "64", spec=":2")
    assert code == 0, err
    d = doc["draft"]
    assert d["k"] == d["predicted"]["k"] == 2 and d["choice"] == "draft:2 (asked)"
    assert d["predicted"]["source"].startswith("measured at compile time") and d["predicted"]["tokens_per_s"] > 0


def test_auto_context_is_the_largest_at_which_both_fit(models):
    code, doc, err = plan(models, "--max-seq", "auto", "--ram-budget", str(BUDGET), spec=":1")
    assert code == 0, err
    seq = doc["max_seq"]
    assert doc["draft"]["max_seq"] == seq and 8 < seq < 64 and "--max-seq auto with the draft model" in \
        doc["draft"]["context"]
    assert doc["total_sram_bytes"] + doc["draft"]["ram_bytes"] <= BUDGET
    code, same, err = plan(models, "--max-seq", str(seq), "--ram-budget", str(BUDGET), spec=":1")
    assert code == 0 and same["max_seq"] == seq, err
    code, _, err = plan(models, "--max-seq", str(seq + 1), "--ram-budget", str(BUDGET), spec=":1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "more than the" in err, err
    # compile (the tree in memory) makes the same choice
    opts = CompileOptions(max_seq="auto", ram_budget=BUDGET, stream="off", speculate=f"draft:{models['draft']}:1")
    built = compile_draft.compile_draft_path(models["target"], opts)
    assert built.plan.max_seq == seq and built.draft["max_seq"] == seq
    keys = ("k", "ram_bytes", "kv_cache_bytes", "context", "choice", "predicted")
    assert {k: built.draft[k] for k in keys} == {k: doc["draft"][k] for k in keys}


def test_auto_context_where_nothing_fits_is_refused_in_one_line(models):
    out = models["root"] / "out-nothing"
    for argv in (["plan", str(models["target"])], ["compile", str(models["target"]), "-o", str(out)]):
        code, _, err = cli(argv + ["--stream", "off", "--max-seq", "auto", "--ram-budget", "9000",
                                   "--speculate", f"draft:{models['draft']}"])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "not even 8 tokens fit both models" in err and "no draft" in err and "Traceback" not in err
    assert not out.exists()


def test_a_draft_that_does_not_fit_alone_is_refused_as_the_drafts(models, monkeypatch):
    """With a context given the draft is planned first and refused before its acceptance is measured."""
    def never(*a, **kw):
        raise AssertionError("the acceptance was measured for a draft that does not fit")

    monkeypatch.setattr(compile_draft, "measure_draft_acceptance", never)
    code, _, err = plan(models, "--max-seq", "64", "--ram-budget", "6000")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the draft model alone does not fit at 64 tokens" in err and "Traceback" not in err


def test_draft_is_speculate_draft_and_refused_beside_another_speculate(models):
    """compile/plan --draft MODEL is --speculate draft:MODEL (k by the timing model); with another --speculate
    it is refused in one line, exit 2."""
    code, by_speculate, _ = plan(models, "--max-seq", "64")
    code2, out, err = cli(["plan", str(models["target"]), "--stream", "off", "--json", "--max-seq", "64",
                           "--draft", str(models["draft"])])
    assert code == code2 == 0, err
    assert json.loads(out) == by_speculate
    for command in (["plan"], ["compile", "-o", str(models["root"] / "never")]):
        code, _, err = cli([*command, str(models["target"]), "--max-seq", "64", "--draft", str(models["draft"]),
                            "--speculate", "lookup:2"])
        assert code == 2 and len(err.strip().splitlines()) == 1 and "give one" in err, err
    assert not (models["root"] / "never").exists()


def test_the_reference_picks_the_k_compile_picks(models):
    """reference --speculate draft:MODEL without k runs the k plan/compile choose for the pair on the default
    board (as lookup's k), so its sampled tokens are the default build's."""
    code, out, err = cli(["plan", str(models["target"]), "--max-seq", "64", "--json",
                          "--speculate", f"draft:{models['draft']}"])  # plan's defaults: compile's
    assert code == 0, err
    k = json.loads(out)["draft"]["k"]
    args = ["reference", str(models["target"]), "--max-seq", "64", "--prompt", PROMPT, "--max-new-tokens", "12",
            "--temperature", "0.9", "--seed", "4", "--json"]
    code, chosen, err = cli([*args, "--speculate", f"draft:{models['draft']}"])
    assert code == 0, err
    code, given, err = cli([*args, "--speculate", f"draft:{models['draft']}:{k}"])
    assert code == 0, err
    assert json.loads(chosen) == json.loads(given)
