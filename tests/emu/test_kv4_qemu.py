"""Emulator tier, int4 KV cache: the Cortex-M7 build under QEMU == numpy reference (--kv-rotate auto:
Hadamard-rotated k and q where head_dim is a power of two, tllm_attention_kv4_hadamard)."""
import pytest

from firmware_harness import GREEDY, KV4_CASES, KV4_ROTATION, TOP_P, assert_identical, build_case, need, rotation_of

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("qemu-kv4")


@pytest.mark.parametrize("shape,group", KV4_CASES)
def test_cortex_m7_int4_kv_matches_reference(root, shape, group):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    built = build_case(root, shape, group, "qemu-mps2-an500", kv_bits=4)
    assert rotation_of(built.out) == KV4_ROTATION[shape]
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
