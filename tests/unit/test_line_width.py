"""Every line the generator writes, and every line of the C runtime and
board code it copies, fits 120 columns (c_calls.LINE_WIDTH): the generated
tree is meant to be read.  The runtime's #error messages are one string each
and may be longer."""
from pathlib import Path

import pytest

from tinyllm_gen.compile import CompileOptions, compile_path
from tinyllm_gen.kernels.c_text import LINE_WIDTH

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
TEXT = (".c", ".h", ".S", ".ld", ".txt", ".cmake", ".resc", ".repl")  # JSON is data (board.json, report.json)


def long_lines(name: str, text: str) -> list[str]:
    return [f"{name}:{i}: {len(line)} columns" for i, line in enumerate(text.splitlines(), 1)
            if len(line) > LINE_WIDTH and not line.lstrip().startswith("#error")]


@pytest.mark.parametrize("opts", [dict(board="stm32h750b-dk", stream="all"), dict(board="weact-h750", kv_bits=4),
                                  dict(board="qemu-mps2-an500", unroll_layers=True, prefill_batch=3),
                                  dict(board="host", kernels="portable", sampler="topk:8")],
                         ids=["dk-stream", "weact-kv4", "qemu-unrolled", "host-topk"])
def test_generated_files_fit_the_line_width(opts):
    files = compile_path(STORY, CompileOptions(max_seq=64, **opts)).tree.files
    bad = [ln for name, data in sorted(files.items()) if name.endswith(TEXT) and not name.startswith("report")
           and name != "manifest.json" for ln in long_lines(name, data.decode("utf-8", "replace"))]
    assert bad == []
