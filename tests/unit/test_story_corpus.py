"""The story corpus behind models/story-260k must be reproducible from its seed."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_corpus.py"


def load_make_corpus():
    # scripts/ is not a package, so import the file directly.
    spec = importlib.util.spec_from_file_location("make_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # @dataclass looks its module up here
    spec.loader.exec_module(module)
    return module


def test_same_seed_gives_identical_bytes(tmp_path):
    mc = load_make_corpus()
    for name in ("a", "b"):
        mc.write_corpus(tmp_path / name, seed=7, train_bytes=50_000, valid_bytes=5_000)
    for split in ("train.txt", "valid.txt"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()


def test_different_seed_gives_different_text(tmp_path):
    mc = load_make_corpus()
    mc.write_corpus(tmp_path / "a", seed=7, train_bytes=20_000, valid_bytes=2_000)
    mc.write_corpus(tmp_path / "b", seed=8, train_bytes=20_000, valid_bytes=2_000)
    assert (tmp_path / "a" / "train.txt").read_bytes() != (tmp_path / "b" / "train.txt").read_bytes()


def test_stories_are_whole_documents(tmp_path):
    mc = load_make_corpus()
    train, valid = mc.write_corpus(tmp_path, seed=7, train_bytes=20_000, valid_bytes=2_000)
    stories = mc.split_stories(train.read_text(encoding="utf-8"))
    assert len(stories) > 10
    for story in stories:
        assert story.startswith("Once upon a time") or story.startswith("One ")
        assert story.endswith("The end.")
        assert "\n" not in story
    # Held-out split comes from its own stream, not a copy of the training text.
    assert valid.read_text(encoding="utf-8")[:500] != train.read_text(encoding="utf-8")[:500]
