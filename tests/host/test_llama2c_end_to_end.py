"""Host tier: a llama2.c checkpoint with its tokenizer.bin, compiled through
the CLI, run, and compared with `tinyllm-gen reference` token for token (the
firmware's tokenizer comes from OUT, the reference's from the original file)."""
import json
import subprocess
import sys

import pytest

from firmware_harness import need
from unit.test_frontend_llama2c import MERGES, llama2c_tensors, write_hf, write_tokenizer_bin, write_v1
from tinyllm_gen.frontends.hf import load_hf

pytestmark = pytest.mark.host


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_llama2c_checkpoint_runs_bit_exact(tmp_path):
    need("cmake")
    vocab = 259 + len(MERGES)
    tok = write_tokenizer_bin(tmp_path / "tokenizer.bin")
    graph = load_hf(write_hf(tmp_path / "hf", vocab, tied=False)).graph
    ckpt = write_v1(tmp_path / "model.bin", llama2c_tensors(graph.weights, False), vocab, False)
    out = tmp_path / "out"
    cli("compile", ckpt, "--tokenizer", tok, "-o", out, "--board", "host")
    cli("build", out)
    args = ["--prompt", "hello world", "--max-new-tokens", "12", "--temperature", "0.7", "--top-p", "0.9",
            "--seed", "3", "--json"]
    fw = json.loads(cli("run", out, *args))
    ref = json.loads(cli("reference", ckpt, "--tokenizer", tok, *args))
    assert fw["prompt_ids"] == ref["prompt_ids"]
    assert fw["generated_ids"] == ref["generated_ids"] and len(ref["generated_ids"]) > 0
    # the firmware printed the prompt's bytes itself, from the vocabulary in flash
    assert fw["firmware_text"].startswith(" hello world")
