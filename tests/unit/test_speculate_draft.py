"""Speculative decoding with a draft model in the reference
(reference/draft.py, `reference --speculate draft:MODEL[:k]`), on tiny
random models built here (tests/drafts.py): greedy tokens are plain
decoding's for every kind of draft, int8 and int4 KV, at the token limit,
across the end of the context and with a rolling context; the draft's ids
map onto the target's (a vocabulary-pruned student's through its kept
ids); drafts that match neither way are refused in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyllm_gen.compile import CompileOptions, load_draft, quantize
from tinyllm_gen.context import ContextRoll
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.lower.speculate import parse_draft, parse_speculate
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.reference.speculative import generate_speculative

from drafts import (make_target, random_draft, renamed_token_draft, shallow_student,
                    vocab_pruned_student)

pytest.importorskip("torch")

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
PROMPT = "Once upon a time there was a little cat. The"
SEQ = 48  # 64 trained positions; 48 puts the context's end within reach of a short generation


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("drafts")
    target = make_target(root)
    pruned, plan = vocab_pruned_student(target, root / "pruned", 280)
    return {"target": target, "self": target, "shallow": shallow_student(target, root / "shallow"),
            "random": random_draft(root), "pruned": pruned, "plan": plan, "root": root}


@pytest.fixture(scope="module")
def target(models):
    m = load_model(models["target"])
    return m, {bits: quantize(m, CompileOptions(kv_bits=bits)) for bits in (8, 4)}


def run(models, target, draft: str, kv_bits: int, k: int, n_new: int, sampling=SamplingOptions(), roll=None,
        top_k: int = 0):
    m, qgs = target
    opts = CompileOptions(kv_bits=kv_bits)
    ex = Executor(m.graph, QuantKernels(qgs[kv_bits], SEQ))
    d = load_draft(models[draft], m, models["target"], opts, SEQ) if draft else None
    ids = m.tokenizer.encode(PROMPT)
    return generate_speculative(ex, ids, n_new, SEQ, m.graph.config.eos_ids, sampling, top_k=top_k,
                                k=k if d else 0, roll=roll, draft=d)


@pytest.mark.parametrize("draft", ["self", "shallow", "random", "pruned"])
@pytest.mark.parametrize("kv_bits", [8, 4])
def test_greedy_with_a_draft_model_is_plain_decoding(models, target, draft, kv_bits):
    """Up to the token limit and past the context's end (stop): the tokens and the stop reason of plain decoding."""
    for n_new in (20, 100):
        plain = run(models, target, "", kv_bits, 0, n_new)
        for k in (1, 3):
            spec = run(models, target, draft, kv_bits, k, n_new)
            assert (spec.generated_ids, spec.stop_reason) == (plain.generated_ids, plain.stop_reason), (draft, k)
            assert spec.guessed > 0 and spec.draft_steps >= spec.guessed
    assert plain.stop_reason == "context"


