"""`--classifier-quant q4` (quant/classifier_q4.py): a kept Q8_0 classifier
re-rounded into llama.cpp's Q4_0 blocks.  The blocks decode as Q4_0 does
(value = d * (q - 8), fp16 d), every weight lands within half a step of
its block's scale where it is not clipped, the activation weighting moves
error away from the columns that see large inputs, and the option is
refused where there is no kept classifier to re-round."""
import numpy as np
import pytest

from tinyllm_gen.compile import CompileOptions, compile_path
from tinyllm_gen.errors import UserError
from tinyllm_gen.quant.classifier_q4 import q4_0_blocks
from tinyllm_gen.quant.formats import GGUF_BLOCK, dequantize_gguf, gguf_fields

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _w(seed=0, rows=24, cols=128):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)


def test_blocks_decode_as_q4_0_with_fp16_scales():
    w = _w()
    t = q4_0_blocks("output.weight", w, None)
    assert t.qtype == "Q4_0" and t.data.shape == (24, 128 // GGUF_BLOCK * 18)
    d, _, q = gguf_fields("Q4_0", t.data, 128)
    assert d.dtype == np.float32 and np.all(d == d.astype(np.float16).astype(np.float32))
    assert q.min() >= 0 and q.max() <= 15  # gguf_fields gives the stored nibbles, value = d * (q - 8)
    back = dequantize_gguf("Q4_0", t.data, 128)
    step = np.repeat(d, GGUF_BLOCK, axis=1)
    inside = (np.abs(w) <= 7 * step)  # not clipped by the search
    assert np.all(np.abs(back - w)[inside] <= step[inside] / 2 + 1e-7)
    assert np.sqrt(np.mean((back - w) ** 2)) < 0.2 * np.sqrt(np.mean(w ** 2))


def test_activation_weighting_favours_the_loud_columns():
    w = _w(1)
    h = np.ones(128, np.float32)
    h[:8] = 1000.0  # eight columns see large activations
    plain = dequantize_gguf("Q4_0", q4_0_blocks("o", w, None).data, 128)
    weighted = dequantize_gguf("Q4_0", q4_0_blocks("o", w, h).data, 128)
    err = lambda b: float(np.sum(((b - w) ** 2) * h))  # noqa: E731  the error the classifier's output sees
    assert err(weighted) <= err(plain)


def test_deterministic():
    w = _w(2)
    assert q4_0_blocks("o", w, None).data.tobytes() == q4_0_blocks("o", w, None).data.tobytes()


def test_refused_without_a_kept_classifier():
    with pytest.raises(UserError, match="--classifier-quant q4 re-rounds a GGUF file's kept classifier"):
        compile_path(ROOT / "models" / "story-260k", CompileOptions(classifier_quant="q4"))
