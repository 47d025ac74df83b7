"""Issue 12: every bad input gets a clear one-line error.  One test per
defect the issue lists (each failed before its fix); the fuzz tier
(tests/fuzz) covers the same ground with generated inputs."""
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import fuzz_generators as fg
from tinyllm_gen.errors import UserError
from tinyllm_gen.frontends import load_model
from tinyllm_gen.frontends.tokenizer import Tokenizer, _Llama2cCodec


# ------------------------------------------------------------------ helpers


def cli(*argv, timeout=300):  # backstops, never measures: a loaded machine is slow
    """In-process `tinyllm-gen ARGV` -> (exit status, stdout, stderr); a
    SIGALRM timeout turns a hang into a test failure."""
    from tinyllm_gen.cli import main

    def alarm(*_):
        raise TimeoutError("hang")

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def one_line_error(argv, *needles, timeout=300):
    code, _, err = cli(*argv, timeout=timeout)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tinyllm-gen: error: "), (code, err)
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def refused(fn, *needles):
    with pytest.raises(UserError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> Path:
    """A tiny Llama folder (numpy + safetensors, no torch) with a 300-token tokenizer."""
    from tinymodels import make_tokenizer

    d = tmp_path_factory.mktemp("hf") / "m"
    d.mkdir()
    save_file(fg._hf_tensors(), str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(fg._config()))
    make_tokenizer(d, fg.VOCAB)
    return d


def variant(hf: Path, dst: Path, **files) -> Path:
    dst.mkdir()
    for f in hf.iterdir():
        if f.name not in files:
            os.link(f, dst / f.name)
    for name, content in files.items():
        if content is not None:
            (dst / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return dst


def config_with(hf: Path, **over) -> str:
    cfg = json.loads((hf / "config.json").read_text())
    cfg.update(over)
    return json.dumps(cfg)


def no_leftovers(parent: Path):
    assert not [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


# ------------------------------------------------------------- output paths


def test_write_failing_mid_compile_disk_full(hf, tmp_path, monkeypatch):
    from tinyllm_gen.compile import compile_path, write_tree, CompileOptions

    tree = compile_path(hf, CompileOptions(board="host")).tree
    calls = {"n": 0}
    real = Path.write_bytes

    def full(self, data):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(28, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    out = tmp_path / "new" / "out"
    refused(lambda: write_tree(tree, out), "disk is full", "nothing was written")
    assert not (tmp_path / "new").exists()  # the parent it made is removed again
    monkeypatch.setattr(Path, "write_bytes", real)
    write_tree(tree, out)  # an earlier output survives a failed rewrite
    before = sorted(p.name for p in out.iterdir())
    calls["n"] = 0
    monkeypatch.setattr(Path, "write_bytes", full)
    refused(lambda: write_tree(tree, out), "disk is full")
    assert sorted(p.name for p in out.iterdir()) == before
    no_leftovers(out.parent)


def test_write_failing_mid_compile_file_size_limit(hf, tmp_path):
    """EFBIG from RLIMIT_FSIZE (Python ignores SIGXFSZ, so the write fails)."""
    out = tmp_path / "out"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))

    p = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "compile", str(hf), "-o", str(out), "--board",
                        "host"], capture_output=True, text=True, preexec_fn=limit, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "file-size limit" in lines[0], p.stderr
    assert not out.exists()
    no_leftovers(tmp_path)


def test_out_dangling_symlink(hf, tmp_path):
    os.symlink(tmp_path / "missing", tmp_path / "link")
    one_line_error(["compile", hf, "-o", tmp_path / "link", "--board", "host"], "symlink", "does not exist")


def test_out_symlink_to_directory_is_written_through(hf, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(target, tmp_path / "link")
    for _ in range(2):  # new, then over its own earlier output
        code, _, err = cli("compile", hf, "-o", tmp_path / "link", "--board", "host")
        assert code == 0, err
        assert (tmp_path / "link").is_symlink() and (target / "manifest.json").is_file()
        no_leftovers(tmp_path)


@pytest.mark.parametrize("name_bytes", [256, 1000])
def test_out_path_component_too_long(hf, tmp_path, name_bytes):
    one_line_error(["compile", hf, "-o", tmp_path / ("x" * name_bytes) / "o", "--board", "host"], "longer")


def test_out_under_an_existing_file(hf, tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(["compile", hf, "-o", tmp_path / "f" / "out", "--board", "host"], "not a directory")


@pytest.mark.parametrize("where", ["/proc/tinyllm-out", "/sys/tinyllm-out", "/proc/self/out"])
def test_out_in_proc_or_sys(hf, where):
    one_line_error(["compile", hf, "-o", where, "--board", "host"], "pseudo-filesystem")


# ---------------------------------------------------------------- frontends


def _tiny_onnx(path: Path, table: np.ndarray, truncate: bool = False):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    t = numpy_helper.from_array(table, "table")
    if truncate:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2]
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["h"])], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4, table.shape[1]])], [t])
    onnx.save(helper.make_model(g), str(path))


