"""Cached teacher logits (codegen/compress/teacher_cache.py) and distillation from them."""
import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from tinyllm_gen.cli import main  # noqa: E402
from tinyllm_gen.compress.distill import DistillOptions, distill, distill_loss  # noqa: E402
from tinyllm_gen.compress.prune import prune  # noqa: E402
from tinyllm_gen.compress.teacher_cache import ARRAYS, build_teacher_cache, cached_kl  # noqa: E402
from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, make_batch  # noqa: E402
from tinyllm_gen.errors import UserError  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402

from tinymodels import make_hf_model  # noqa: E402

SENTENCES = ["Once upon a time there was a little cat.", "The cat liked to play in the sun.",
             "One day the cat saw a big red ball.", "She was very happy.", "The dog ran to the park.", "The end."]
DOCS = [" ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(1 + i % 3)) for i in range(16)]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("cache") / "teacher", dim=32, hidden=48, layers=2, heads=4,
                         kv_heads=2, vocab=300, context=64, seed=11)


@pytest.fixture(scope="module")
def seqs(teacher_dir):
    return encode_docs(load_model(teacher_dir).tokenizer, DOCS, 64)


def test_cache_holds_the_teachers_top_k_and_the_rest_mass(teacher_dir, seqs, tmp_path):
    teacher = load_torch_model(teacher_dir)
    cache, stats = build_teacher_cache(teacher, seqs, 1, 8, 2.0, tmp_path / "c", batch_size=4, progress=False)
    assert stats.positions == sum(len(s) - 1 for s in seqs) and stats.tokens == sum(len(s) for s in seqs)
    with torch.no_grad():  # the same batch as the cache's second one (padding changes the float sums' blocking)
        logits = teacher(input_ids=make_batch(seqs[:4], 1)[0]).logits[3, :len(seqs[3]) - 1]
    ids, top, lse, rest = cache.batch([3], len(seqs[3]))
    assert torch.equal(ids[0], torch.topk(logits, 8).indices)
    assert torch.equal(top[0], torch.topk(logits, 8).values)
    total = (top[0] / 2.0 - lse[0, :, None]).exp().sum(-1) + rest[0].exp()  # all buckets: probability 1
    assert torch.allclose(total, torch.ones_like(total), atol=1e-5)
    assert (rest[0] < 0).all()


def test_bucketed_kl_is_the_full_kl_when_the_rest_is_one_token(teacher_dir, seqs, tmp_path):
    """With k = vocab - 1 the rest bucket is one token: the cached KL is the full one of distill_loss."""
    teacher = load_torch_model(teacher_dir)
    student = copy.deepcopy(teacher)
    prune(student, seqs[:8], 1, 0.5, 0.5)
    cache, _ = build_teacher_cache(teacher, seqs, 1, 299, 2.0, tmp_path / "c", batch_size=8, progress=False)
    idx = [0, 5, 9, 12]
    ids, labels = make_batch([seqs[i] for i in idx], 1)
    with torch.no_grad():
        s, t = student(input_ids=ids).logits[:, :-1], teacher(input_ids=ids).logits[:, :-1]
    mask = labels[:, 1:] != -100
    full = distill_loss(s, t, labels[:, 1:], 2.0, 1.0)[1]
    assert abs(float(cached_kl(s, cache.batch(idx, ids.shape[1]), mask, 2.0)) - full) < 1e-5 * max(1.0, full)
    small, _ = build_teacher_cache(teacher, seqs, 1, 4, 2.0, tmp_path / "c4", batch_size=8, progress=False)
    assert float(cached_kl(s, small.batch(idx, ids.shape[1]), mask, 2.0)) < full  # coarser buckets: lower bound


def test_a_killed_cache_build_resumes_to_the_same_bytes(teacher_dir, seqs, tmp_path):
    teacher = load_torch_model(teacher_dir)
    whole, _ = build_teacher_cache(teacher, seqs, 1, 8, 2.0, tmp_path / "a", batch_size=4, progress=False)
    part, s1 = build_teacher_cache(teacher, seqs, 1, 8, 2.0, tmp_path / "b", batch_size=4, progress=False,
                                   stop_after=2)  # "killed" after two batches
    assert part is None and json.loads((tmp_path / "b" / "progress.json").read_text())["done"] == 8
    done, s2 = build_teacher_cache(teacher, seqs, 1, 8, 2.0, tmp_path / "b", batch_size=4, progress=False)
    assert s2.resumed_from == 8 and s2.tokens == s1.tokens + sum(len(s) for s in seqs[8:]) == sum(map(len, seqs))
    for a in ARRAYS:
        assert (tmp_path / "a" / f"{a}.npy").read_bytes() == (tmp_path / "b" / f"{a}.npy").read_bytes()
    with pytest.raises(UserError, match="holds the logits of another teacher, text, --teacher-top-k"):
        build_teacher_cache(teacher, seqs, 1, 16, 2.0, tmp_path / "b", batch_size=4, progress=False)
    with pytest.raises(UserError, match=r"--teacher-top-k 300 must be in \[1, 299\]"):
        build_teacher_cache(teacher, seqs, 1, 300, 2.0, tmp_path / "d", progress=False)


