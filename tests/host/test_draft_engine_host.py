"""The engine drafting with a draft model on a host build (tllm_config.draft,
firmware/tllm_draft.h): a tiny target compiled with --speculate lookup:3 and
its one-block student compiled with the target's sampler and --symbol-prefix
tllm_draft_ (tests/drafts.py) link into one program
(tests/c/speculate/draft_engine.c).  A greedy generation's tokens are plain
decoding's and every pass's token count is the reference's with the same
draft (reference/draft.py), also past the context's end and through a
rolling context's shifts (the draft's steps counted too); sampled
generations (temperature, top-p, top-K, several seeds) are the reference's
token for token and pass for pass, through accepted and rejected guesses;
without the draft the same build drafts by prompt lookup, as its reference
does; through identity id tables (tllm_draft_model's to_draft / to_target)
it drafts exactly as without them, through swapped ones as the reference
with the same maps, and tables made for another pair are refused at init; a
sampled request to a greedy-only draft and a draft with another sampler are
refused."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

import pytest

from c_program import build_program, write_trees
from drafts import target_and_student
from firmware_harness import need
from tinyllm_gen.compile import CompileOptions, load_draft, quantize
from tinyllm_gen.frontends import load_model
from tinyllm_gen.frontends.vocab_map import VocabMap
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions, top_k_of
from tinyllm_gen.reference.speculative import generate_speculative

pytestmark = pytest.mark.host
pytest.importorskip("torch")

DRIVER = Path(__file__).resolve().parents[1] / "c" / "speculate" / "draft_engine.c"
PROMPT = "Once upon a time there was a little cat. The"
SEQ, K = 64, 3


def target_options(sampler: str) -> CompileOptions:
    return CompileOptions(board="host", sampler=sampler, max_seq=SEQ, prefill_batch=4, speculate=f"lookup:{K}")


def draft_options(sampler: str) -> CompileOptions:
    return CompileOptions(board="host", sampler=sampler, max_seq=SEQ, symbol_prefix="tllm_draft_")


TARGET, DRAFT = target_options("full"), draft_options("full")  # the draft samples as the target: compile_draft's


def build(root: Path, target_opts: CompileOptions, draft_opts: CompileOptions, name: str, models) -> Path:
    outs = write_trees(root, {f"{name}-target": (models["target"], target_opts),
                              f"{name}-draft": (models["draft"], draft_opts)})
    outs = {"target": outs[f"{name}-target"], "draft": outs[f"{name}-draft"]}
    return build_program(root / f"{name}-proj", "draft_engine", DRIVER, outs)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    need("cmake")
    need("gcc")
    root = tmp_path_factory.mktemp("draft-engine")
    target, draft = target_and_student(root)
    m = {"root": root, "target": target, "draft": draft}
    m["exe"] = build(root, TARGET, DRAFT, "ok", m)
    return m


def run(exe: Path, ids: list[int], max_new: int, use_draft, sampling: SamplingOptions = SamplingOptions()) -> dict:
    """use_draft: False (prompt lookup), True (the draft), or the driver's mode 2 .. 5 (id tables)."""
    mode = use_draft if isinstance(use_draft, str) else str(int(use_draft))
    r = subprocess.run([str(exe), str(max_new), mode, repr(sampling.temperature),
                        repr(sampling.top_p), str(sampling.seed), *map(str, ids)],
                       check=True, capture_output=True, text=True, timeout=300)
    return {k.strip(): v.split() for k, v in (line.split(":", 1) for line in r.stdout.splitlines())}


def reference(models, ids: list[int], max_new: int, use_draft: bool, sampling: SamplingOptions = SamplingOptions(),
              target: CompileOptions = TARGET, vocab: VocabMap | None = None):
    """The speculative reference (with the draft when use_draft; its ids mapped by `vocab` when given)."""
    m = load_model(models["target"])
    ex = Executor(m.graph, QuantKernels(quantize(m, target), SEQ))
    draft = load_draft(models["draft"], m, models["target"], target, SEQ) if use_draft else None
    if vocab is not None:
        draft.vocab = vocab
    return generate_speculative(ex, ids, max_new, SEQ, m.graph.config.eos_ids, sampling, top_k_of(target.sampler),
                                k=K, draft=draft)