def test_onnx_truncated_initializer(hf, tmp_path):
    pytest.importorskip("onnx")
    d = variant(hf, tmp_path / "o", **{"model.safetensors": None})
    _tiny_onnx(d / "model.onnx", np.ones((fg.VOCAB, fg.DIM), np.float32), truncate=True)
    refused(lambda: load_model(d), "initializer table", "truncated")


def test_onnx_integer_initializer_is_not_cast(hf, tmp_path):
    pytest.importorskip("onnx")
    d = variant(hf, tmp_path / "o", **{"model.safetensors": None})
    _tiny_onnx(d / "model.onnx", np.ones((fg.VOCAB, fg.DIM), np.int32))
    refused(lambda: load_model(d), "table", "int32")


def test_invalid_utf8_prompt(hf):
    # argv bytes that are not UTF-8 reach Python as lone surrogates
    one_line_error(["reference", hf, "--fp32", "--prompt", b"the \xff cat".decode("utf-8", "surrogateescape")],
                   "UTF-8")


def test_invalid_utf8_prompt_subprocess(hf):
    p = subprocess.run([sys.executable.encode(), b"-m", b"tinyllm_gen.cli", b"reference", bytes(hf), b"--fp32",
                        b"--prompt", b"the \xff cat"], capture_output=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and b"UTF-8" in lines[0], p.stderr


def _l2c_tokenizer(n_pieces: int) -> bytes:
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [f"<0x{b:02X}>".encode() for b in range(256)] + [b" ", b"a"]
    pieces = pieces[:n_pieces]
    return struct.pack("<i", 8) + b"".join(struct.pack("<fi", 0.0, len(p)) + p for p in pieces)


def test_llama2c_tokenizer_without_byte_pieces(tmp_path):
    (tmp_path / "t.bin").write_bytes(_l2c_tokenizer(40))
    refused(lambda: Tokenizer.from_llama2c(tmp_path / "t.bin"), "259")


def test_top_p_nan(hf):
    one_line_error(["reference", hf, "--fp32", "--temperature", "1", "--top-p", "nan"], "--top-p")


@pytest.mark.parametrize("over,needle", [
    ({"partial_rotary_factor": "half"}, "partial_rotary_factor"),
    ({"layer_types": "full_attention"}, "layer_types"),
    ({"layer_types": 3}, "layer_types"),
    ({"num_hidden_layers": 10**12}, "num_hidden_layers"),
    ({"hidden_size": 2**40}, "hidden_size"),
    ({"max_position_embeddings": 2**64}, "max_position_embeddings"),
    ({"sliding_window": "none"}, "sliding_window"),
])
def test_bad_config_values_refused_by_name(hf, tmp_path, over, needle):
    d = variant(hf, tmp_path / "m", **{"config.json": config_with(hf, **over)})
    t0 = time.monotonic()
    refused(lambda: load_model(d), needle)
    assert time.monotonic() - t0 < 5  # refused before anything proportional is allocated


def test_deeply_nested_json(hf, tmp_path):
    deep = '{"architectures": ' + "[" * 100000 + "]" * 100000 + "}"
    d = variant(hf, tmp_path / "m", **{"config.json": deep})
    refused(lambda: load_model(d), "nested too deeply")
    d2 = variant(hf, tmp_path / "t", **{"tokenizer.json": deep})
    refused(lambda: load_model(d2), "tokenizer.json", "nested too deeply")


def test_llama2c_absurd_layer_count(tmp_path):
    good, _ = fg._l2c_v(1)
    buf = bytearray(good)
    struct.pack_into("<i", buf, 8 + 4 * 2, 2**31 - 1)
    (tmp_path / "m.bin").write_bytes(bytes(buf))
    refused(lambda: load_model(tmp_path / "m.bin"), "n_layers")


def test_tokenizer_larger_than_vocabulary(hf, tmp_path):
    t = json.loads((hf / "tokenizer.json").read_text())
    t["model"]["vocab"]["extra"] = fg.VOCAB
    d = variant(hf, tmp_path / "m", **{"tokenizer.json": json.dumps(t)})
    refused(lambda: load_model(d), "vocab_size")
    one_line_error(["reference", d, "--fp32", "--prompt", "extra"], "vocab_size")


def test_tokenizer_smaller_than_vocabulary_is_accepted(hf, tmp_path):
    """Decision: a model's embedding is often padded past its tokenizer
    (Phi-3: 32064 rows, 32011 tokens); ids past the tokenizer print nothing."""
    d = variant(hf, tmp_path / "m", **{"config.json": config_with(hf, vocab_size=fg.VOCAB + 20)})
    t = fg._hf_tensors()
    for k in ("model.embed_tokens.weight", "lm_head.weight"):
        t[k] = np.concatenate([t[k], np.zeros((20, fg.DIM), np.float32)])
    os.unlink(d / "model.safetensors")
    save_file(t, str(d / "model.safetensors"))
    assert load_model(d).tokenizer.vocab_size == fg.VOCAB
    code, _, err = cli("compile", d, "-o", tmp_path / "out", "--board", "host")
    assert code == 0, err


def test_binary_calibration_text(hf, tmp_path):
    (tmp_path / "c.txt").write_bytes(bytes(range(256)))
    one_line_error(["reference", hf, "--quant", "per-channel", "--calibration", tmp_path / "c.txt"], "UTF-8")


@pytest.mark.parametrize("content", [b"\xff", b"[]", b'{"board": 3}', b"[" * 100000])
def test_garbage_manifest(tmp_path, content):
    (tmp_path / "manifest.json").write_bytes(content)
    one_line_error(["report", tmp_path], "manifest.json")
    one_line_error(["build", tmp_path], "manifest.json")


# --------------------------------------------------------------------- hangs


def test_100kb_prompt_on_llama2c_tokenizer(tmp_path):
    good, _ = fg._l2c_v(1)
    (tmp_path / "m.bin").write_bytes(good)
    (tmp_path / "t.bin").write_bytes(fg._l2c_tokenizer())
    t0 = time.monotonic()
    one_line_error(["reference", tmp_path / "m.bin", "--tokenizer", tmp_path / "t.bin", "--fp32", "--prompt",
                    "the cat " * 12800], "context", timeout=300)
    assert time.monotonic() - t0 < 15


def _merge_like_run_c(codec: _Llama2cCodec, ids: list[int]) -> list[int]:
    """run.c's loop verbatim (rescan after every merge): the oracle."""
    ids = list(ids)
    while True:
        best, best_i, best_id = -1e10, -1, -1
        for i in range(len(ids) - 1):
            tid = codec.lookup.get(codec.pieces[ids[i]] + codec.pieces[ids[i + 1]])
            if tid is not None and codec.scores[tid] > best:
                best, best_i, best_id = codec.scores[tid], i, tid
        if best_i < 0:
            return ids
        ids[best_i:best_i + 2] = [best_id]


def test_fast_merge_equals_run_c_loop():
    from hypothesis import given, settings, strategies as st

    rng = np.random.default_rng(0)
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [bytes([b]) for b in range(256)]
    words = {b"ab", b"ba", b"aa", b"abc", b"bc", b"cab", b"abab", b"aab", b"ca", b"cc", b"ccc", b"bcb"}
    pieces += sorted(words)
    scores = [0.0] * 259 + [float(rng.choice([1.0, 2.0, 3.0, rng.normal()])) for _ in words]  # ties on purpose
    codec = _Llama2cCodec(pieces, scores)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from([ord("a") + 3, ord("b") + 3, ord("c") + 3]), max_size=40))
    def check(ids):
        assert codec._merge(list(ids)) == _merge_like_run_c(codec, ids)

    check()


