"""Depth pruning (codegen/compress/prune_depth.py), and every pruning step on
SmolLM2-135M's head geometry (30 blocks, GQA 9 / 3 heads, head_dim 64) at a tiny width."""
import copy
import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

from tinyllm_gen.compile import CompileOptions, compile_path  # noqa: E402
from tinyllm_gen.compress.prune import prune  # noqa: E402
from tinyllm_gen.compress.prune_depth import block_importance, prune_depth  # noqa: E402
from tinyllm_gen.compress.prune_hidden import prune_hidden  # noqa: E402
from tinyllm_gen.compress.prune_vocab import count_tokens, plan_vocab, pruned_tokenizer_spec, slice_vocab  # noqa: E402
from tinyllm_gen.compress.torch_io import encode_docs, load_torch_model, make_batch, save_model_dir  # noqa: E402
from tinyllm_gen.frontends import load_model  # noqa: E402

from tinymodels import make_hf_model, make_tokenizer  # noqa: E402

DOCS = ["Once upon a time there was a little cat.", "The cat liked to play in the sun.",
        "One day the cat saw a big red ball.", "She was very happy. The end."]


def seqs(d):
    return encode_docs(load_model(d).tokenizer, DOCS, 64)


def test_depth_pruning_drops_the_least_important_block_exactly(tmp_path):
    d = make_hf_model(tmp_path / "t", dim=32, hidden=48, layers=4, heads=4, kv_heads=2, vocab=300, context=64, seed=9)
    teacher = load_torch_model(d)
    with torch.no_grad():  # block 2 adds nothing to the residual: skipping it costs exactly 0
        teacher.model.layers[2].self_attn.o_proj.weight.zero_()
        teacher.model.layers[2].mlp.down_proj.weight.zero_()
    student = copy.deepcopy(teacher)
    rep = prune_depth(student, seqs(d), 1, 0.25)
    assert rep.loss_increase[2] == 0.0 and len(set(rep.loss_increase)) == 4
    dropped = min(range(4), key=lambda i: rep.loss_increase[i])
    assert rep.kept == [i for i in range(4) if i != dropped]
    assert student.config.num_hidden_layers == 3
    assert [layer.self_attn.layer_idx for layer in student.model.layers] == [0, 1, 2]
    # Independently: the teacher with the dropped block's outputs zeroed is the same function, bit for bit.
    masked = copy.deepcopy(teacher)
    with torch.no_grad():
        masked.model.layers[dropped].self_attn.o_proj.weight.zero_()
        masked.model.layers[dropped].mlp.down_proj.weight.zero_()
    saved = load_torch_model(save_model_dir(student, d / "tokenizer.json", tmp_path / "shallow"))
    ids, _ = make_batch(seqs(d)[:4], 1)
    with torch.no_grad():
        assert torch.equal(saved(input_ids=ids).logits, masked(input_ids=ids).logits)
    # Scoring leaves the model as it was.
    base, scores = block_importance(teacher, seqs(d), 1)
    assert len(teacher.model.layers) == teacher.config.num_hidden_layers == 4 and scores == rep.loss_increase


def smollm2_geometry(path):
    """30 blocks, 9 query / 3 KV heads of 64, tied embeddings, as SmolLM2-135M; width 72, FFN 96."""
    import transformers as tf

    cfg = tf.LlamaConfig(hidden_size=72, intermediate_size=96, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, head_dim=64, vocab_size=300, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, rms_norm_eps=1e-5,
                         rope_theta=100000.0)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(cfg).eval()
    path.mkdir(parents=True)
    model.save_pretrained(str(path), safe_serialization=True)
    make_tokenizer(path, 300)
    return path


def test_every_pruning_on_the_teachers_head_geometry(tmp_path):
    d = smollm2_geometry(tmp_path / "smol-shape")
    s = seqs(d)
    m = load_torch_model(d)
    plan = plan_vocab(json.loads((d / "tokenizer.json").read_text()), count_tokens(s), 10_000)
    slice_vocab(m, plan)
    assert len(plan.kept) < 300
    remap = plan.old_to_new()
    s = [[remap[i] for i in q] for q in s]  # every token the text uses is kept: the same text, new ids
    depth = prune_depth(m, s, 1, 0.7)  # 30 -> 9 blocks
    rep = prune(m, s, 1, 1 / 3, 0.5)  # 3 -> 2 KV groups (9 -> 6 query heads), FFN 96 -> 48
    prune_hidden(m, s, 1, 0.25)  # width 72 -> 54
    assert len(depth.kept) == 9 and len(depth.loss_increase) == 30
    assert rep.heads == (6, 2) and rep.ffn == 48
    c = m.config
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size,
            c.intermediate_size, c.vocab_size) == (9, 6, 2, 64, 54, 48, len(plan.kept))
    tok_dir = tmp_path / "vocab"
    tok_dir.mkdir()
    (tok_dir / "tokenizer.json").write_text(json.dumps(pruned_tokenizer_spec(json.loads(
        (d / "tokenizer.json").read_text()), plan)))
    out = save_model_dir(m, tok_dir / "tokenizer.json", tmp_path / "student")
    again = load_torch_model(out)
    ids, _ = make_batch(s[:2], 1)
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids).logits, m(input_ids=ids).logits)
    g = load_model(out).graph.config  # the project's frontend reads the pruned shape...
    assert (g.n_layers, g.n_heads, g.n_kv_heads) == (9, 6, 2)
    compile_path(out, CompileOptions(board="host"))  # ...and compiles it
