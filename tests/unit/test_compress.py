"""Pruning, distillation (resume == uninterrupted) and the `compress` command on tiny models."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tinyllm_gen.cli import main  # noqa: E402
from tinyllm_gen.compile import CompileOptions, compile_path  # noqa: E402
from tinyllm_gen.compress.distill import DistillOptions, distill  # noqa: E402
from tinyllm_gen.compress.prune import prune  # noqa: E402
from tinyllm_gen.compress.prune_hidden import prune_hidden  # noqa: E402
from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, make_batch, save_model_dir  # noqa: E402
from tinyllm_gen.errors import UserError  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402

from tinymodels import make_hf_model  # noqa: E402

SENTENCES = ["Once upon a time there was a little cat.", "The cat liked to play in the sun.",
             "One day the cat saw a big red ball.", "She was very happy.", "The dog ran to the park.",
             "They played all day long.", "The end."]


def documents(n=40):
    return [" ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(2 + i % 4)) for i in range(n)]


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("compress")
    return make_hf_model(root / "teacher", dim=32, hidden=64, layers=2, heads=4, kv_heads=2, vocab=300,
                         context=96, tied=True, seed=5)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "train.txt"
    p.write_text("\n\n".join(documents()) + "\n")
    return p


def seqs_for(model_dir, n=40):
    return encode_docs(load_model(model_dir).tokenizer, documents(n), 96)


def test_pruned_model_equals_masked_teacher(teacher_dir, tmp_path):
    """Removing a group/channel is exactly zeroing its contribution in the teacher."""
    seqs = seqs_for(teacher_dir)
    teacher = load_torch_model(teacher_dir)
    student = load_torch_model(teacher_dir)
    rep = prune(student, seqs[:8], 1, 0.5, 0.25)
    assert (student.config.num_attention_heads, student.config.num_key_value_heads) == (2, 1)
    assert student.config.intermediate_size == 48
    pruned = load_torch_model(save_model_dir(student, teacher_dir / "tokenizer.json", tmp_path / "pruned"))
    with torch.no_grad():
        for i, layer in enumerate(teacher.model.layers):
            dropped = [g for g in range(2) if g not in rep.kept_groups[i]]
            for g in dropped:
                layer.self_attn.o_proj.weight[:, g * 16:(g + 1) * 16] = 0
            kept_w = pruned.model.layers[i].mlp.down_proj.weight
            full = layer.mlp.down_proj.weight
            keep = [j for j in range(64) if any(torch.equal(full[:, j], kept_w[:, k]) for k in range(48))]
            mask = torch.zeros(64, dtype=torch.bool)
            mask[keep] = True
            full[:, ~mask] = 0
        ids, _ = make_batch(seqs[:4], 1)
        np.testing.assert_allclose(pruned(input_ids=ids).logits.numpy(), teacher(input_ids=ids).logits.numpy(),
                                   atol=1e-5)
    compile_path(tmp_path / "pruned", CompileOptions(board="host"))  # the pruned folder compiles


def test_hidden_pruning_drops_dead_channels_exactly(teacher_dir, tmp_path):
    """A teacher whose residual channels in `dead` carry nothing (embedding
    columns, o_proj and down_proj rows zero) loses exactly those channels, and
    the norm-gain correction sqrt(kept/all) keeps its logits unchanged."""
    seqs = seqs_for(teacher_dir)
    dead = [1, 4, 6, 11, 17, 22, 28, 31]
    teacher = load_torch_model(teacher_dir)
    with torch.no_grad():
        teacher.model.embed_tokens.weight[:, dead] = 0
        for layer in teacher.model.layers:
            layer.self_attn.o_proj.weight[dead, :] = 0
            layer.mlp.down_proj.weight[dead, :] = 0
    student = load_torch_model(teacher_dir)
    student.load_state_dict(teacher.state_dict())
    rep = prune_hidden(student, seqs[:8], 1, 0.25)
    assert rep.kept == [c for c in range(32) if c not in dead] and student.config.hidden_size == 24
    pruned = load_torch_model(save_model_dir(student, teacher_dir / "tokenizer.json", tmp_path / "narrow"))
    assert pruned.lm_head.weight.shape == (300, 24)
    for m in (pruned, teacher):  # the norms' epsilon is the one thing the correction cannot carry over
        for mod in m.modules():
            if hasattr(mod, "variance_epsilon"):
                mod.variance_epsilon = 0.0
    ids, _ = make_batch(seqs[:4], 1)
    with torch.no_grad():
        np.testing.assert_allclose(pruned(input_ids=ids).logits.numpy(), teacher(input_ids=ids).logits.numpy(),
                                   atol=2e-5)
    compile_path(tmp_path / "narrow", CompileOptions(board="host"))


def test_distill_resume_is_bit_identical(teacher_dir, tmp_path):
    seqs = seqs_for(teacher_dir)
    teacher = load_torch_model(teacher_dir)
    opts = DistillOptions(steps=4, batch_size=4, checkpoint_every=2, seed=7, threads=1)

    def student():
        s = load_torch_model(teacher_dir)
        prune(s, seqs[:8], 1, 0.5, 0.5)
        return s

    a = student()
    ra = distill(a, teacher, seqs, 1, opts, tmp_path / "a", progress=False)
    b = student()
    r1 = distill(b, teacher, seqs, 1, opts, tmp_path / "b", progress=False, stop_after=3)  # "interrupted"
    b = student()
    r2 = distill(b, teacher, seqs, 1, opts, tmp_path / "b", progress=False)
    assert (r1.steps, r2.resumed_from, r2.steps) == (3, 2, 4)
    # The compute of the result counts the resumed steps too, exactly once.
    assert ra.total_tokens == ra.tokens == r2.total_tokens > r2.tokens > 0
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"], student().state_dict()["model.layers.0.mlp.up_proj.weight"])


def test_distill_refuses_a_checkpoint_of_another_run(teacher_dir, tmp_path):
    # Same options, different data: resuming would silently mix two runs.
    seqs = seqs_for(teacher_dir)
    teacher = load_torch_model(teacher_dir)
    opts = DistillOptions(steps=4, batch_size=4, checkpoint_every=2, seed=7, threads=1)
    distill(load_torch_model(teacher_dir), teacher, seqs, 1, opts, tmp_path, progress=False, stop_after=2)
    with pytest.raises(UserError, match="another teacher, pruning or data"):
        distill(load_torch_model(teacher_dir), teacher, seqs[1:], 1, opts, tmp_path, progress=False)


def test_compress_command(teacher_dir, data_file, tmp_path, capsys):
    out = tmp_path / "student"
    with pytest.raises(SystemExit) as e:
        main(["compress", str(teacher_dir), "-o", str(out), "--data", str(data_file), "--distill-steps", "3",
              "--batch-size", "4", "--prune-hidden", "0.25", "--threads", "1", "--quant-eval-tokens", "0", "--json"])
    assert e.value.code == 0
    r = json.loads(capsys.readouterr().out)
    assert r["options"]["quant_eval_tokens"] == 0 and r["options"]["distill"]["threads"] == 1
    assert r["rows"]["teacher"]["params"] > r["rows"]["distilled"]["params"]
    assert (r["rows"]["teacher"]["hidden"], r["rows"]["distilled"]["hidden"]) == (32, 24)
    assert r["distill"]["steps"] == 3
    assert {"rtn-g32-kv8", "awq-g32-kv8"} <= set(r["quantized"]["configs"])
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    compile_path(out, CompileOptions(board="host", weight_quant="awq"))


def test_quantized_rows_token_cap():
    from tinyllm_gen.compress.pipeline import _cap

    seqs = [[0, 5, 6, 7], [0, 8, 9], [0, 4]]  # 3 + 2 + 1 scored tokens
    assert _cap(seqs, 0) == seqs  # 0 = the whole held-out text
    assert _cap(seqs, 5) == seqs[:2] and _cap(seqs, 1) == seqs[:1]


@pytest.mark.parametrize("args,msg", [(["--prune-heads", "1.0"], "--prune-heads 1.0 must be in [0, 1)"),
                                      (["--prune-ffn", "-0.1"], "--prune-ffn -0.1 must be in [0, 1)"),
                                      (["--prune-hidden", "1"], "--prune-hidden 1.0 must be in [0, 1)")])
def test_compress_user_errors(teacher_dir, data_file, tmp_path, capsys, args, msg):
    with pytest.raises(SystemExit) as e:
        main(["compress", str(teacher_dir), "-o", str(tmp_path / "o"), "--data", str(data_file),
              "--distill-steps", "1"] + args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_compress_refuses_what_torch_cannot_train(teacher_dir, data_file, tmp_path, capsys):
    """An ONNX export (or a file) is compiled, but not trained: one line, exit 2."""
    onnx_dir = tmp_path / "onnx-export"
    onnx_dir.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (onnx_dir / name).write_bytes((teacher_dir / name).read_bytes())
    (onnx_dir / "model.onnx").write_bytes(b"")
    for teacher, msg in ((onnx_dir, "an ONNX export; compression trains with torch and needs the Hugging Face"),
                         (teacher_dir / "config.json", "compress takes a Hugging Face model directory")):
        with pytest.raises(SystemExit) as e:
            main(["compress", str(teacher), "-o", str(tmp_path / "o"), "--data", str(data_file)])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and msg in err and "\n" not in err, err
