"""Prefill without the classifier (issue 13.5): only the last prompt token's
logits are sampled, so the head (the final norm and the classifier) runs for
it and for every decoded token, never for the prompt tokens before it.

Checked here on the reference and the lowering: `Executor.step` without
logits runs no head node and leaves the KV cache as the full step does;
`generate` runs the classifier once per sampled token and gives the tokens
the every-step-with-head loop gives; the lowered step's head is exactly the
graph's nodes after the last layer, and the emitted step returns before it
when need_logits is 0.  tests/emu/test_prefill_qemu.py counts it in the firmware."""
from pathlib import Path

import numpy as np
import pytest

from tinyllm_gen.compile import CompileOptions, compile_path, quantize
from tinyllm_gen.frontends import load_model
from tinyllm_gen.ir import ModelConfig, build_decoder_graph
from tinyllm_gen.kernels import ArgmaxClassifier, RmsNorm, RmsNormX16
from tinyllm_gen.lower.records import StepSource
from tinyllm_gen.lower.step import lower_step
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate, head_start_node
from tinyllm_gen.reference.sampler import Sampler, SamplingOptions

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
CONFIG = ModelConfig("qwen2", 96, 160, 3, 6, 2, 16, 320, 96, tied_embeddings=False, qkv_bias=True, eos_ids=(1,))


@pytest.fixture(scope="module")
def story():
    m = load_model(STORY)
    return m, quantize(m, CompileOptions())


class Counting(QuantKernels):
    """QuantKernels that count the nodes they run, by output value."""

    def __init__(self, qg, max_seq):
        super().__init__(qg, max_seq)
        self.ran: list[str] = []

    def rmsnorm(self, node, x):
        self.ran.append(node.output)
        return super().rmsnorm(node, x)

    def linear(self, node, x):
        self.ran.append(node.output)
        return super().linear(node, x)


def test_head_is_the_nodes_after_the_last_layer():
    g = build_decoder_graph(CONFIG, {})
    h = head_start_node(g)
    assert [n.label for n in g.nodes[h:]] == ["norm", "output"]
    assert g.nodes[h - 1].layer == CONFIG.n_layers - 1 and g.nodes[-1].output == g.output


def test_step_without_logits_skips_the_head_and_keeps_the_cache(story):
    m, qg = story
    full, skip = Counting(qg, 16), Counting(qg, 16)
    ex_full, ex_skip = Executor(m.graph, full), Executor(m.graph, skip)
    for ex in (ex_full, ex_skip):
        ex.reset()
    for pos, tok in enumerate([1, 57, 300, 12]):
        assert ex_full.step(tok, pos) is not None
        assert ex_skip.step(tok, pos, need_logits=False) is None
    assert "logits" in full.ran and "xf" in full.ran
    assert "logits" not in skip.ran and "xf" not in skip.ran
    for name in ("k_q", "k_s", "v_q", "v_s"):  # the KV cache, bit for bit
        assert np.array_equal(getattr(full, name), getattr(skip, name))
    # the next step with logits gives the same bits either way
    a, b = ex_full.step(9, 4), ex_skip.step(9, 4)
    assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist()


@pytest.mark.parametrize("sampling", [SamplingOptions(), SamplingOptions(0.9, 0.85, 1234), SamplingOptions(1.2, 1.0, 7)])
def test_generate_runs_the_classifier_once_per_sampled_token(story, sampling):
    m, qg = story
    prompt = m.tokenizer.encode("Once upon a time there was a cat")
    k = Counting(qg, 64)
    gen = generate(Executor(m.graph, k), prompt, 12, 64, m.graph.config.eos_ids, sampling)
    assert k.ran.count("logits") == len(gen.generated_ids)  # the last prompt token's, then one per decode step
    # the tokens of the loop that ran the head at every prompt token
    ex = Executor(m.graph, QuantKernels(qg, 64))
    ex.reset()
    sampler, out = Sampler(sampling), []
    for pos, tok in enumerate(prompt):
        logits = ex.step(tok, pos)
    pos = len(prompt)
    while len(out) < len(gen.generated_ids):
        out.append(sampler.sample(logits))
        logits = ex.step(out[-1], pos)
        pos += 1
    assert out == gen.generated_ids


