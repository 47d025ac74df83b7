"""Regression (issue 11): the emitter kept only a model's first 4 EOS ids
while the reference stops at any of them, so a model with more diverged
silently.  Here the 6th EOS id is a token the model generates: firmware and
reference must both stop there."""
import json

import pytest

from firmware_harness import GREEDY, SHAPES, SHAPES_CONTEXT, build_case, need, prompt_for, reference_tokens
from tinymodels import make_hf_model
from tinyllm_gen.run.firmware import run_firmware
from bounds import BACKSTOP_S

pytestmark = pytest.mark.host


def test_firmware_stops_at_the_sixth_eos_id(tmp_path):
    need("gcc")
    need("cmake")
    shape, group = "llama-tied-gqa", 32
    free = build_case(tmp_path / "free", shape, group, "host")  # no EOS: the model's own free run
    ids = prompt_for(free.model_dir)
    ref = reference_tokens(free.model_dir, group, ids, GREEDY, SHAPES_CONTEXT)
    stop_at = next(i for i in range(5, len(ref)) if ref[i] not in ref[:i])
    others = [t for t in range(300) if t not in ref[:stop_at + 1]][:5]
    config = json.loads((free.model_dir / "config.json").read_text())
    config["eos_token_id"] = others + [ref[stop_at]]
    (free.model_dir / "config.json").write_text(json.dumps(config))
    eos_dir = tmp_path / "eos" / f"model-{shape}"
    make_hf_model(eos_dir, eos=None, **SHAPES[shape])  # the same seeded weights
    (eos_dir / "config.json").write_text(json.dumps(config))
    built = build_case(tmp_path / "eos", shape, group, "host")
    fw = run_firmware(built.out, ids, 40, GREEDY, timeout_s=BACKSTOP_S)
    assert fw.output.generated_ids == ref[:stop_at + 1]
    assert fw.output.stop_reason == "eos"
    assert reference_tokens(built.model_dir, group, ids, GREEDY, SHAPES_CONTEXT) == ref[:stop_at + 1]
