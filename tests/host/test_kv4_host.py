"""Host tier, int4 KV cache: generated firmware with --kv-bits 4 built with
the host gcc against the quantized reference, token for token.  The kernels
themselves (tllm_quantize_i4, tllm_attention_kv4, tllm_hadamard_heads,
tllm_attention_kv4_hadamard) are in the kernel registry
(tests/host/test_kernel_twins.py).  --kv-rotate auto rotates k and q where
head_dim is a power of two (16 and 8 here; 48 stays unrotated), and one
case asks for no rotation."""
import subprocess
import sys
from pathlib import Path

import pytest

from firmware_harness import GREEDY, KV4_CASES, KV4_ROTATION, TOP_P, assert_identical, build_case, need, rotation_of

pytestmark = pytest.mark.host

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-kv4")


@pytest.mark.parametrize("shape,group,rotate", [(s, g, "auto") for s, g in KV4_CASES] + [("llama-tied-gqa", 32, "off")])
def test_host_build_with_int4_kv_matches_reference(root, shape, group, rotate):
    need("cmake")
    built = build_case(root, shape, group, "host", kv_bits=4, kv_rotate=rotate)
    assert rotation_of(built.out) == (KV4_ROTATION[shape] if rotate == "auto" else rotate)
    assert_identical(built, group, GREEDY)
    assert_identical(built, group, TOP_P)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *args], capture_output=True, text=True,
                          timeout=1800)


def test_bundled_model_int4_kv_hadamard_is_the_reference(tmp_path):
    """story-260k (head_dim 8) with int4 KV, rotated: run --check compares
    the host firmware's tokens with the reference's, greedy and sampled."""
    need("cmake")
    out = tmp_path / "out"
    for step in (("compile", str(ROOT / "models" / "story-260k"), "-o", str(out), "--board", "host",
                  "--kv-bits", "4", "--kv-rotate", "hadamard", "--max-seq", "96"), ("build", str(out))):
        r = _cli(*step)
        assert r.returncode == 0, r.stderr
    assert rotation_of(out) == "hadamard"
    for sampling in ((), ("--temperature", "0.9", "--top-p", "0.85", "--seed", "7")):
        r = _cli("run", str(out), "--prompt", "Once upon a time", "--max-new-tokens", "60", "--check", *sampling)
        assert r.returncode == 0, r.stderr
        assert "--check: the 60 tokens are the reference's" in r.stderr
