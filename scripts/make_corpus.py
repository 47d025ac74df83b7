#!/usr/bin/env python3
"""Generate the synthetic children's-story corpus used to train the default model.

Reproduce (deterministic for a given seed):

    python scripts/make_corpus.py                      # -> build/corpus/{train,valid}.txt
    python scripts/make_corpus.py --out DIR --seed 1234 --train-bytes 4000000 --valid-bytes 200000

The stories come from a small hand-written grammar: a hero (name + kind),
a friend, a place, a wanted object, a problem, some dialogue and a resolution,
each realised through several alternative sentence templates.  The point is a
corpus that a ~260K-parameter model can actually learn (small vocabulary,
regular structure) while still being varied enough that the model has to
track *who* and *what* the story is about rather than memorising one text.

The heroes live in one fixed *world* (``World``, drawn from the seed and shared
by both splits): about 3,000 characters, each a name + kind + home, with
facts that never change: a favourite thing, a best friend who helps them,
a pastime and a mood word.  Characters are drawn with Zipf frequencies, like
words in real text, so a few are met all the time and most rarely.  Template
choices are noise that no model can predict; the facts are a long tail that a
model learns with capacity and exposures.  It was added so that a larger
teacher has more to learn than the bundled model (issue #5); at the recipe's
budget the small model's extra exposures still win (README: "Pruning and
distillation", scripts/loss_by_hero_rank.py).

Output format: one story per block, stories separated by a blank line
(``STORY_SEPARATOR``).  Each story is a single paragraph without newlines, so
``split_stories`` can recover the documents exactly.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

STORY_SEPARATOR = "\n\n"
DEFAULT_SEED = 1234
DEFAULT_TRAIN_BYTES = 4_000_000
DEFAULT_VALID_BYTES = 200_000

# --------------------------------------------------------------------------
# Vocabulary of the little world.  Kept deliberately small: a 512-token BPE
# should cover most words with one or two tokens.
# --------------------------------------------------------------------------

NAMES_GIRL = ["Lily", "Mia", "Sara", "Anna", "Emma", "Lucy", "Zoe", "Ella", "Rosa", "Nina", "Amy", "Kate"]
NAMES_BOY = ["Tom", "Ben", "Max", "Sam", "Leo", "Jack", "Tim", "Finn", "Noah", "Dan", "Bob", "Joe"]

# (kind, pronoun set key).  Animals are "it"-free on purpose: the stories
# treat every character as he/she so pronoun agreement stays learnable.
KINDS = ["girl", "boy", "little bunny", "small cat", "happy dog", "little bird", "brave mouse",
         "young fox", "little bear", "tiny frog", "baby duck", "kind pig"]

PLACES = [
    ("the park", "under a big tree"),
    ("the forest", "near a tall pine"),
    ("the garden", "by the red flowers"),
    ("the beach", "close to the water"),
    ("the farm", "behind the old barn"),
    ("the town", "next to the bakery"),
    ("the hill", "on top of the grass"),
    ("the lake", "beside the little dock"),
    ("the school", "in the play yard"),
    ("the house", "in the warm kitchen"),
    ("the meadow", "among the tall grass"),
    ("the river", "on the smooth rocks"),
]

# (object, adjective choices, what you do with it)
OBJECTS = [
    ("ball", ["red", "big", "bouncy", "blue"], "play with"),
    ("kite", ["yellow", "long", "pretty", "green"], "fly"),
    ("hat", ["funny", "blue", "soft", "tall"], "wear"),
    ("book", ["old", "thick", "colorful", "small"], "read"),
    ("cake", ["sweet", "big", "pink", "warm"], "share"),
    ("box", ["shiny", "small", "wooden", "heavy"], "open"),
    ("toy car", ["fast", "red", "little", "new"], "race"),
    ("doll", ["soft", "pretty", "small", "happy"], "hug"),
    ("drum", ["loud", "round", "little", "bright"], "play"),
    ("boat", ["tiny", "white", "paper", "fast"], "sail"),
    ("apple", ["red", "juicy", "big", "green"], "eat"),
    ("flower", ["pretty", "yellow", "purple", "tiny"], "smell"),
    ("key", ["gold", "small", "shiny", "old"], "find"),
    ("shell", ["shiny", "pink", "smooth", "little"], "keep"),
]

FEELINGS_GOOD = ["happy", "glad", "proud", "excited", "calm", "cheerful"]
FEELINGS_BAD = ["sad", "scared", "worried", "upset", "lonely", "grumpy"]

WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "bright", "cloudy", "quiet"]
TIMES = ["day", "morning", "afternoon", "evening"]

# Problems: (what happens to the object, what the helper does to fix it)
PROBLEMS = [
    ("the {obj} fell into a deep hole", "reached into the hole and pulled the {obj} out"),
    ("the wind blew the {obj} up into a tree", "climbed the tree and got the {obj} back"),
    ("the {obj} got lost in the tall grass", "looked everywhere and found the {obj}"),
    ("the {obj} broke into two pieces", "used some glue to fix the {obj}"),
    ("the {obj} rolled far away", "ran fast and caught the {obj}"),
    ("the {obj} got very dirty in the mud", "washed the {obj} with warm water"),
    ("a big dog took the {obj}", "asked the dog nicely to give the {obj} back"),
    ("the {obj} was stuck under a heavy rock", "pushed the rock and freed the {obj}"),
]

MORALS = [
    "Friends help each other.",
    "It is good to share.",
    "Being kind makes everyone happy.",
    "When you work together, you can do anything.",
    "It is okay to ask for help.",
    "Never give up.",
    "Saying sorry can make things better.",
]

ENDINGS = ["The end.", "The end.", "The end.", "And they lived happily ever after. The end."]


@dataclass
class Character:
    name: str
    kind: str
    he: str   # subject pronoun
    him: str  # object pronoun
    his: str  # possessive


# Pastimes a character is known for: (verb phrase, gerund) pairs.
PASTIMES = [("sing", "singing"), ("dance", "dancing"), ("draw", "drawing"), ("run", "running"),
            ("jump", "jumping"), ("swim", "swimming"), ("read", "reading"), ("climb", "climbing")]
ZIPF_EXPONENT = 1.0


@dataclass
class Resident:
    """A character of the world and the facts the stories always keep about them."""
    who: Character
    home: tuple[str, str]          # (place, spot) from PLACES
    thing: tuple[int, str]         # (index into OBJECTS, adjective)
    friend: int                    # index of the best friend in World.residents
    pastime: tuple[str, str]
    mood: str                      # the good feeling word used for them


class World:
    """Every (name, kind, home) triple is one resident, with fixed facts.

    Built from its own seed so the training and held-out splits share it:
    held-out perplexity then measures how much of the world a model has learnt.
    """

    def __init__(self, seed: int):
        rng = random.Random(f"world-{seed}")
        self.residents: list[Resident] = []
        for names, pro, banned in ((NAMES_GIRL, ("she", "her", "her"), "boy"),
                                   (NAMES_BOY, ("he", "him", "his"), "girl")):
            for name in names:
                for kind in KINDS:
                    if kind == banned:
                        continue
                    for home in PLACES:
                        obj = rng.randrange(len(OBJECTS))
                        self.residents.append(Resident(
                            Character(name, kind, *pro), home, (obj, rng.choice(OBJECTS[obj][1])), -1,
                            rng.choice(PASTIMES), rng.choice(FEELINGS_GOOD)))
        for r in self.residents:  # a best friend with a different name
            while True:
                f = rng.randrange(len(self.residents))
                if self.residents[f].who.name != r.who.name:
                    r.friend = f
                    break
        # Zipf frequencies over a random order of the residents.
        order = list(range(len(self.residents)))
        rng.shuffle(order)
        weights = [0.0] * len(order)
        for rank, i in enumerate(order, start=1):
            weights[i] = rank ** -ZIPF_EXPONENT
        total, acc, self._cum = sum(weights), 0.0, []
        for w in weights:
            acc += w / total
            self._cum.append(acc)
        self._rank = {id(self.residents[i]): rank for rank, i in enumerate(order, start=1)}

    def pick(self, rng: random.Random) -> Resident:
        return rng.choices(self.residents, cum_weights=self._cum)[0]

    def friend_of(self, r: Resident) -> Resident:
        return self.residents[r.friend]

    def rank(self, r: Resident) -> int:
        """1 for the most frequent resident, len(residents) for the rarest."""
        return self._rank[id(r)]


def a_or_an(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def cap(s: str) -> str:
    return s[0].upper() + s[1:]


# --------------------------------------------------------------------------
# Story parts.  Each function returns a list of sentences; each picks one of
# several templates so that the same event is told in different words.
# --------------------------------------------------------------------------

def opening(rng: random.Random, r: Resident, friend: Character) -> list[str]:
    """Name the resident (kind, name and home: the key to their facts), then tell one or two facts."""
    hero, (place, _) = r.who, r.home
    kind = a_or_an(hero.kind)
    intro = rng.choice([
        f"Once upon a time, there was {kind} named {hero.name} who lived near {place}.",
        f"Once upon a time, {kind} named {hero.name} lived near {place}.",
        f"Once upon a time, near {place}, there lived {kind} called {hero.name}.",
        f"Once upon a time, there was {kind} from {place}. {cap(hero.his)} name was {hero.name}.",
        f"One {rng.choice(WEATHER)} {rng.choice(TIMES)}, {kind} named {hero.name} played near {place}, "
        f"where {hero.he} lived.",
    ])
    verb, gerund = r.pastime
    facts = [
        rng.choice([f"{hero.name} loved {gerund}.", f"{cap(hero.he)} liked to {verb} every day.",
                    f"More than anything, {hero.name} liked {gerund}."]),
        rng.choice([f"{hero.name} was always {r.mood}.",
                    f"Everyone knew {hero.name} as {a_or_an(r.mood + ' ' + hero.kind)}."]),
        rng.choice([f"{cap(hero.his)} best friend was {friend.name} the {friend.kind}.",
                    f"{hero.name} and {friend.name} the {friend.kind} were best friends."]),
    ]
    return [intro] + rng.sample(facts, rng.choice([1, 2]))


def want_object(rng: random.Random, hero: Character, obj: str, adj: str, verb: str, mood: str) -> list[str]:
    thing = f"{adj} {obj}"
    return [rng.choice([
        f"{hero.name} had {a_or_an(thing)}.",
        f"One day, {hero.name} found {a_or_an(thing)}.",
        f"{cap(hero.his)} mom gave {hero.him} {a_or_an(thing)}.",
        f"{hero.name} saw {a_or_an(thing)} on the ground.",
    ]), rng.choice([
        f"{cap(hero.he)} loved to {verb} the {obj}.",
        f"{cap(hero.he)} wanted to {verb} it all day.",
        f"The {obj} was {hero.his} favorite thing.",
        f"{hero.name} smiled. {cap(hero.he)} was very {mood}.",
    ])]


def go_to_place(rng: random.Random, hero: Character, place: str, spot: str, obj: str) -> list[str]:
    return [rng.choice([
        f"{hero.name} took the {obj} to {place}.",
        f"{cap(hero.he)} went to {place} with the {obj}.",
        f"{hero.name} and the {obj} went to play at {place}.",
        f"{cap(hero.he)} ran to {place} to play.",
    ]), rng.choice([
        f"{cap(hero.he)} played {spot}.",
        f"{cap(hero.he)} sat down {spot}.",
        f"It was fun to play {spot}.",
    ])]


def _start_sentence(prefix: str, clause: str) -> str:
    # After "Oh no!" a new sentence starts, so the clause needs a capital.
    if prefix.endswith("! "):
        clause = cap(clause)
    return prefix + clause + "."


def problem(rng: random.Random, hero: Character, obj: str, what: str) -> list[str]:
    bad = rng.choice(FEELINGS_BAD)
    return [
        _start_sentence(rng.choice(["But then, ", "Suddenly, ", "Oh no! ", "Then, "]), what.format(obj=obj)),
        rng.choice([
            f"{hero.name} felt {bad}.",
            f"{hero.name} began to cry.",
            f"{cap(hero.he)} was very {bad}.",
            f"{hero.name} did not know what to do.",
        ]),
        rng.choice([
            f"\"Oh no, my {obj}!\" {hero.name} said.",
            f"\"What can I do?\" {hero.he} asked.",
            f"\"I want my {obj} back,\" {hero.name} said in a small voice.",
            f"\"Can someone help me?\" {hero.name} cried.",
        ]),
    ]


def friend_helps(rng: random.Random, hero: Character, friend: Character, obj: str, fix: str) -> list[str]:
    return [
        rng.choice([
            f"Just then, {a_or_an(friend.kind)} named {friend.name} came by.",
            f"{hero.name}'s friend {friend.name} saw {hero.him}.",
            f"A {friend.kind} named {friend.name} heard {hero.him}.",
            f"Then {friend.name} the {friend.kind} walked over.",
        ]),
        rng.choice([
            f"\"Why are you sad, {hero.name}?\" {friend.name} asked.",
            f"\"What is wrong?\" asked {friend.name}.",
            f"\"Do you need help?\" {friend.name} asked.",
        ]),
        rng.choice([
            f"\"My {obj} is gone,\" said {hero.name}.",
            f"{hero.name} told {friend.him} about the {obj}.",
            f"\"Please help me get my {obj},\" said {hero.name}.",
        ]),
        rng.choice([
            f"\"I will help you,\" said {friend.name}.",
            f"\"Don't worry, I can help,\" {friend.name} said with a smile.",
            f"{friend.name} nodded. \"Let's do it together.\"",
        ]),
        f"{friend.name} " + fix.format(obj=obj) + ".",
    ]


def self_solves(rng: random.Random, hero: Character, obj: str, fix: str) -> list[str]:
    return [
        rng.choice([
            f"{hero.name} took a deep breath.",
            f"{hero.name} stopped crying and thought hard.",
            f"Then {hero.name} had an idea.",
        ]),
        rng.choice([
            f"\"I can do it,\" {hero.he} said.",
            f"\"I will try,\" {hero.he} said.",
            f"\"I will not give up,\" said {hero.name}.",
        ]),
        f"{hero.name} " + fix.format(obj=obj) + ".",
    ]


def resolution(rng: random.Random, hero: Character, friend: Character | None, obj: str, verb: str,
               good: str) -> list[str]:
    out = [rng.choice([
        f"{hero.name} was so {good}.",
        f"{hero.name} smiled a big smile.",
        f"{hero.name} jumped up and down.",
        f"Now {hero.name} felt {good} again.",
    ])]
    if friend is not None:
        out.append(rng.choice([
            f"\"Thank you, {friend.name}!\" said {hero.name}.",
            f"{hero.name} gave {friend.name} a big hug.",
            f"\"You are a good friend,\" {hero.name} said.",
        ]))
        out.append(rng.choice([
            f"Then they went to {verb} the {obj} together.",
            f"{hero.name} and {friend.name} played until the sun went down.",
            f"From that day on, {hero.name} and {friend.name} were best friends.",
            "They laughed and played all day.",
        ]))
    else:
        out.append(rng.choice([
            f"{cap(hero.he)} held the {obj} tight.",
            f"{cap(hero.he)} was proud of {'himself' if hero.he == 'he' else 'herself'}.",
            f"Then {hero.he} went home to {verb} the {obj}.",
        ]))
    return out


def ending(rng: random.Random, hero: Character, with_friend: bool) -> list[str]:
    parts = []
    if rng.random() < 0.5:
        parts.append(rng.choice([
            f"{hero.name} learned something that day.",
            f"{hero.name} learned a good lesson.",
            f"{hero.name} knew something important now.",
        ]) + " " + rng.choice(MORALS))
    elif rng.random() < 0.5:
        parts.append(rng.choice([
            f"That night, {hero.name} went to sleep with a smile.",
            f"{hero.name} went home and told {hero.his} mom all about it.",
            "It was the best day ever.",
        ]))
    # "They lived happily ever after" only makes sense with two characters.
    parts.append(rng.choice(ENDINGS if with_friend else ENDINGS[:1]))
    return parts


def sharing_story(rng: random.Random, r: Resident, buddy: Resident) -> list[str]:
    """A second plot shape so that not every story is 'lost object'."""
    hero, friend = r.who, buddy.who
    place, spot = r.home
    obj, _, verb = OBJECTS[r.thing[0]]
    s = opening(rng, r, friend) + want_object(rng, hero, obj, r.thing[1], verb, r.mood)
    s += [
        rng.choice([
            f"One day, {friend.name} the {friend.kind} saw the {obj}.",
            f"{friend.name} came to play {spot}.",
        ]),
        rng.choice([
            f"\"Can I {verb} the {obj} too?\" {friend.name} asked.",
            f"\"That is a nice {obj},\" said {friend.name}. \"Can I try?\"",
        ]),
        rng.choice([
            f"{hero.name} did not want to share.",
            f"\"No, it is mine!\" said {hero.name}.",
        ]),
        rng.choice([
            f"{friend.name} felt {rng.choice(FEELINGS_BAD)} and walked away.",
            f"{friend.name} looked down and went home.",
        ]),
        rng.choice([
            f"Soon {hero.name} was alone. It was no fun to {verb} the {obj} alone.",
            f"{hero.name} felt {rng.choice(FEELINGS_BAD)}. Playing alone was not fun.",
        ]),
        rng.choice([
            f"{hero.name} ran to find {friend.name}. \"I am sorry,\" {hero.he} said. \"Let's share.\"",
            f"{hero.name} went to {friend.name} and said, \"Sorry. You can {verb} the {obj} too.\"",
        ]),
        rng.choice([
            f"{friend.name} smiled. They took turns with the {obj}.",
            f"{friend.name} was {buddy.mood}. They played together all day.",
        ]),
    ]
    return s + ending(rng, hero, with_friend=True)


def lost_object_story(rng: random.Random, r: Resident, buddy: Resident) -> list[str]:
    hero = r.who
    place, spot = r.home
    obj, _, verb = OBJECTS[r.thing[0]]
    what, fix = rng.choice(PROBLEMS)
    s = opening(rng, r, buddy.who) + want_object(rng, hero, obj, r.thing[1], verb, r.mood)
    s += go_to_place(rng, hero, place, spot, obj) + problem(rng, hero, obj, what)
    # The best friend is the one who comes to help: another fact of the world.
    friend = buddy.who if rng.random() < 0.7 else None
    if friend is not None:
        s += friend_helps(rng, hero, friend, obj, fix)
    else:
        s += self_solves(rng, hero, obj, fix)
    s += resolution(rng, hero, friend, obj, verb, r.mood)
    return s + ending(rng, hero, with_friend=friend is not None)


def make_story(rng: random.Random, world: World, heroes: list[Resident] | None = None) -> str:
    plot = lost_object_story if rng.random() < 0.7 else sharing_story
    r = world.pick(rng)
    if heroes is not None:
        heroes.append(r)
    return " ".join(plot(rng, r, world.friend_of(r)))


def generate(rng: random.Random, world: World, n_bytes: int) -> str:
    """Concatenate stories until at least n_bytes of text have been produced."""
    stories, size = [], 0
    while size < n_bytes:
        story = make_story(rng, world)
        stories.append(story)
        size += len(story) + len(STORY_SEPARATOR)
    return STORY_SEPARATOR.join(stories) + "\n"


def split_stories(text: str) -> list[str]:
    """Inverse of ``generate``: one string per story (training document)."""
    return [s.strip() for s in text.split(STORY_SEPARATOR) if s.strip()]


def held_out_heroes(seed: int, n_stories: int) -> tuple[World, list[Resident]]:
    """The world and the heroes of the first n_stories held-out stories, in
    order: a replay of write_corpus's held-out stream (whatever its size)."""
    world, rng, heroes = World(seed), random.Random(f"valid-{seed}"), []
    while len(heroes) < n_stories:
        make_story(rng, world, heroes)
    return world, heroes


def write_corpus(out: Path, seed: int = DEFAULT_SEED, train_bytes: int = DEFAULT_TRAIN_BYTES,
                 valid_bytes: int = DEFAULT_VALID_BYTES) -> tuple[Path, Path]:
    # Separate generators for the two splits so the held-out set does not
    # depend on how much training text was requested; one world for both.
    out.mkdir(parents=True, exist_ok=True)
    world = World(seed)
    train_path, valid_path = out / "train.txt", out / "valid.txt"
    train_path.write_text(generate(random.Random(f"train-{seed}"), world, train_bytes), encoding="utf-8")
    valid_path.write_text(generate(random.Random(f"valid-{seed}"), world, valid_bytes), encoding="utf-8")
    return train_path, valid_path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("build/corpus"))
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--train-bytes", type=int, default=DEFAULT_TRAIN_BYTES)
    ap.add_argument("--valid-bytes", type=int, default=DEFAULT_VALID_BYTES)
    args = ap.parse_args(argv)
    train, valid = write_corpus(args.out, args.seed, args.train_bytes, args.valid_bytes)
    for p in (train, valid):
        print(f"wrote {p} ({p.stat().st_size} bytes, {len(split_stories(p.read_text()))} stories)")


if __name__ == "__main__":
    main()
