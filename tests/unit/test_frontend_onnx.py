"""The ONNX frontend (frontends/onnx_model.py) on real exports: tiny random
transformers models (Llama with GQA and tied embeddings, Qwen2 with q/k/v
biases, Phi-3 with fused projections) exported by torch.onnx.export, then

* the weights it finds equal, bit for bit, what the Hugging Face frontend
  reads from the same model's safetensors;
* our float reference over the imported graph agrees with onnxruntime
  running the same model.onnx, position by position (the outside oracle);
* broken or foreign files fail with one line naming the problem."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxscript", reason="the dynamo ONNX exporter needs onnxscript (a test extra)")
ort = pytest.importorskip("onnxruntime")

from tinymodels import export_onnx, make_hf_model  # noqa: E402
from tinyllm_gen.errors import UserError  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402
from tinyllm_gen.reference.sequence import SeqFloatKernels, run_sequence  # noqa: E402

pytestmark = pytest.mark.oracle

SHAPES = {
    "llama": dict(arch="llama", dim=64, hidden=96, layers=2, heads=4, kv_heads=2, tied=True),
    "qwen2": dict(arch="qwen2", dim=64, hidden=96, layers=2, heads=4, kv_heads=2, tied=False),
    "phi3": dict(arch="phi3", dim=64, hidden=96, layers=2, heads=4, kv_heads=4, tied=False),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name, shape in SHAPES.items():
        hf = make_hf_model(root / f"{name}-hf", vocab=300, context=64, seed=21, **shape)
        out[name] = (hf, export_onnx(hf, root / f"{name}-onnx"))
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_weights_equal_the_safetensors_import(exported, name):
    hf_dir, onnx_dir = exported[name]
    a, b = load_model(onnx_dir), load_model(hf_dir)
    assert a.source.startswith("onnx:") and a.graph.config == b.graph.config
    assert set(a.graph.weights) == set(b.graph.weights)
    for k, v in b.graph.weights.items():
        assert np.array_equal(a.graph.weights[k], v), k
    assert a.tokenizer is not None and a.tokenizer.encode("Once") == b.tokenizer.encode("Once")


@pytest.mark.parametrize("name", list(SHAPES))
def test_float_reference_matches_onnxruntime(exported, name):
    _, onnx_dir = exported[name]
    model = load_model(onnx_dir / "model.onnx")
    tokens = [int(t) for t in np.random.default_rng(5).integers(0, 200, 24)]
    ours, _ = run_sequence(model.graph, SeqFloatKernels(model.graph, 64), tokens)
    sess = ort.InferenceSession(str(onnx_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"input_ids": np.asarray([tokens], np.int64)})[0][0]
    assert ours.shape == theirs.shape
    assert np.max(np.abs(ours - theirs)) <= 1e-4


def _copy(src, dst, drop=()):
    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    return dst


def test_missing_config_is_one_line(exported, tmp_path):
    d = _copy(exported["llama"][1], tmp_path / "m", drop=("config.json",))
    with pytest.raises(UserError, match=r"no config.json beside it; copy the config.json"):
        load_model(d)


def test_config_that_does_not_match_the_graph(exported, tmp_path):
    d = _copy(exported["llama"][1], tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"adds eps 1e-05 but config.json says rms_norm_eps 0.001"):
        load_model(d)
    cfg["rms_norm_eps"], cfg["num_hidden_layers"] = 1e-5, 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"config.json says 3 layers but the graph reaches its classifier after 2"):
        load_model(d)
    d = _copy(exported["qwen2"][1], tmp_path / "q")  # untied: its classifier is its own
    cfg = json.loads((d / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"config.json ties the embeddings, but the classifier differs"):
        load_model(d)


def test_not_a_decoder_and_not_onnx(exported, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    d = tmp_path / "mlp"
    d.mkdir()
    shutil.copy(exported["llama"][1] / "config.json", d / "config.json")
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    onnx.save(helper.make_model(g), str(d / "model.onnx"))
    with pytest.raises(UserError, match=r"no embedding lookup \(Gather of a constant 300x64 table"):
        load_model(d)
    (d / "model.onnx").write_bytes(b"not protobuf at all")
    with pytest.raises(UserError, match=r"not a readable ONNX model"):
        load_model(d / "model.onnx")


def test_cli_compiles_an_onnx_export(exported, tmp_path):
    """`inspect` and `compile` take the export directory like any model."""
    _, onnx_dir = exported["qwen2"]
    run = [sys.executable, "-m", "tinyllm_gen.cli"]
    proc = subprocess.run(run + ["inspect", str(onnx_dir)], capture_output=True, text=True)
    assert proc.returncode == 0 and "onnx:" in proc.stdout and "qwen2" in proc.stdout
    proc = subprocess.run(run + ["compile", str(onnx_dir), "-o", str(tmp_path / "out"), "--board", "host"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "weights.bin").is_file()


def test_onnx_package_missing_is_one_line(exported, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed
    with pytest.raises(UserError, match=r"needs the onnx package: pip install 'tinyllm-gen\[onnx\]'"):
        load_model(exported["llama"][1])


def test_weight_layouts_other_exporters_use():
    """MatMul on [in, out] (dynamo), MatMul on Transpose([out, in]) and Gemm
    with or without transB (TorchScript / optimum) all give [out, in]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tinyllm_gen.frontends.onnx_model import _OnnxGraph

    w = np.arange(12, dtype=np.float32).reshape(3, 4)  # [out=3, in=4]
    inits = [numpy_helper.from_array(w.T.copy(), "w_in_out"), numpy_helper.from_array(w, "w_out_in")]
    nodes = [helper.make_node("MatMul", ["x", "w_in_out"], ["a"]),
             helper.make_node("Transpose", ["w_out_in"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["b"]),
             helper.make_node("Gemm", ["x", "w_out_in"], ["c"], transB=1),
             helper.make_node("Gemm", ["x", "w_in_out"], ["d"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 3]) for o in "abcd"], inits)
    graph = _OnnxGraph(None, helper.make_model(g))
    for node in graph.nodes:
        if node.op_type != "Transpose":
            assert np.array_equal(graph.weight_of(node), w), node.output
    onnx.checker.check_model(helper.make_model(g))


