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


def test_world_facts_are_fixed_and_told_in_every_story():
    # The facts are what separates a larger model from a smaller one (issue #5):
    # they must be the same in every story about a resident, in both splits.
    import random

    mc = load_make_corpus()
    world, again = mc.World(7), mc.World(7)
    assert world.residents == again.residents
    assert len(world.residents) == 2 * 12 * 11 * 12  # names x allowed kinds x homes
    assert all(world.friend_of(r).who.name != r.who.name for r in world.residents)
    rng = random.Random(0)
    for r in world.residents[::97]:
        obj, adjs, _ = mc.OBJECTS[r.thing[0]]
        for plot in (mc.lost_object_story, mc.sharing_story):
            for _ in range(5):
                story = " ".join(plot(rng, r, world.friend_of(r)))
                assert f"{r.thing[1]} {obj}" in story and r.home[0] in story and r.who.name in story
                assert f"{r.who.kind} named {r.who.name}" in story or f"{r.who.kind} called {r.who.name}" in story \
                    or f"{r.who.kind} from {r.home[0]}. " in story


def test_residents_are_met_with_zipf_frequencies():
    import collections
    import random

    mc = load_make_corpus()
    world, rng = mc.World(7), random.Random(1)
    counts = collections.Counter(id(world.pick(rng)) for _ in range(20_000))
    top = [c for _, c in counts.most_common()]
    # Zipf with exponent 1 over 3168 residents: the most frequent one takes
    # 1/H(3168) ~ 11.6% of stories, the 10th ~1.2%, and many are never drawn.
    assert 0.09 < top[0] / 20_000 < 0.14
    assert 0.007 < top[9] / 20_000 < 0.018
    assert len(counts) < len(world.residents)


def test_held_out_heroes_replays_the_held_out_split(tmp_path):
    # scripts/loss_by_hero_rank.py groups held-out stories by their hero's
    # frequency rank; the replay must line up with the written file story by story.
    mc = load_make_corpus()
    _, valid = mc.write_corpus(tmp_path, seed=7, train_bytes=2_000, valid_bytes=8_000)
    stories = mc.split_stories(valid.read_text(encoding="utf-8"))
    world, heroes = mc.held_out_heroes(7, len(stories))
    assert len(stories) == len(heroes) > 5
    for story, hero in zip(stories, heroes):
        assert hero.who.name in story.split(".")[0] + story.split(".")[1] and hero.home[0] in story
    assert sorted(map(world.rank, world.residents)) == list(range(1, len(world.residents) + 1))
