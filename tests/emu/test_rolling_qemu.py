"""Rolling context on the Cortex-M7 under QEMU (mps2-an500): 4 x max_seq
tokens of the bundled model, greedy and a seeded top-p, int8, int4 and 8:4 KV,
plain and speculative, equal to the reference's, shift for shift."""
import pytest

from firmware_harness import need
from rolling import built, check_rolls

pytestmark = pytest.mark.emu

CASES = [dict(context_policy="roll"), dict(context_policy="roll:2", kv_bits=4),
         dict(context_policy="roll:2", kv_bits="8:4"), dict(context_policy="roll:4", speculate="lookup:3")]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("rolling-qemu")


@pytest.mark.parametrize("opts", CASES, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()).replace(":", ""))
def test_rolling_context_under_qemu_is_the_references(root, opts):
    need("arm-none-eabi-gcc")
    need("cmake")
    need("qemu-system-arm")
    check_rolls(built(root, "qemu-mps2-an500", **opts), opts)
