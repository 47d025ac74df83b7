"""Emulator tier: `--sampler topk:K` under QEMU mps2-an500 with the Cortex-M7
assembly kernels, in place and over the weight stream, and on the WeAct
STM32H750 under Unicorn with the MDMA streaming the classifier: the sampled
tokens equal the reference's (reference.generate(top_k=K)) bit for bit; K
larger than a 64-row chunk, a vocabulary (320) that is not a multiple of it."""
import pytest

from firmware_harness import need
from topk_firmware import SAMPLINGS, build_topk, check_all, model
from bounds import BACKSTOP_S

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


def test_topk_streamed_weact_under_unicorn(root):
    """The STM32H750 case the sampler is for: the classifier streamed by the
    MDMA (its misuse rules armed), the set in SRAM, a hot temperature."""
    pytest.importorskip("unicorn", reason="pip install unicorn (a test extra)")
    need("arm-none-eabi-gcc")
    need("cmake")
    from firmware_harness import prompt_for
    from topk_firmware import reference
    from tinyllm_gen.board import load_board
    from tinyllm_gen.run.protocol import pack_request, parse_output
    from tinyllm_gen.run.unicorn import run_unicorn
    from tinyllm_gen.reference.sampler import SamplingOptions

    path = model(root, "qwen2-bias-untied")
    out = build_topk(root, path, "qwen2-weact", 5, board="weact-h750", stream="all", stream_chunk=4096)
    ids, sampling = prompt_for(path), SamplingOptions(1.2, 0.9, 42)
    request = out / "build" / "request.bin"
    request.write_bytes(pack_request(ids, 6, sampling, 0))
    res = run_unicorn(out / "build" / "firmware.elf", load_board("weact-h750"), out / "weights.bin", request,
                      timeout_s=BACKSTOP_S)
    assert res.exit_code == 0 and not res.error and res.violations == []
    assert parse_output(res.output.decode(errors="replace")).generated_ids == reference(path, ids, sampling, 5)[:6]
