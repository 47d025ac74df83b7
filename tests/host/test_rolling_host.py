"""Rolling context in the host build (gcc): 4 x max_seq tokens equal to the
reference's, int8 and int4 KV; a prompt that does not fit is refused at the
host with one line."""
import pytest

from firmware_harness import need
from rolling import MAX_SEQ, built, check_rolls
from tinyllm_gen.errors import UserError
from tinyllm_gen.reference.sampler import SamplingOptions
from tinyllm_gen.run.firmware import run_firmware

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("rolling-host")


@pytest.mark.parametrize("opts", [dict(context_policy="roll"), dict(context_policy="roll", kv_bits=4)],
                         ids=["kv8", "kv4"])
def test_rolling_context_on_the_host_is_the_references(root, opts):
    need("gcc")
    need("cmake")
    check_rolls(built(root, "host", **opts), opts)


def test_a_prompt_longer_than_the_context_is_refused(root):
    need("gcc")
    need("cmake")
    out = built(root, "host", context_policy="roll")
    with pytest.raises(UserError, match=f"the prompt is {MAX_SEQ} tokens.*rolling: the prompt must still fit"):
        run_firmware(out, [1] * MAX_SEQ, 4, SamplingOptions())
