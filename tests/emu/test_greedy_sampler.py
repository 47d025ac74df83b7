"""`--sampler greedy`: the classifier computed in 64-row chunks with a running
argmax, no logits vector and no sampler scratch in RAM.  The tokens must be
the reference's greedy tokens bit for bit (portable q4 and q4x4 kernels on
the host, the M7 kernels under QEMU; a 300-token vocabulary makes five
chunks, the last one short), and requests that sample are refused on both
sides of the wire."""
import pytest

from firmware_harness import GREEDY, TOP_P, assert_identical, build_case, need, prompt_for
from tinyllm_gen.errors import UserError
from tinyllm_gen.build.out import image_path
from tinyllm_gen.run.firmware import run_firmware
from tinyllm_gen.run.protocol import pack_request, parse_output
from tinyllm_gen.board import load_board
from tinyllm_gen.run.qemu import run_qemu
from bounds import BACKSTOP_S

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("greedy")


@pytest.mark.parametrize("shape,group,board,kernels", [("llama-tied-gqa", 32, "host", "portable"),
                                                       ("qwen2-bias-untied", 64, "host", "cortex-m7"),
                                                       ("llama-tied-gqa", 32, "qemu-mps2-an500", "auto"),
                                                       ("qwen2-bias-untied", 128, "qemu-mps2-an500", "auto")])
def test_greedy_build_matches_reference(root, shape, group, board, kernels):
    need("cmake")
    if board != "host":
        need("arm-none-eabi-gcc")
        need("qemu-system-arm")
    built = build_case(root, shape, group, board, kernels=kernels, sampler="greedy")
    assert_identical(built, group, GREEDY)
    plan = (built.out / "report.json").read_text()
    assert '"sample_idx"' not in plan
    with pytest.raises(UserError, match="compiled with --sampler greedy: run it with --temperature 0"):
        run_firmware(built.out, prompt_for(built.model_dir), 4, TOP_P)


def test_firmware_refuses_a_sampling_request(root, tmp_path):
    """A request that bypasses the host check still meets the firmware's."""
    need("arm-none-eabi-gcc")
    need("qemu-system-arm")
    need("cmake")
    built = build_case(root, "llama-tied-gqa", 32, "qemu-mps2-an500", sampler="greedy")
    board = load_board("qemu-mps2-an500")
    request = tmp_path / "request.bin"
    request.write_bytes(pack_request(prompt_for(built.model_dir), 4, TOP_P, 0))
    res = run_qemu(image_path(built.out, board), board, built.out / "weights.bin", request, timeout_s=BACKSTOP_S)
    assert res.exit_code == 3
    assert "decodes greedily only (compiled with --sampler greedy)" in parse_output(res.output).error