@pytest.mark.parametrize("max_new", [20, 60])  # the token limit; the context's end (20 prompt tokens + 60 > 64)
def test_the_engine_drafts_with_the_draft_model_as_the_reference_does(models, max_new):
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    for use_draft in (False, True):  # the draft last: its tokens are checked against plain decoding below
        got, want = run(models["exe"], ids, max_new, use_draft), reference(models, ids, max_new, use_draft)
        assert [int(t) for t in got["tokens"]] == want.generated_ids, use_draft
        assert [int(p) for p in got["passes"]] == want.pass_tokens, use_draft
        if use_draft:
            assert want.accepted > 0  # the draft's guesses were kept, not only tried
    m = load_model(models["target"])
    plain = generate(Executor(m.graph, QuantKernels(quantize(m, TARGET), SEQ)), ids, max_new, SEQ,
                     m.graph.config.eos_ids, SamplingOptions())
    assert [int(t) for t in got["tokens"]] == plain.generated_ids and got["tokens"]


# (sampler, temperature, top_p): the full sampler with and without a nucleus, top-K with and without one
SAMPLED = [("full", 0.8, 1.0), ("full", 1.3, 0.9), ("topk:8", 1.0, 1.0), ("topk:8", 1.5, 0.85)]
SEEDS = (1, 7, 12345)


@pytest.fixture(scope="module")
def topk_exe(models):
    return build(models["root"], target_options("topk:8"), draft_options("topk:8"), "topk", models)


@pytest.mark.parametrize("sampler,temperature,top_p", SAMPLED)
def test_sampled_requests_draft_as_the_reference_does(models, topk_exe, sampler, temperature, top_p):
    """Tokens and passes bit for bit, seed by seed: the draft's coins, its q at each guess, the acceptance test
    and (after a rejection) the residual draw from the draft's q computed again."""
    exe = models["exe"] if sampler == "full" else topk_exe
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    guessed = accepted = 0
    for seed in SEEDS:
        sampling = SamplingOptions(temperature, top_p, seed)
        got, want = run(exe, ids, 24, True, sampling), reference(models, ids, 24, True, sampling,
                                                                 target_options(sampler))
        assert [int(t) for t in got["tokens"]] == want.generated_ids, seed
        assert [int(p) for p in got["passes"]] == want.pass_tokens, seed
        guessed, accepted = guessed + want.guessed, accepted + want.accepted
    assert guessed > accepted > 0  # guesses were kept and rejected (the residual draw ran)


def test_a_sampled_request_to_a_greedy_only_draft_is_refused(models):
    exe = build(models["root"], TARGET, draft_options("greedy"), "greedy-draft", models)
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    got = run(exe, ids, 5, True, SamplingOptions(0.8, 1.0, 1))
    assert got["status"][0] == "-7" and "greedy requests only" in " ".join(got["status"])
    assert "tokens" in run(exe, ids, 5, False, SamplingOptions(0.8, 1.0, 1))  # the lookup draft samples
    assert [int(t) for t in run(exe, ids, 20, True)["tokens"]] == reference(models, ids, 20, True).generated_ids


def test_a_draft_with_another_sampler_is_refused_at_init(models):
    exe = build(models["root"], TARGET, draft_options("topk:8"), "topk-draft", models)
    got = run(exe, [0, 5], 3, True)
    assert got["status"][0] == "-1" and "the target's --sampler" in " ".join(got["status"])


