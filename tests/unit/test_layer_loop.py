"""The decode step as a loop over a per-layer descriptor table (issue 11.5,
codegen/emit/layer_table.py): chosen when the layers make the same calls,
unrolled when they do not or when `compile --unroll-layers` asks; every
generated line fits 120 columns.  Firmware tokens of the loop are checked by
the host and emulator tiers (the loop is the default); the unrolled form's by
test_unrolled_host_build_matches_reference here."""
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyllm_gen.compile import CompileOptions, compile_path
from tinyllm_gen.board import load_board
from tinyllm_gen.emit import emit_tree
from tinyllm_gen.emit.layer_table import step_form
from tinyllm_gen.kernels.c_names import check_unique, layer_field, layer_generic
from tinyllm_gen.kernels import Rope
from tinyllm_gen.kernels.refs import BufferRef
from tinyllm_gen.lower.records import KernelCall

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
LOOP = "for (int32_t l = 0; l < TLLM_N_LAYERS; l++) {"
MODES = {
    "default": CompileOptions(),
    "portable": CompileOptions(kernels="portable"),
    "kv4-greedy": CompileOptions(kv_bits=4, sampler="greedy"),
    "per-channel": CompileOptions(quant="per-channel", kernels="portable"),
    "stream-all": CompileOptions(board="host", kernels="cortex-m7", stream="all", stream_chunk=2048, max_seq=32),
    "weact-auto": CompileOptions(board="weact-h750", stream="auto"),
    "dk-unrolled": CompileOptions(board="stm32h750b-dk", unroll_layers=True),
}


@pytest.fixture(scope="module")
def compiled():
    return {name: compile_path(STORY, opts) for name, opts in MODES.items()}


def step_text(tree) -> str:
    src = tree.files["src/tllm_model.c"].decode()
    end = min(i for i in (src.find("static void model_layers("), src.index("float *tllm_model_prefill(")) if i >= 0)
    return src[src.index("float *tllm_model_step("):end]  # model_layers: a speculative build's prefill body


def test_bundled_model_runs_its_layers_as_one_loop(compiled):
    src = compiled["default"].tree.files["src/tllm_model.c"].decode()
    step = step_text(compiled["default"].tree)
    assert LOOP in step and "const tllm_layer *L = &LAYERS[l];" in step
    assert "static const tllm_layer LAYERS[TLLM_N_LAYERS] = {" in src
    for layer in range(5):  # designated initializers, one entry per layer
        assert f"    [{layer}] = {{.attention_norm = V_LAYERS_{layer}_ATTENTION_NORM, .wq = &W_LAYERS_{layer}_WQ" in src
    # 6 matrices in the loop body + the classifier after it, instead of 6 x 5 + 1
    assert step.count("tllm_matvec_q4x4(") == 7
    assert "tllm_matvec_q4x4(L->wq, B_L_I_XN_X16, 0, B_L_I_Q);" in step  # shared offsets stay literal macros
    assert "#define B_L_I_Q B_L0_Q /* l<i>.q float[64] @ram+0x" in src
    assert "&KV[l]" in step and "&KV[0]" not in step
    assert "B_X0" in step and "layer 0" not in step  # the residual stream is one buffer; comments are generic
    assert "/* attn.wq q4x4_matvec 64x64 g32 -> l<i>.q @ram+0x" in step
    for why in ("Attention norm:", "Q, K, V:", "RoPE:", "Attention over the KV cache:", "Output projection",
                "FFN norm:", "Gate and up projections", "SwiGLU:", "Down projection"):
        assert step.count(why) == 1, why
    assert "The 5 layers run as one loop" in step


@pytest.mark.parametrize("mode", [m for m in MODES if m != "dk-unrolled"])
def test_every_mode_loops(compiled, mode):
    step = step_text(compiled[mode].tree)
    assert LOOP in step and "---- layer" not in step


def test_modes_put_their_per_layer_arguments_in_the_table(compiled):
    pc = compiled["per-channel"].tree.files["src/tllm_model.c"].decode()
    assert "const tllm_fc_s4pc_layer *q_fc;" in pc and "tllm_fc_s4pc(L->q_fc, " in pc
    assert "float xn_inv_scale;" in pc and "L->xn_inv_scale" in pc  # calibrated static scales differ per layer
    kv4 = step_text(compiled["kv4-greedy"].tree)
    assert "&KV4[l]" in kv4 and "greedy_token = tllm_argmax_q4x4(" in kv4
    assert "tllm_stream_matvec_q4x4(&weight_stream, L->wq, " in step_text(compiled["stream-all"].tree)


def test_unroll_layers_prints_each_layer(compiled):
    step = step_text(compiled["dk-unrolled"].tree)
    src = compiled["dk-unrolled"].tree.files["src/tllm_model.c"].decode()
    assert LOOP not in step and "tllm_layer LAYERS" not in src
    assert [int(n) for n in re.findall(r"---- layer (\d+) ----", step)] == list(range(5))
    assert "&KV[4]" in step and "unrolled (compile --unroll-layers)" in step
    assert compiled["dk-unrolled"].tree.files != compile_path(STORY, CompileOptions(board="stm32h750b-dk")).tree.files


def test_unroll_layers_cli(tmp_path):
    out = tmp_path / "o"
    subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "compile", str(STORY), "-o", str(out),
                    "--unroll-layers"], check=True, capture_output=True)
    assert "---- layer 4 ----" in (out / "src" / "tllm_model.c").read_text()


