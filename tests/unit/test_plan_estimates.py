"""`plan`'s weight-bytes figure is the size of the blob `compile` builds
(issue 13): the same layout function (blob.blob_layout) over the entries
plan/weights_size.py derives from shapes, for our Q4 layouts (packed, q4x4 with
gate/up fused), llama.cpp blocks kept as they are (Q4_0, Q4_1, Q8_0, and
SmolLM2's Q8_0 embedding + Q4_1 matrices), and the vocabulary when it goes
to external flash."""
import json
from dataclasses import replace
import subprocess
import sys

import pytest

from gguf_models import hf_to_gguf, smollm2_path
from tinymodels import make_hf_model
from tinyllm_gen.compile import CompileOptions, compile_path


def plan_weights_bytes(model, *args) -> int:
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(model), "--json", *map(str, args)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["weights_bytes"]


def blob_bytes(model, **opts) -> int:
    return len(compile_path(model, CompileOptions(**opts)).program.blob.data)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("estimates")
    return make_hf_model(d / "hf", eos=None, dim=64, hidden=96, layers=2, heads=4, kv_heads=2, vocab=300,
                         context=64, tied=True, seed=3)


@pytest.mark.parametrize("qtype,embd,board", [("Q4_0", None, "stm32h750b-dk"), ("Q4_1", None, "stm32h750b-dk"),
                                              ("Q8_0", None, "stm32h750b-dk"), ("Q4_1", "Q8_0", "stm32h750b-dk"),
                                              ("Q4_1", "Q8_0", "qemu-mps2-an500")])
def test_plan_weights_equal_the_built_blob_for_kept_gguf_blocks(hf, tmp_path, qtype, embd, board):
    gguf = hf_to_gguf(hf, tmp_path / f"m-{qtype}.gguf", qtype, embd_qtype=embd)
    assert plan_weights_bytes(gguf, "--board", board) == blob_bytes(gguf, board=board)


@pytest.mark.parametrize("board,extra", [("qemu-mps2-an500", {}), ("stm32h750b-dk", {}),
                                         ("stm32h750b-dk", {"sampler": "greedy"}),
                                         ("stm32h750b-dk", {"group_size": 64})])
def test_plan_weights_equal_the_built_blob_for_our_q4(hf, board, extra):
    """Portable packed nibbles + scales on QEMU; q4x4 tiles and the fused
    gate/up matrix on the M7 board (the old estimate missed their padding)."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in extra.items()]
    assert plan_weights_bytes(hf, "--board", board, *flags) == blob_bytes(hf, board=board, **extra)


def test_plan_counts_a_vocabulary_that_goes_to_external_flash(tmp_path):
    """20,000 tokens (80 KB of offsets alone) do not fit beside the code in
    the H750's 128 KiB flash: the table joins the blob, and plan says so."""
    model = make_hf_model(tmp_path / "big-vocab", eos=None, dim=32, hidden=64, layers=1, heads=2, kv_heads=1,
                          vocab=20000, context=32, tied=True, seed=4)
    planned = plan_weights_bytes(model, "--board", "stm32h750b-dk")
    assert planned == blob_bytes(model, board="stm32h750b-dk")
    assert planned > plan_weights_bytes(model, "--board", "qemu-mps2-an500")  # 4 MiB code RAM: kept in the image


@pytest.mark.slow
def test_plan_weights_equal_the_built_blob_for_smollm2(tmp_path):
    """The note in issue 13: plan said 84 MB while the blob is 97 MB (the Q8_0
    embedding counted as Q4, the vocabulary left out)."""
    path = smollm2_path()
    args = ["--board", "stm32h750b-dk", "--sampler", "greedy", "--kv-bits", "8", "--max-seq", "auto"]
    planned = plan_weights_bytes(path, *args)
    built = len(compile_path(path, CompileOptions(board="stm32h750b-dk", sampler="greedy", kv_bits=8,
                                                  max_seq="auto")).program.blob.data)
    assert planned == built


def test_too_big_for_the_board_with_kept_blocks_offers_no_group_size(hf, tmp_path):
    """Kept GGUF blocks are 32 weights each whatever --group-size says: the
    over-capacity line must not suggest --group-size 128."""
    from tinyllm_gen.board import load_board
    from tinyllm_gen.errors import UserError
    from tinyllm_gen.frontends import load_model
    from plans import plan_for
    from tinyllm_gen.fit.search import check_weights
    from tinyllm_gen.lower.records import StepSource

    board = load_board("weact-h750")
    m = load_model(hf)
    for method, hint in (("gguf", False), ("rtn", True)):
        res = plan_for(StepSource(m.graph, 32, 8, "portable", method), None, 512 * 1024, board)
        with pytest.raises(UserError) as e:
            check_weights(replace(res, weights_capacity=res.weights_bytes - 1), board.name, 32, method)
        assert ("--group-size 128" in str(e.value)) == hint