def _patched(src, dst, change):
    """The export in `src` with `change(name, array) -> array | None` applied
    to its initializers, saved inline (no external data) into `dst`."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src / "model.onnx"))
    for t in m.graph.initializer:
        new = change(t.name, numpy_helper.to_array(t))
        if new is not None:
            t.CopyFrom(numpy_helper.from_array(new, t.name))
    dst.mkdir()
    onnx.save(m, str(dst / "model.onnx"))
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(src / f, dst / f)
    return dst


def test_nan_in_rotary_inv_freq_is_one_line(exported, tmp_path):
    """Issue 26: the compiler computes RoPE from rope_theta, so the exported
    graph's own inv_freq (which its cos/sin come from) is checked against it."""
    _, onnx_dir = exported["llama"]

    def nan_inv_freq(name, a):
        if name.endswith("rotary_emb.inv_freq"):
            a = a.copy()
            a[1] = np.nan
            return a

    d = _patched(onnx_dir, tmp_path / "m", nan_inv_freq)
    with pytest.raises(UserError, match=r"tensor \S*rotary_emb.inv_freq \(RoPE inverse frequencies\) does not match "
                                        r"the RoPE the compiler computes from rope_theta 10000 and head_dim 16: "
                                        r"value 1 is NaN, expected 0.316228; config.json's rope_theta must be"):
        load_model(d)
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "compile", str(d), "-o", str(tmp_path / "out"),
                           "--board", "host"], capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "inv_freq" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_rope_theta_that_is_not_the_exports(exported, tmp_path):
    d = _copy(exported["qwen2"][1], tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg.setdefault("rope_parameters", {"rope_type": "default"})["rope_theta"] = 500000.0  # transformers 5 spelling
    cfg["rope_theta"] = 500000.0
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"inv_freq \(RoPE inverse frequencies\) does not match the RoPE the "
                                        r"compiler computes from rope_theta 500000"):
        load_model(d)


def test_other_constants_are_named_as_ignored_and_nan_refused(exported, tmp_path):
    """The attention scale, mask fill and the norm's exponent: the compiled
    graph computes those parts itself, so `inspect` names them; NaN in any
    of them is refused."""
    _, onnx_dir = exported["llama"]
    m = load_model(onnx_dir)
    assert m.ignored and all("): not used, the compiled graph computes this part itself" in e for e in m.ignored)
    assert not any("inv_freq" in e or "weight" in e for e in m.ignored), m.ignored
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "inspect", str(onnx_dir)], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and f"ignored tensors ({len(m.ignored)}" in proc.stdout
    victim = m.ignored[0].split(" ")[0]
    d = _patched(onnx_dir, tmp_path / "m", lambda name, a: np.full_like(a, np.nan) if name == victim else None)
    with pytest.raises(UserError, match=rf"constant {victim} holds NaN; the file is corrupt"):
        load_model(d)
