"""Hypothesis where it fits: option values and small binary files, shrunk
to a minimal failing input when the promise breaks (seeded by hypothesis's
own database-free derandomized mode, so CI runs are repeatable)."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fuzz_generators as fg
from fuzz_harness import Case, problem, run_in_process
from tinyllm_gen.errors import UserError

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    import json

    from safetensors.numpy import save_file
    from tinymodels import make_tokenizer

    d = tmp_path_factory.mktemp("hyp") / "m"
    d.mkdir()
    save_file(fg._hf_tensors(), str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(fg._config()))
    make_tokenizer(d, fg.VOCAB)
    return d


def _expect(argv, ok: bool):
    o = run_in_process(argv)
    why = problem(Case("hypothesis", argv, "ok" if ok else "error"), o)
    assert why is None, why


@SETTINGS
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12)))
def test_temperature_values(hf, t):
    text = repr(t) if isinstance(t, float) else t
    if "\x00" in text:
        return
    try:
        v = float(text)
        ok = math.isfinite(v) and (v == 0 or 1e-3 <= v <= 100)
    except ValueError:
        ok = False
    _expect(["reference", str(hf), "--fp32", "--max-new-tokens", "1", "--prompt", "a", "--temperature", text], ok)


@SETTINGS
@given(st.text(alphabet="0123456789KMGkmibB .-+_x", max_size=14))
def test_ram_budget_text(hf, s):
    o = run_in_process(["plan", str(hf), "--ram-budget", s])
    assert problem(Case("hypothesis", [], "any"), o) is None


@SETTINGS
@given(st.binary(min_size=0, max_size=400))
def test_llama2c_header_bytes(tmp_path_factory, data):
    """Any short file as a checkpoint: a UserError in one line (or a load)."""
    from tinyllm_gen.frontends import load_model

    p = tmp_path_factory.getbasetemp() / "hyp.bin"
    p.write_bytes(data)
    try:
        load_model(p)
    except UserError as e:
        assert "\n" not in str(e)


@SETTINGS
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=7, max_size=7), st.sampled_from([1, 2]))
def test_llama2c_header_fields(tmp_path_factory, fields, version):
    """Random header ints on a real v1/v2 payload: refused in one line, never a crash or a huge allocation."""
    from tinyllm_gen.frontends import load_model

    good = bytearray(fg._l2c_cache(version))
    struct.pack_into("<7i", good, 8, *fields)
    p = tmp_path_factory.getbasetemp() / "hypf.bin"
    p.write_bytes(bytes(good))
    try:
        load_model(p)
    except UserError as e:
        assert "\n" not in str(e)


@SETTINGS
@given(st.lists(st.floats(width=32), min_size=1, max_size=8))
def test_non_finite_weights_are_named(tmp_path_factory, values):
    from safetensors.numpy import save_file

    from tinyllm_gen.frontends.hf import _read_safetensors

    a = np.array(values, np.float32)
    p = tmp_path_factory.getbasetemp() / "hyp.safetensors"
    save_file({"w": a}, str(p))
    if np.isfinite(a).all():
        assert np.array_equal(_read_safetensors(p)["w"], a)
    else:
        with pytest.raises(UserError, match="tensor w holds"):
            _read_safetensors(p)