# ---- the code flash (plan/codesize.py): refused in one line before the linker would


def _shape(dim, hidden, layers, n_vocab, kernels="cortex-m7"):
    from tinyllm_gen.ir import ModelConfig, build_decoder_graph
    from tinyllm_gen.lower.records import StepSource

    c = ModelConfig("llama", dim, hidden, layers, 4, 2, dim // 4, n_vocab, 64, tied_embeddings=True, eos_ids=(2,))
    return StepSource(build_decoder_graph(c, {}), 32, 8, kernels)


def test_plan_refuses_a_model_whose_code_alone_overflows_the_h750_flash(tmp_path):
    """300 layers unrolled: about 137 KB of step and runtime on a 128 KiB flash
    (the loop form needs about 89 KB and fits).
    (One CLI run: 300 layers are thousands of buffers for the placer.)"""
    from llama2c_shapes import write_llama2c_v0
    from plans import step_of
    from tinyllm_gen.board import load_board
    from tinyllm_gen.plan.codesize import code_flash

    ckpt = write_llama2c_v0(tmp_path / "deep.bin", 16, 32, 300, 2, 2, 64, 16)  # 300 layers of dim 16
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(ckpt), "--board", "stm32h750b-dk",
                           "--max-seq", "8", "--unroll-layers"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "code flash" in lines[0] and "holds 131,072 B (over by" in lines[0] and "drop --unroll-layers" in lines[0]
    deep = step_of(_shape(16, 32, 300, 64))
    assert code_flash(deep, load_board("stm32h750b-dk")).fits  # the loop form
    assert code_flash(deep, load_board("qemu-mps2-an500"), unroll_layers=True).fits  # 4 MiB of code memory
    assert code_flash(deep, load_board("host"), unroll_layers=True) is None  # the OS loads the host's code


def test_the_stream_table_is_one_run_per_matrix_whatever_the_chunk_size():
    """24 layers of dim 512 cut into 1 KiB chunks are 24,704 chunks; the
    firmware's table holds one run per streamed matrix (tllm_stream_run:
    20 B), so its size does not grow with the chunk count."""
    from tinyllm_gen.board import load_board
    from plans import plan_for
    from tinyllm_gen.fit.search import check_code
    from tinyllm_gen.lower.records import StreamOptions
    from tinyllm_gen.plan.codesize import STREAM_RUN_BYTES

    board = load_board("stm32h750b-dk")
    shape = _shape(512, 1024, 24, 512)
    small = plan_for(shape, 16, 512 * 1024, board, stream=StreamOptions("all", 1024))
    big = plan_for(shape, 16, 512 * 1024, board, stream=StreamOptions("all", 64 * 1024))
    assert small.step.stream.n_chunks > 20_000 > big.step.stream.n_chunks
    runs = 24 * 6 + 1  # wq, wk, wv, wo, gate+up fused, down per layer; the tied classifier
    assert small.code.stream_table_bytes == big.code.stream_table_bytes == STREAM_RUN_BYTES * runs
    check_code(small, board.name)


def test_the_vocabulary_leaves_code_flash_when_it_does_not_fit_beside_the_code():
    """60 KB of vocabulary fits the 64 KiB reserve rule, but not beside the
    code of 200 layers: it goes to the weights blob, and the blob grows by it."""
    from plans import plan_for
    from tinyllm_gen.board import load_board

    board = load_board("stm32h750b-dk")
    vocab = (10_000, 20_000)  # tokens, text bytes: 60,004 B with the offsets
    shallow = plan_for(_shape(16, 32, 10, 10_000), 16, 512 * 1024, board, vocab=vocab)
    deep = plan_for(_shape(16, 32, 200, 10_000), 16, 512 * 1024, board, vocab=vocab, unroll_layers=True)
    assert not shallow.vocab_in_weights and shallow.code.vocab_bytes > 60_000 and shallow.code.fits
    assert deep.vocab_in_weights and deep.code.vocab_bytes == 0 and deep.code.fits
    no_vocab = plan_for(_shape(16, 32, 200, 10_000), 16, 512 * 1024, board)
    assert deep.weights_bytes - no_vocab.weights_bytes >= 60_004