def test_distilling_from_the_cache_never_runs_the_teacher_and_resumes_exactly(teacher_dir, seqs, tmp_path):
    teacher = load_torch_model(teacher_dir)
    cache, _ = build_teacher_cache(teacher, seqs, 1, 8, 2.0, tmp_path / "c", batch_size=8, progress=False)
    opts = DistillOptions(steps=4, batch_size=4, checkpoint_every=2, seed=7, threads=1)

    def student():
        s = load_torch_model(teacher_dir)
        prune(s, seqs[:8], 1, 0.5, 0.5)
        return s

    a = student()
    ra = distill(a, None, seqs, 1, opts, tmp_path / "a", progress=False, cache=cache)  # None: no teacher to run
    b = student()
    distill(b, None, seqs, 1, opts, tmp_path / "b", progress=False, stop_after=3, cache=cache)
    b = student()
    rb = distill(b, None, seqs, 1, opts, tmp_path / "b", progress=False, cache=cache)
    assert (rb.resumed_from, rb.steps) == (2, 4) and ra.total_tokens == rb.total_tokens
    sa, sb, s0 = a.state_dict(), b.state_dict(), student().state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"], s0["model.layers.0.mlp.up_proj.weight"])
    # The soft term is the cache's: the same run with a live teacher ends elsewhere.
    c = student()
    distill(c, teacher, seqs, 1, opts, tmp_path / "live", progress=False)
    assert not torch.equal(c.state_dict()["model.layers.0.mlp.up_proj.weight"], sa["model.layers.0.mlp.up_proj.weight"])


NARROW = ["The cat saw a big red ball.", "She was very happy.", "The cat was happy. The end.",
          "One day the cat saw the sun.", "The red ball was big."]


def test_compress_with_vocab_depth_and_cache(tmp_path, capsys):
    teacher = make_hf_model(tmp_path / "teacher", dim=32, hidden=48, layers=2, heads=4, kv_heads=2, vocab=330,
                            context=64, seed=12)  # 72 merges, most unused by the narrow text
    data = tmp_path / "train.txt"
    data.write_text("\n\n".join(NARROW * 4) + "\n")
    out = tmp_path / "student"
    args = ["compress", str(teacher), "-o", str(out), "--data", str(data), "--distill-steps", "2",
            "--batch-size", "4", "--threads", "1", "--quant-eval-tokens", "50", "--prune-vocab", "10000",
            "--prune-layers", "0.5", "--teacher-top-k", "8", "--calibration-docs", "4", "--json"]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["rows"]["distilled"]["vocab"] < r["rows"]["teacher"]["vocab"] == 330  # what the text uses
    assert r["rows"]["distilled"]["layers"] == 1 and r["pruning"]["kept_layers"] in ([0], [1])
    assert r["pruning"]["vocab"]["check"]["bit_identical"], r["pruning"]["vocab"]
    assert r["options"]["calibration_docs"] == 4
    tc = r["distill"]["teacher_cache"]
    assert tc["positions"] > 0 and r["distill"]["flops"] > tc["flops"] > 0
    m = load_model(out)
    assert m.graph.config.vocab_size == r["rows"]["distilled"]["vocab"]
    assert m.tokenizer.decode(m.tokenizer.encode("The cat saw a dog.")) == "The cat saw a dog."
    assert np.isfinite(r["rows"]["distilled"]["ppl"])


@pytest.mark.parametrize("args,msg", [(["--prune-vocab", "100"], "--prune-vocab 100 is below the 258 tokens"),
                                      (["--prune-layers", "1"], "--prune-layers 1.0 must be in [0, 1)"),
                                      (["--teacher-top-k", "300"], "--teacher-top-k 300 must be in [1, 299]")])
def test_compress_option_errors(teacher_dir, tmp_path, capsys, args, msg):
    data = tmp_path / "train.txt"
    data.write_text("\n\n".join(DOCS * 3) + "\n")
    with pytest.raises(SystemExit) as e:
        main(["compress", str(teacher_dir), "-o", str(tmp_path / "o"), "--data", str(data), "--distill-steps", "1",
              "--batch-size", "4", "--threads", "1"] + args)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and msg in err and "\n" not in err, err
    assert not (tmp_path / "o").exists()


def test_without_teacher_or_cache_it_trains_on_the_data_only(teacher_dir, seqs, tmp_path):
    """The from-scratch baseline runs through the same loop (batches, schedule, checkpoints); alpha must be 0."""
    opts = DistillOptions(steps=2, batch_size=4, checkpoint_every=1, seed=7, threads=1, alpha=0.0)
    model = load_torch_model(teacher_dir)
    before = model.state_dict()["model.layers.0.mlp.up_proj.weight"].clone()
    res = distill(model, None, seqs, 1, opts, tmp_path / "s", progress=False)
    assert res.steps == 2 and not torch.equal(model.state_dict()["model.layers.0.mlp.up_proj.weight"], before)
    with pytest.raises(UserError, match="alpha must be 0"):
        distill(model, None, seqs, 1, DistillOptions(steps=1, batch_size=4, threads=1), tmp_path / "t",
                progress=False)