def test_a_rolling_context_shifts_the_drafts_cache_and_counts_its_steps_as_the_reference(models):
    """--context-policy roll on both models: at every context shift the engine moves the draft's cache
    with the target's (tllm_draft_model_shift, DraftModel.shift), so through several shifts the tokens,
    every pass's token count and the draft's steps (counted through its table) are the reference's; a
    draft left to step again from the sinks after each shift takes about a context's worth more."""
    import dataclasses

    from tinyllm_gen.context import context_roll

    target, draft = (dataclasses.replace(o, context_policy="roll") for o in (TARGET, DRAFT))
    exe = build(models["root"], target, draft, "roll", models)
    m = load_model(models["target"])
    ids, max_new = m.tokenizer.encode(PROMPT), 3 * SEQ
    ex = Executor(m.graph, QuantKernels(quantize(m, target), SEQ))
    d = load_draft(models["draft"], m, models["target"], target, SEQ)
    want = generate_speculative(ex, ids, max_new, SEQ, m.graph.config.eos_ids, SamplingOptions(), 0, k=K, draft=d,
                                roll=context_roll("roll", SEQ))
    got = run(exe, ids, max_new, True)
    assert want.shifts >= 2 and len(want.generated_ids) == max_new  # several shifts, no EOS before them
    assert [int(t) for t in got["tokens"]] == want.generated_ids
    assert [int(p) for p in got["passes"]] == want.pass_tokens
    assert int(got["draft_steps"][0]) == want.draft_steps


def test_id_tables_are_followed_and_spoilt_ones_refused_at_init(models):
    """The engine maps the draft's ids through its tables: identity tables over the shared vocabulary draft as
    no tables do (the pruned student's real tables: tests/host/test_speculate_draft_tree_host.py); tables made
    for another target, or with an id past the draft's vocabulary, are refused by tllm_init."""
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    plain, tabled = run(models["exe"], ids, 30, 1), run(models["exe"], ids, 30, 2)
    assert tabled == plain and "tokens" in plain
    got = run(models["exe"], ids, 3, 3)
    assert got["status"][0] == "-1" and "id tables do not map" in " ".join(got["status"])
    got = run(models["exe"], ids, 3, 4)
    assert got["status"][0] == "-1" and "id tables do not map" in " ".join(got["status"])


def accepted_guesses(result) -> list[int]:
    """The generated tokens that were guesses kept by their pass (all of a pass's tokens but its last)."""
    out, i = [], 0
    for p in result.pass_tokens:
        out += result.generated_ids[i:i + p - 1]
        i += p
    return out


def swapped(n: int, a: int, b: int) -> list[int]:
    t = list(range(n))
    t[a], t[b] = b, a
    return t


def test_the_engine_maps_guesses_and_fed_ids_through_the_tables(models):
    """Tables that are not the identity, checked against the reference with the same maps, one direction at
    a time: to_target swaps the draft's most often kept guess with the next id (its guesses of it come back
    as another token), to_draft the generation's most frequent token with the next id (the draft is fed
    another token wherever it occurs).  The passes are the reference's with these maps, and differ from the
    passes without them (the swap mattered); the tokens stay plain decoding's, whatever the draft guesses."""
    ids = load_model(models["target"]).tokenizer.encode(PROMPT)
    plain = reference(models, ids, 40, True)
    n = load_model(models["draft"]).graph.config.vocab_size
    kept, context = accepted_guesses(plain), ids + plain.generated_ids
    a = max(sorted(set(kept)), key=kept.count)
    c = max(sorted(set(context)), key=context.count)
    for mode, to_draft, to_target in ((f"5:{a}:{(a + 1) % n}:0:0", list(range(n)), swapped(n, a, (a + 1) % n)),
                                      (f"5:0:0:{c}:{(c + 1) % n}", swapped(n, c, (c + 1) % n), list(range(n)))):
        vocab = VocabMap(np.array(to_draft), np.array(to_target), False)
        got, want = run(models["exe"], ids, 40, mode), reference(models, ids, 40, True, vocab=vocab)
        assert [int(t) for t in got["tokens"]] == want.generated_ids == plain.generated_ids, mode
        assert [int(p) for p in got["passes"]] == want.pass_tokens != plain.pass_tokens, mode