def test_fifo_as_model_file(hf, tmp_path):
    """In a subprocess with a timeout: opening a FIFO blocks inside Rust
    (safetensors, tokenizers), where no in-process alarm interrupts it."""
    d = variant(hf, tmp_path / "m", **{"model.safetensors": None})
    os.mkfifo(d / "model.safetensors")
    os.mkfifo(tmp_path / "m.bin")
    t = variant(hf, tmp_path / "t", **{"tokenizer.json": None})
    os.mkfifo(t / "tokenizer.json")
    for path, needle in ((d, "model.safetensors"), (tmp_path / "m.bin", "m.bin"), (t, "tokenizer.json")):
        try:
            p = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "inspect", str(path)], capture_output=True,
                               text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"inspect {path} hangs on a FIFO")
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr


# ------------------------------------------------------- accepted but invalid


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_safetensors_weight(hf, tmp_path, value):
    t = fg._hf_tensors()
    t["model.layers.1.mlp.up_proj.weight"][3, 4] = value
    d = variant(hf, tmp_path / "m", **{"model.safetensors": None})
    save_file(t, str(d / "model.safetensors"))
    refused(lambda: load_model(d), "model.layers.1.mlp.up_proj.weight", "non-finite")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_non_finite_llama2c_weight_or_scale(tmp_path, version):
    good, spans = fg._l2c_v(version)
    kind = "scale" if version == 2 else "f32"
    s0 = [s for s in spans if s[2] == kind][3][0]
    buf = bytearray(good)
    struct.pack_into("<f", buf, s0, float("nan"))
    (tmp_path / "m.bin").write_bytes(bytes(buf))
    msg = refused(lambda: load_model(tmp_path / "m.bin"), "non-finite")
    assert "layers." in msg or "norm" in msg or "tok_embeddings" in msg


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tinymodels import export_onnx, make_hf_model

    root = tmp_path_factory.mktemp("onnx")
    src = make_hf_model(root / "hf", dim=32, hidden=48, layers=1, heads=4, kv_heads=2, vocab=300, context=32,
                        tied=False, seed=2)
    return export_onnx(src, root / "export")


