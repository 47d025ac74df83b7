"""Bad input ends with one line on stderr, exit status 2, no traceback, and
no half-written output directory."""
import subprocess
import sys

import pytest

from tinymodels import make_hf_model


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd)


def assert_user_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_hf_model(tmp_path_factory.mktemp("cli") / "m", context=64, seed=3)


def test_missing_safetensors(tmp_path, model):
    bad = tmp_path / "m"
    bad.mkdir()
    for f in ("config.json", "tokenizer.json"):
        (bad / f).write_bytes((model / f).read_bytes())
    out = tmp_path / "out"
    assert_user_error(cli("compile", bad, "-o", out), "safetensors")
    assert not out.exists()


def test_truncated_safetensors(tmp_path, model):
    bad = tmp_path / "m"
    bad.mkdir()
    for f in ("config.json", "tokenizer.json"):
        (bad / f).write_bytes((model / f).read_bytes())
    data = (model / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    assert_user_error(cli("compile", bad, "-o", out), "model.safetensors")
    assert not out.exists()


def test_corrupt_llama2c_header(tmp_path):
    ckpt = tmp_path / "model.bin"
    ckpt.write_bytes(b"\xff" * 64)
    assert_user_error(cli("compile", ckpt, "-o", tmp_path / "out"), "model.bin")
    assert not (tmp_path / "out").exists()


def test_unknown_architecture(tmp_path, model):
    bad = tmp_path / "m"
    bad.mkdir()
    for f in ("model.safetensors", "tokenizer.json"):
        (bad / f).write_bytes((model / f).read_bytes())
    cfg = (model / "config.json").read_text().replace("LlamaForCausalLM", "GPT2LMHeadModel")
    (bad / "config.json").write_text(cfg)
    assert_user_error(cli("inspect", bad), "GPT2LMHeadModel")


def test_shape_mismatch(tmp_path, model):
    bad = tmp_path / "m"
    bad.mkdir()
    for f in ("model.safetensors", "tokenizer.json"):
        (bad / f).write_bytes((model / f).read_bytes())
    cfg = (model / "config.json").read_text().replace('"intermediate_size": 96', '"intermediate_size": 128')
    (bad / "config.json").write_text(cfg)
    assert_user_error(cli("compile", bad, "-o", tmp_path / "out"), "mlp")


def test_plan_over_budget_says_what_fits(tmp_path, model):
    out = tmp_path / "out"
    line = assert_user_error(cli("compile", model, "-o", out, "--ram-budget", "16K", "--max-seq", "64"), "over by",
                             "--max-seq")
    assert "16,384 B" in line
    assert not out.exists()


def test_without_max_seq_a_context_that_does_not_fit_becomes_the_longest_that_does(tmp_path, model):
    """No --max-seq: the model's 64 positions where they fit; where they do not, compile builds the longest
    context that does (--max-seq auto's) and says so, where it used to refuse."""
    out = tmp_path / "out"
    proc = cli("compile", model, "-o", out, "--ram-budget", "16K")
    assert proc.returncode == 0, proc.stderr
    auto = tmp_path / "auto"
    assert cli("compile", model, "-o", auto, "--ram-budget", "16K", "--max-seq", "auto").returncode == 0
    import json
    seq = json.loads((out / "manifest.json").read_text())["max_seq"]
    assert 8 <= seq < 64 and seq == json.loads((auto / "manifest.json").read_text())["max_seq"]
    assert f"context {seq} tokens, the longest this board holds (the model's 64 do not fit" in proc.stdout
    # where nothing fits at any context, the refusal is the model context's, with what would fit
    assert_user_error(cli("compile", model, "-o", tmp_path / "none", "--ram-budget", "2K"), "over by")


def test_prompt_longer_than_context(tmp_path, model):
    proc = cli("reference", model, "--prompt", "the cat " * 200, "--max-new-tokens", "4")
    assert_user_error(proc, "context")


def test_max_seq_beyond_model_context(tmp_path, model):
    assert_user_error(cli("compile", model, "-o", tmp_path / "o", "--max-seq", "4096"), "--max-seq 4096")


def test_unknown_board(tmp_path, model):
    assert_user_error(cli("compile", model, "-o", tmp_path / "o", "--board", "nope"), "'nope' is not one of")


def test_failed_compile_keeps_previous_output(tmp_path, model):
    out = tmp_path / "out"
    assert cli("compile", model, "-o", out, "--board", "host").returncode == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert_user_error(cli("compile", model, "-o", out, "--board", "host", "--ram-budget", "8K"), "over by")
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert before == after
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_refuses_to_overwrite_foreign_directory(tmp_path, model):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert_user_error(cli("compile", model, "-o", out), "not a tinyllm-gen output")
    assert (out / "notes.txt").read_text() == "keep me"


def test_run_before_build(tmp_path, model):
    out = tmp_path / "out"
    assert cli("compile", model, "-o", out, "--board", "host").returncode == 0
    assert_user_error(cli("run", out), "not built")


def test_package_runs_as_the_command(tmp_path):
    """`python -m tinyllm_gen` is the same command as `python -m tinyllm_gen.cli`."""
    missing = tmp_path / "no-such-model"
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen", "inspect", str(missing)], capture_output=True,
                          text=True)
    assert assert_user_error(proc, "no such file") == assert_user_error(cli("inspect", missing), "no such file")