@pytest.mark.parametrize("kernels,method,sampler", [("portable", "rtn", "full"), ("cortex-m7", "rtn", "greedy"),
                                                    ("portable", "per-channel", "full")])
def test_lowered_head_is_final_norm_and_classifier(kernels, method, sampler):
    step = lower_step(StepSource(build_decoder_graph(CONFIG, {}), 32, 8, kernels, method), sampler)
    head, body = step.calls[step.head_start:], step.calls[:step.head_start]
    assert all(c.layer is None for c in head) and body[-1].layer == CONFIG.n_layers - 1
    assert isinstance(head[0].args, (RmsNorm, RmsNormX16)) and head[0].label == "norm"
    assert head[-1].label == "output" and isinstance(head[-1].args, ArgmaxClassifier) == (sampler == "greedy")
    assert {c.label for c in head[1:-1]} <= {"quantize xf"}  # the classifier input's int8 copy, if not fused


@pytest.mark.parametrize("unroll", [False, True])
def test_emitted_step_returns_before_the_head(story, tmp_path, unroll):
    src = compile_path(STORY, CompileOptions(unroll_layers=unroll)).tree.files["src/tllm_model.c"].decode()
    step = src[src.index("float *tllm_model_step(int32_t token, int32_t pos, int need_logits)"):]
    step = step[:step.index("\n}\n")]
    guard = step.index("if (!need_logits) return 0;")
    last_layer = step.rindex("/* layer 4 ") if unroll else step.rindex("L->w_down")  # the last layer's last matvec
    assert last_layer < guard < step.index("/* norm rmsnorm") < step.index("/* output ")
    # the parameter and the guard (and, streamed, the stream told to skip the head's chunks)
    assert step.count("need_logits") == 2 + ("tllm_stream_begin_step(&weight_stream, need_logits)" in step)


def test_sequence_without_logits_runs_the_head_only_for_kept_values(story):
    """reference_seq.run_sequence(need_logits=False), as calibration calls it:
    the classifier's input is kept, the [T, vocab] classifier is not run."""
    from tinyllm_gen.reference.sequence import SeqQuantKernels, run_sequence

    m, qg = story
    ran = []

    class Seq(SeqQuantKernels):
        def linear(self, node, x):
            ran.append(node.output)
            return super().linear(node, x)

    ids = m.tokenizer.encode("Once upon a time there was a cat")
    logits, kept = run_sequence(m.graph, Seq(qg, 32), ids, keep={"xf", "l0.xn"})
    assert logits.shape == (len(ids), m.graph.config.vocab_size) and ran.count("logits") == 1
    ran.clear()
    none, kept2 = run_sequence(m.graph, Seq(qg, 32), ids, keep={"xf", "l0.xn"}, need_logits=False)
    assert none is None and "logits" not in ran and set(kept2) == {"xf", "l0.xn"}
    for k in kept:
        assert kept[k].view(np.uint32).tolist() == kept2[k].view(np.uint32).tolist()
    _, kept3 = run_sequence(m.graph, Seq(qg, 32), ids, keep={"l0.xn"}, need_logits=False)
    assert set(kept3) == {"l0.xn"}


def test_stream_schedule_names_the_heads_chunks():
    """--stream all: the classifier's chunks are the table's last; the firmware
    skips from head_chunk to the next step's chunk 0 (tllm_stream.h)."""
    from tinyllm_gen.emit.stream_tables import schedule_json, schedule_text

    program = compile_path(STORY, CompileOptions(stream="all", stream_chunk=2048, max_seq=64)).program
    doc = schedule_json(program)
    head = [c for c in doc["chunks"] if c["call"] >= program.head_start]
    assert head and all(c["matrix"] == "tok_embeddings" for c in head)  # the tied classifier
    assert doc["head_chunk"] == doc["chunks_per_step"] - len(head) == head[0]["index"]
    assert f"the head (classifier) is chunks {doc['head_chunk']}.." in schedule_text(doc)