def test_greedy_with_a_draft_model_through_context_shifts(models, target):
    roll = ContextRoll(4, (SEQ - 4) // 2)
    plain = run(models, target, "", 8, 0, 90, roll=roll)
    for draft in ("shallow", "pruned"):
        spec = run(models, target, draft, 8, 3, 90, roll=roll)
        assert spec.generated_ids == plain.generated_ids and spec.shifts >= 2, draft


def test_the_drafts_guess_as_expected(models, target):
    """The target as its own draft has every greedy guess kept; the unrelated random model few of them;
    the depth-pruned student lies between (it shares the target's embedding, first block and head)."""
    rate = {}
    for draft in ("self", "shallow", "random"):
        g = run(models, target, draft, 8, 3, 40)
        rate[draft] = g.accepted / g.guessed
    assert rate["self"] == 1.0
    assert rate["random"] < rate["shallow"] < 1.0, rate


def test_sampled_draft_guesses_are_accepted_and_rejected(models, target):
    """With a temperature both branches of the acceptance rule occur, and the same seed gives the same tokens."""
    s = SamplingOptions(1.0, 0.9, 7)
    totals = np.zeros(2, int)
    for seed in range(1, 5):
        g = run(models, target, "shallow", 8, 3, 30, SamplingOptions(1.0, 0.9, seed))
        totals += (g.accepted, g.guessed - g.accepted)
    assert totals.min() > 0, totals
    assert run(models, target, "shallow", 8, 3, 30, s).generated_ids == \
        run(models, target, "shallow", 8, 3, 30, s).generated_ids


def test_a_vocabulary_pruned_student_maps_through_its_kept_ids(models, target):
    """Its ids are the kept ones; fed kept tokens it computes the target's logits on them, bit for bit (the
    same weights, rows sliced), so through the map the draft reads the target's context as the target does."""
    m, qgs = target
    d = load_draft(models["pruned"], m, models["target"], CompileOptions(), SEQ)
    kept = np.asarray(models["plan"].kept)
    assert not d.vocab.shared and list(d.vocab.to_target) == list(kept)
    back = d.vocab.to_draft
    assert all(back[t] == i for i, t in enumerate(kept))  # a kept token is read as itself
    lost = sorted(set(range(m.graph.config.vocab_size)) - set(kept))
    assert lost and all(d.vocab.to_target[back[t]] != t for t in lost)  # one the student lacks: its first byte
    ex = Executor(m.graph, QuantKernels(qgs[8], SEQ))
    for pos, tok in enumerate(kept[[0, 40, 7, 265, 99, 3]]):
        want = ex.step(int(tok), pos)[kept]
        got = d._step(int(tok), pos, True)
        assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), pos


def test_the_shared_vocabulary_is_the_identity(models, target):
    m, _ = target
    d = load_draft(models["shallow"], m, models["target"], CompileOptions(), SEQ)
    assert d.vocab.shared and list(d.vocab.to_target) == list(range(m.graph.config.vocab_size))


def test_drafts_that_do_not_fit_are_refused_in_one_line(models, target, tmp_path):
    m, _ = target
    bad = renamed_token_draft(models["target"], tmp_path / "renamed")
    for draft, words in [(STORY, ["512 ids", "300 ids", "is not one of the target's"]),
                         (bad, ["'zzzz-not-a-token' is not one of the target's"])]:
        with pytest.raises(UserError) as e:
            load_draft(draft, m, models["target"], CompileOptions(), SEQ)
        text = str(e.value)
        assert "\n" not in text and str(draft) in text and str(models["target"]) in text, text
        assert all(w in text for w in words), text
    with pytest.raises(UserError, match="trained for 64 positions but .* runs 96: use --max-seq 64"):
        load_draft(models["shallow"], m, models["target"], CompileOptions(), 96)


def test_the_cli_refuses_a_mismatched_draft_with_exit_2(models):
    for draft in (STORY, models["target"].parent / "nothing-here"):  # another vocabulary; no model at all
        r = subprocess.run([sys.executable, "-m", "tinyllm_gen", "reference", str(models["target"]), "--prompt", "The",
                            "--max-seq", str(SEQ), "--speculate", f"draft:{draft}:2"], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert str(draft) in r.stderr


def test_the_cli_runs_a_draft_model_greedily_as_plain(models):
    out = []
    for spec in ("off", f"draft:{models['pruned']}:3"):
        r = subprocess.run([sys.executable, "-m", "tinyllm_gen", "reference", str(models["target"]), "--prompt", PROMPT,
                            "--max-seq", str(SEQ), "--max-new-tokens", "24", "--speculate", spec, "--json"],
                           capture_output=True, text=True, check=True)
        out.append(json.loads(r.stdout))
    assert out[0]["generated_ids"] == out[1]["generated_ids"]
    assert out[1]["passes"] < out[0]["passes"] and out[1]["draft_steps"] > 0


def test_parse_draft():
    assert parse_draft("draft:models/s") == ("models/s", 3)
    assert parse_draft("draft:models/s:2") == ("models/s", 2)
    assert parse_draft("draft:C:/x:y") == ("C:/x:y", 3)  # a colon inside the path, no k
    assert parse_draft("lookup:2") is None
    with pytest.raises(UserError, match="k must be 1..3"):
        parse_draft("draft:m:4")
    with pytest.raises(UserError, match="name the draft model"):
        parse_draft("draft:")
    assert parse_speculate("draft:student:2") == ("draft", 2)  # compile_draft.py builds it into the firmware
