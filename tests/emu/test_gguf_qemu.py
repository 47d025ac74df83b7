"""Emulator tier: tiny GGUF models with their llama.cpp blocks kept, the
Cortex-M7 build under QEMU mps2-an500 (the SMLAD integer block sums of
tllm_kernels_gguf.c) == QuantKernels, token for token."""
import pytest

from firmware_harness import GREEDY, TOP_P, need
from gguf_firmware import GGUF_CASES, assert_gguf_identical, build_gguf, gguf_case, subnormal_fp16_fields

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf-qemu")


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_cortex_m7_gguf_blocks_under_qemu_match_reference(root, case):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    path, out = build_gguf(root, case, "qemu-mps2-an500")
    counts = assert_gguf_identical(path, out, GREEDY)
    assert_gguf_identical(path, out, TOP_P)
    assert all(n > 0 for n in counts)


def test_cortex_m7_greedy_build_under_qemu_matches_reference(root):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    path, out = build_gguf(root, "llama-q4_1-embd-q8_0", "qemu-mps2-an500", sampler="greedy")
    assert_gguf_identical(path, out, GREEDY)


def test_the_subnormal_case_has_subnormal_scales(root):
    """What makes qwen2-q8_0-subnormal-embd a test of VCVTB.F32.F16 on subnormals."""
    assert subnormal_fp16_fields(gguf_case(root, "qwen2-q8_0-subnormal-embd")) >= 600  # every embedding block
