"""scripts/distill_smollm2.py `teacher-text`: prompt selection, story clean-up and
the resume bookkeeping, without the teacher (pure Python)."""

import pytest

from recipe_script import load_recipe
from tinyllm_gen.compress.eval import read_documents
from tinyllm_gen.errors import UserError


@pytest.fixture(scope="module")
def recipe():
    return load_recipe()


def test_prompts_are_distinct_openings_and_held_out_ones_open_no_training_story(recipe):
    train = ["A fox ran. It hid.", "A cat sat! Then slept.", "A fox ran. It ate.", "An owl flew? Yes.",
             'Sam said "hi." Then left.']
    valid = ["An owl flew? No.", "A dog dug. Deep.", "A dog dug. Again.", "A bee hummed.", "A fox ran. Far."]
    tr, ev = recipe.story_prompts(train, valid, 3, 2)
    assert tr == ["A fox ran.", "A cat sat!", "An owl flew?"]
    # "An owl flew?" opens the 4th training story and "A fox ran." the 1st: never held out
    assert ev == ["A dog dug.", "A bee hummed."]
    assert recipe.story_prompts(train, valid, 4, 2)[0][3] == 'Sam said "hi."'  # the closing quote is kept
    with pytest.raises(UserError, match="--eval-stories 3"):
        recipe.story_prompts(train, valid, 3, 3)  # only two held-out openings are disjoint


def test_a_story_cut_by_the_limit_ends_at_its_last_sentence_and_stays_one_document(recipe, tmp_path):
    prompt = "Once upon a time, a fox lived."
    text = prompt + " He ran.\n\n  She said \"Stop!\" \n\nThen the"
    done = recipe.finish_story(text, len(prompt), ended=False)
    assert done == 'Once upon a time, a fox lived. He ran.\nShe said "Stop!"'
    (tmp_path / "train.txt").write_text("\n\n".join([done, done]) + "\n")  # the format the other stages read
    assert read_documents(tmp_path / "train.txt") == [done, done]
    assert recipe.finish_story(text, len(prompt), ended=True).endswith("Then the")  # EOS ended it: kept whole
    assert recipe.finish_story(prompt + " and then he", len(prompt), ended=False) == prompt + " and then he"


def test_resume_skips_finished_batches_and_redoes_those_of_other_prompts(recipe, tmp_path):
    batches = recipe.prompt_batches(["a.", "b.", "c.", "d.", "e."], 2)
    assert batches == [["a.", "b."], ["c.", "d."], ["e."]]
    assert recipe.missing_batches(tmp_path, "train", batches) == [0, 1, 2]
    for b in (0, 2):
        recipe.write_batch(tmp_path, "train", b, {"prompts_sha256": recipe.prompts_digest(batches[b]),
                                                 "stories": batches[b]})
    (tmp_path / ".train-0001.json.tmp").write_text("{")  # a batch killed while being written
    assert recipe.missing_batches(tmp_path, "train", batches) == [1]
    assert recipe.missing_batches(tmp_path, "eval", batches) == [0, 1, 2]
    other = recipe.prompt_batches(["a.", "b.", "c.", "d.", "f."], 2)  # the last prompt changed
    assert recipe.missing_batches(tmp_path, "train", other) == [1, 2]


def test_batch_seeds_are_fixed_per_split_and_batch(recipe):
    seeds = {recipe.batch_seed(1234, s, b) for s in ("train", "eval") for b in range(50)}
    assert len(seeds) == 100 and all(0 <= x < 2**32 for x in seeds)
    assert recipe.batch_seed(1234, "train", 3) == recipe.batch_seed(1234, "train", 3) != recipe.batch_seed(
        1235, "train", 3)


def test_other_sampling_settings_refuse_to_mix_with_the_text_on_disk(recipe, tmp_path):
    where = tmp_path / "teacher-text"
    s = {"seed": 1, "temperature": 0.8, "top_p": 0.95}
    recipe.check_settings(where, s)
    recipe.check_settings(where, dict(s))
    with pytest.raises(UserError, match=r"temperature 0.8 -> 1.0"):
        recipe.check_settings(where, {**s, "temperature": 1.0})


def test_a_stage_given_bad_input_prints_one_line_and_exits_2(recipe, tmp_path, capsys):
    pytest.importorskip("torch")  # main sets torch's thread count before any stage
    with pytest.raises(SystemExit) as e:
        recipe.main(["teacher-text", "--work", str(tmp_path / "w"), "--gguf", str(tmp_path / "missing.gguf")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "missing.gguf" in err and "Traceback" not in err
