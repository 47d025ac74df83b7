"""Weight streaming (codegen/lower/stream.py + firmware/tllm_stream.h) in
the host tier: the host links the weights in, so `--stream all` forces the
streaming code path (tllm_board_copy_start/wait are memcpy behind the same
contract checks, and a misuse stops the run). Tokens equal the reference."""
import json

import pytest

from firmware_harness import GREEDY, SHAPES, TOP_P, Built, assert_identical, need
from tinymodels import make_hf_model
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, write_tree

pytestmark = pytest.mark.host


def build_streamed(root, shape, group, board, kv_bits=8, sampler="full", stream="all", chunk=None):
    model_dir = root / f"model-{shape}"
    if not model_dir.exists():
        make_hf_model(model_dir, eos=None, **SHAPES[shape])
    out = root / f"out-{shape}-g{group}-{board}-kv{kv_bits}-{sampler}-{stream}-{chunk}"
    compiled = compile_path(model_dir, CompileOptions(board=board, group_size=group, kv_bits=kv_bits,
                                                      kernels="cortex-m7", sampler=sampler, stream=stream,
                                                      stream_chunk=chunk))
    write_tree(compiled.tree, out)
    build(out)
    return Built(model_dir, out, kv_bits), compiled


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("stream-host")


@pytest.mark.parametrize("shape,group,kv_bits,chunk", [
    ("qwen2-bias-untied", 32, 8, 1024),  # biases, untied classifier, several chunks per matrix
    ("llama-tied-gqa", 64, 4, None),  # int4 KV, one chunk per matrix (16 KiB)
    ("llama-hd8", 32, 8, 256),  # one tile per chunk at most
])
def test_streamed_host_matches_reference(root, shape, group, kv_bits, chunk):
    need("cmake")
    built, compiled = build_streamed(root, shape, group, "host", kv_bits, chunk=chunk)
    src = (built.out / "src" / "tllm_model.c").read_text()
    assert "tllm_stream_matvec_q4x4(&weight_stream" in src and "tllm_stream_embed_q4x4" in src
    assert "tllm_matvec_q4x4(" not in src  # every matrix goes through the stream (the loop passes L->w, not &W_)
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
    doc = json.loads((built.out / "report.json").read_text())["stream_schedule"]
    assert doc["chunks_per_step"] == len(doc["chunks"]) > 0
    if chunk:
        assert all(c["nbytes"] <= chunk or c["rows"] <= 4 for c in doc["chunks"])


def test_streamed_greedy_classifier_host(root):
    """--sampler greedy: the classifier's argmax over the stream's chunks."""
    need("cmake")
    built, _ = build_streamed(root, "qwen2-bias-untied", 32, "host", sampler="greedy", chunk=2048)
    assert "tllm_stream_argmax_q4x4" in (built.out / "src" / "tllm_model.c").read_text()
    assert_identical(built, 32, GREEDY)
