"""The bundled model's recipe: the teacher and its equal-compute baseline.

"Distillation pays" is only a fair claim if the from-scratch baseline really
trains with the teacher's compute and the teacher's larger corpus keeps the
held-out split; both are checked here on small inputs (no training)."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name):
    # scripts/ is not a package; the recipe scripts import each other by name.
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


def toy_seqs(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 500, (int(torch.randint(5, 90, (1,), generator=g)),), generator=g) for _ in range(n)]


def test_larger_corpus_keeps_held_out_split_and_extends_train(tmp_path):
    mc = load_script("make_corpus")
    mc.write_corpus(tmp_path / "small", seed=7, train_bytes=20_000, valid_bytes=3_000)
    mc.write_corpus(tmp_path / "large", seed=7, train_bytes=80_000, valid_bytes=3_000)
    assert (tmp_path / "small/valid.txt").read_bytes() == (tmp_path / "large/valid.txt").read_bytes()
    small = mc.split_stories((tmp_path / "small/train.txt").read_text())
    large = mc.split_stories((tmp_path / "large/train.txt").read_text())
    assert len(large) > 3 * len(small) and large[:len(small)] == small


def test_match_compute_reaches_the_teacher_flops_and_no_more():
    base, teacher = load_script("train_default_model"), load_script("train_teacher")
    seqs = toy_seqs()
    t_params, s_params, t_steps = 486_592, 260_032, 40
    target = teacher.compute_flops(t_params, teacher.planned_tokens(seqs, 4, 1, t_steps))
    steps = base.steps_for_flops(seqs, 4, 1, s_params, target)

    def flops(k):
        stream = base.batches(seqs, 4, 1)
        return 6.0 * s_params * sum(int((next(stream)[1] != -100).sum()) for _ in range(k))

    assert flops(steps - 1) < target <= flops(steps)
    assert 1.5 * t_steps < steps < 2.5 * t_steps  # ~ the parameter ratio, 1.87


def test_loss_by_hero_rank_reports_every_bucket(tmp_path, capsys):
    # The diagnostic behind the README's "why the teacher does not win":
    # one row per model, one mean per frequency bucket, on any held-out size.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tinymodels import make_hf_model

    mc = load_script("make_corpus")
    mc.write_corpus(tmp_path / "corpus", seed=7, train_bytes=1_000, valid_bytes=6_000)
    model = make_hf_model(tmp_path / "model", vocab=300, context=1024)  # byte-level toy tokenizer: ~650 tokens a story
    script = load_script("loss_by_hero_rank")
    script.main([str(model), "--corpus", str(tmp_path / "corpus"), "--seed", "7"])
    lines = capsys.readouterr().out.splitlines()
    counts = [int(x) for x in lines[2].split()[1:]]
    means = [float(x) for x in lines[3].split()[1:]]
    assert sum(counts) == len(mc.split_stories((tmp_path / "corpus/valid.txt").read_text())) and len(means) == 4
    assert all(m > 0 for m, c in zip(means, counts) if c)
    with pytest.raises(SystemExit, match="was not made by this make_corpus.py with seed 8"):
        script.main([str(model), "--corpus", str(tmp_path / "corpus"), "--seed", "8"])