def test_non_finite_onnx_weight(onnx_export, tmp_path):
    import shutil

    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_export / "model.onnx"))
    table = load_model(onnx_export).graph.weights["layers.0.w_down"]
    t = next(t for t in model.graph.initializer
             if numpy_helper.to_array(t).shape in (table.shape, table.T.shape)
             and np.array_equal(numpy_helper.to_array(t).reshape(-1), (table.T if numpy_helper.to_array(t).shape
                                                                        == table.T.shape else table).reshape(-1)))
    a = numpy_helper.to_array(t).copy()
    a.reshape(-1)[7] = np.inf
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    d = tmp_path / "o"
    d.mkdir()
    onnx.save(model, str(d / "model.onnx"))
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(onnx_export / f, d / f)
    refused(lambda: load_model(d), "layers.0.w_down", "non-finite")


def test_temperature_nan_and_inf(hf):
    one_line_error(["reference", hf, "--fp32", "--temperature", "nan"], "--temperature")
    one_line_error(["reference", hf, "--fp32", "--temperature", "inf"], "--temperature")  # decision: refused


def test_top_p_subnormal_refused(hf):
    one_line_error(["reference", hf, "--fp32", "--temperature", "1", "--top-p", "1e-45"], "--top-p")


def test_reference_checks_ram_budget(hf):
    one_line_error(["reference", hf, "--fp32", "--ram-budget", "12Q"], "--ram-budget")


def test_max_new_tokens_huge_stops_at_context(hf):
    """Decision: accepted up to the request's uint32 field; generation stops at the context's end."""
    code, out, err = cli("reference", hf, "--fp32", "--max-new-tokens", "1000000000", "--json")
    assert code == 0, err
    assert json.loads(out)["stop_reason"] in ("context", "eos")
    one_line_error(["reference", hf, "--fp32", "--max-new-tokens", str(2**32)], "--max-new-tokens")


def test_click_option_errors_are_one_line(hf):
    one_line_error(["compile", hf], "-o")
    one_line_error(["reference", hf, "--no-such-option"], "--no-such-option")
    one_line_error(["plan", hf, "--group-size", "7"], "--group-size")
    p = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "compile", str(hf)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