@pytest.mark.parametrize("mode", list(MODES))
def test_generated_lines_fit_120_columns(compiled, mode):
    """The model source (and the banner every generated file shares) fit a screen; tllm_model.h's
    _Static_asserts, tllm_vocab.c's string literals and board_config.h's pin tables do not yet."""
    tree = compiled[mode].tree
    for name in ("src/tllm_model.c", "CMakeLists.txt"):
        for i, line in enumerate(tree.files[name].decode().splitlines()):
            assert len(line) <= 120, f"{name}:{i + 1} has {len(line)} columns: {line[:60]}..."


def _replace_in_layer(program, layer: int, change):
    calls = tuple(KernelCall(change(c.args), c.layer, c.label) if c.layer == layer else c for c in program.calls)
    return dataclasses.replace(program, calls=calls)


def test_layers_of_another_shape_stay_unrolled(compiled):
    """A layer whose RoPE covers other heads (a pruned layer) cannot share the loop body."""
    program = compiled["default"].program
    narrower = _replace_in_layer(program, 3, lambda a: dataclasses.replace(a, n_heads=4) if isinstance(a, Rope)
                                 else a)
    form = step_form(narrower)
    assert form.loop is None and len(form.layers) == 5
    assert form.why == ("The layers are unrolled: they differ (layer 3's call 4 is tllm_rope: rope.q rope 4x8 in "
                        "place, layer 0's tllm_rope: rope.q rope 8x8 in place).")
    assert step_form(program).loop is not None
    tree = emit_tree(narrower, compiled["default"].model.tokenizer, load_board("qemu-mps2-an500"), {})
    step = step_text(tree)
    assert LOOP not in step and "---- layer 4 ----" in step and "/* The layers are unrolled: they differ" in step
    assert max(len(line) for line in tree.files["src/tllm_model.c"].decode().splitlines()) <= 120


def test_a_buffer_at_another_offset_becomes_a_field(compiled):
    """The planner put layer 2's q elsewhere: q is read from the table, not a shared macro."""
    program = compiled["default"].program

    def move(obj):
        if isinstance(obj, BufferRef) and obj.name == "l2.q":
            return dataclasses.replace(obj, offset=obj.offset + 0x40)
        if dataclasses.is_dataclass(obj):
            return dataclasses.replace(obj, **{f.name: move(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        return obj

    loop = step_form(_replace_in_layer(program, 2, move)).loop
    q = next(f for f in loop.fields if f.name == "q")
    assert q.ctype == "float *" and q.values[2] == "B_L2_Q" and q.values[0] == "B_L0_Q"
    assert "B_L_I_Q" not in {s.macro for s in loop.shared}
    assert any("tllm_matvec_q4x4(L->wq, B_L_I_XN_X16, 0, L->q);" in s.statement for s in loop.body)
    assert any("-> l<i>.q @a per-layer offset" in s.comment for s in loop.body)


def test_layer_names():
    assert layer_generic("layers.3.wq", 3) == "layers.<i>.wq" and layer_generic("l3.xn.x16", 3) == "l<i>.xn.x16"
    assert layer_generic("l13.q", 1) == "l13.q" and layer_generic("x0", 0) == "x0"
    assert layer_field("layers.<i>.attention_norm") == "attention_norm" and layer_field("l<i>.xn.x16") == "xn_x16"
    with pytest.raises(AssertionError, match="both become q"):
        check_unique(["layers.<i>.q", "l<i>.q"], "layer descriptor field", layer_field)


@pytest.mark.host
def test_unrolled_host_build_matches_reference(tmp_path):
    """--unroll-layers stays an option: its firmware's tokens are the reference's too."""
    from firmware_harness import GREEDY, SHAPES, assert_identical, need, Built
    from tinyllm_gen.build.cmake import build
    from tinyllm_gen.compile import write_tree
    from tinymodels import make_hf_model

    need("cmake")
    model_dir = make_hf_model(tmp_path / "m", eos=None, **SHAPES["qwen2-bias-untied"])
    out = tmp_path / "out"
    compiled = compile_path(model_dir, CompileOptions(board="host", group_size=64, unroll_layers=True))
    assert "---- layer 2 ----" in step_text(compiled.tree)
    write_tree(compiled.tree, out)
    build(out)
    assert_identical(Built(model_dir, out), 64, GREEDY)


def test_kept_gguf_blocks_loop_unless_a_layer_keeps_another_format(tmp_path):
    from gguf_firmware import gguf_case
    from tinyllm_gen.kernels import MatvecGGUF
    from tinyllm_gen.kernels.refs import GGUFRef

    program = compile_path(gguf_case(tmp_path, "qwen2-q4_1-untied"), CompileOptions(board="host")).program
    loop = step_form(program).loop
    assert loop is not None and any("tllm_matvec_q41(L->wq, B_L_I_XN_Q8, B_L_I_XN_QS, L->bq, B_L_I_Q);" in s.statement
                                    for s in loop.body)
    assert {f.ctype for f in loop.fields if f.name.startswith("w")} == {"const tllm_gguf_matrix *"}
    q80 = _replace_in_layer(program, 1, lambda a: dataclasses.replace(a, matrix=dataclasses.replace(
        a.matrix, qtype="Q8_0")) if isinstance(a, MatvecGGUF) and isinstance(a.matrix, GGUFRef)
        and a.matrix.name.endswith("w_down") else a)
    form = step_form(q80)
    assert form.loop is None and "layer 1's call" in form.why and "tllm_matvec_q80" in form.why
