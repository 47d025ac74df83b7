"""Emulator tier, the 8:4 KV cache (--kv-bits 8:4: int8 K, int4 V): the Cortex-M7 build under QEMU ==
numpy reference, greedy and top-p.  head_dim 16 keeps one value group per head, 48 has two groups of
24 (the M7's SMLAD value pass per group); the rolling 8:4 build is in test_rolling_qemu.py."""
import pytest

from firmware_harness import GREEDY, TOP_P, assert_identical, build_case, need

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("qemu-k8v4")


@pytest.mark.parametrize("shape,group", [("llama-tied-gqa", 32), ("llama-hd48", 32)])
def test_cortex_m7_k8v4_kv_matches_reference(root, shape, group):
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    built = build_case(root, shape, group, "qemu-mps2-an500", kv_bits="8:4")
    step = "\n".join(p.read_text() for p in built.out.rglob("tllm_model*.c"))
    assert "tllm_attention_k8v4(" in step and "tllm_attention_i8(" not in step
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)
