"""Emulator tier: `--sampler topk:K` under QEMU mps2-an500 with the Cortex-M7
assembly kernels, in place and over the weight stream: the sampled tokens
equal the reference's (reference.generate(top_k=K)) bit for bit; K larger
than a 64-row chunk, a vocabulary (320) that is not a multiple of it."""
import pytest

from firmware_harness import need
from topk_firmware import SAMPLINGS, build_topk, check_all, model

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("topk-qemu")


@pytest.mark.parametrize("k,stream", [(100, "off"), (3, "all")])
def test_topk_under_qemu(root, k, stream):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    path = model(root, "qwen2-bias-untied")
    out = build_topk(root, path, f"qwen2-{stream}", k, board="qemu-mps2-an500", stream=stream,
                     stream_chunk=1024 if stream == "all" else None)
    src = (out / "src" / "tllm_model.c").read_text()
    assert ("tllm_stream_topk_q4x4(" if stream == "all" else "tllm_topk_q4x4(") in src
    check_all(out, path, k, SAMPLINGS)
