"""Batched prefill's decisions (codegen/lower/prefill.py, fit/search.py), before any C is built:
which buffers hold P tokens, what the plan counts for them, how `auto`
picks P against the context, where a batch is refused, and the generated
tllm_model_prefill.  tests/host/test_prefill_logits.py checks its logits
bit for bit; tests/emu/test_prefill_qemu.py and test_stream_emu.py count
its instructions and flash bytes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tinyllm_gen.board import load_board
from tinyllm_gen.compile import CompileOptions, compile_path
from tinyllm_gen.errors import UserError
from tinyllm_gen.ir import ModelConfig, build_decoder_graph
from plans import plan_prefill, step_of
from tinyllm_gen.abi import MAX_BATCH, TILE_SPILL
from tinyllm_gen.kernels.refs import BufferRef, refs_of
from tinyllm_gen.lower.prefill import CHUNK_OUT, parse_batch
from tinyllm_gen.lower.records import StepSource, StreamOptions

STORY = Path(__file__).resolve().parents[2] / "models" / "story-260k"
# head_dim 6: K and V have 6 rows, not whole 4-row tiles (the batched kernel's spill)
ODD = ModelConfig("llama", 48, 96, 2, 8, 1, 6, 200, 64, tied_embeddings=True, eos_ids=(1,))
SMOL = ModelConfig("llama", 576, 1536, 30, 9, 3, 64, 49152, 8192, tied_embeddings=True, eos_ids=(2,))


def shape(config=ODD, kernels="cortex-m7", kv_bits=8, method="rtn") -> StepSource:
    return StepSource(build_decoder_graph(config, {}), 32, kv_bits, kernels, method)


@pytest.mark.parametrize("kernels", ["cortex-m7", "portable"])
def test_batched_buffers_are_the_layers_activations(kernels):
    one = step_of(shape(kernels=kernels))
    four = step_of(shape(kernels=kernels), batch=4)
    pre = four.prefill
    assert pre.batch == 4 and one.prefill.batch == 1 and not one.prefill.batched
    kinds = {d.name: d.kind for d in one.decls}
    assert {kinds[n] for n in pre.batched} <= {"activation", "scratch"}
    assert "x0" in pre.batched  # the residual stream
    assert not any(n.endswith((".att.scores", ".att.query_i8", "_cache", "_scale")) for n in pre.batched)
    head = {r.name for c in one.calls[one.head_start:] for r in _bufs(c)} - {r.name for c in one.body_calls
                                                                              for r in _bufs(c)}
    assert head and not head & pre.batched  # the final norm's stream and the logits: one token
    counts = {d.name: d.count for d in one.decls}
    for d in four.decls:
        if d.name == CHUNK_OUT:
            continue
        want = counts[d.name] * 4 + (TILE_SPILL if d.name in pre.padded else 0) if d.name in pre.batched else \
            counts[d.name]
        assert d.count == want, d.name
    if kernels == "cortex-m7":
        assert pre.padded == {"l0.k", "l0.v", "l1.k", "l1.v"}  # 6 rows: the tile kernel writes 8 per token


def _bufs(call):
    return list(refs_of(call.args, BufferRef))


def test_a_stream_adds_one_chunk_buffer_for_the_batch():
    stream = StreamOptions("all", 1024)
    step = step_of(shape(), stream=stream, batch=3)
    chunk = step.decl(CHUNK_OUT)
    rows = max(c.args.streamed_rows() for c in step.body_calls)
    assert chunk.count == 3 * rows + TILE_SPILL and chunk.span == "always"
    assert CHUNK_OUT not in {d.name for d in step_of(shape(), stream=stream, batch=1).decls}


def test_auto_takes_the_largest_batch_that_fits():
    board = load_board("qemu-mps2-an500")
    res, _ = plan_prefill(shape(), 32, 512 * 1024, board, "off", None, "auto")
    assert res.prefill_batch == MAX_BATCH and "largest" in res.prefill_why
    p1 = plan_prefill(shape(), 32, 512 * 1024, board, "off", None, 1)[0].plan.total_bytes
    assert res.plan.total_bytes > p1  # the P-token buffers cost memory


def test_auto_with_max_seq_auto_keeps_nine_tenths_of_the_context():
    """SmolLM2's shape on the DK (int4 KV): every batch token costs the
    layers' activations, which come out of the KV cache."""
    board = load_board("stm32h750b-dk")
    s = shape(SMOL, kv_bits=4)
    seq = {p: plan_prefill(s, "auto", 512 * 1024, board, "off", None, p, "topk:40")[0].plan.max_seq
           for p in range(1, 5)}
    assert seq[1] > seq[2] > seq[3] > seq[4]
    res, _ = plan_prefill(s, "auto", 512 * 1024, board, "off", None, "auto", "topk:40")
    p = res.prefill_batch
    assert seq[p] * 10 >= seq[1] * 9 and (p == MAX_BATCH or seq[p + 1] * 10 < seq[1] * 9)
    assert res.plan.max_seq == seq[p] and f"{seq[p]} tokens of context against {seq[1]}" in res.prefill_why


def test_per_channel_layers_prefill_token_by_token():
    board = load_board("stm32h750b-dk")
    s = shape(kernels="portable", method="per-channel")
    res, _ = plan_prefill(s, 32, 512 * 1024, board, "off", None, "auto")
    assert res.prefill_batch == 1 and "CMSIS-NN layers have no batched kernel" in res.prefill_why
    with pytest.raises(UserError, match=r"--prefill-batch 4: the per-channel .* use --prefill-batch 1"):
        plan_prefill(s, 32, 512 * 1024, board, "off", None, 4)


@pytest.mark.parametrize("bad", ["0", "5", "two", "-1"])
def test_prefill_batch_option_is_checked(bad):
    with pytest.raises(UserError, match="--prefill-batch"):
        parse_batch(bad)
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(STORY), "--prefill-batch", bad],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--prefill-batch" in proc.stderr


def test_plan_prints_the_batch_trade_off():
    proc = subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(STORY), "--board", "weact-h750",
                           "--max-seq", "128"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  prefill batch 4 (auto"))
    rows = [ln.split() for ln in lines[at + 2:at + 2 + MAX_BATCH]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    ms = [float(r[3]) for r in rows]
    assert ms == sorted(ms, reverse=True)  # fewer flash bytes and fewer instructions per prompt token
    doc = json.loads(subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "plan", str(STORY), "--board",
                                     "weact-h750", "--max-seq", "128", "--json"], capture_output=True,
                                    text=True).stdout)
    assert doc["prefill"]["batch"] == 4 and len(doc["prefill"]["trade_off"]) == MAX_BATCH
    assert doc["predicted"]["weact-h750"]["prefill"]["batch"] == 4


def _prefill_source(**opts) -> str:
    src = compile_path(STORY, CompileOptions(max_seq=64, **opts)).tree.files["src/tllm_model.c"].decode()
    return src[src.index("float *tllm_model_prefill("):src.index("tllm_gen_state *tllm_model_state")]


def test_generated_prefill_batches_the_linears_and_loops_the_rest():
    src = _prefill_source(prefill_batch=4)
    assert src.count("tllm_matmat_q4x4(") == 6  # wq, wk, wv, wo, gate+up fused, down: in the layer loop
    assert "tllm_matvec_q4x4(&W_TOK_EMBEDDINGS, B_XF_X16" in src  # the classifier, once
    assert "tllm_rmsnorm_x16(B_X0 + (n - 1) * 64" in src  # the head on the batch's last token
    assert "pos + p" in src and "tokens[p]" in src and "for (int32_t l = 0; l < TLLM_N_LAYERS; l++)" in src
    assert all(len(line) <= 120 for line in src.splitlines())
    one = _prefill_source(prefill_batch=1)
    assert "tllm_model_step(tokens[p], pos + p, need_logits && p == n - 1)" in one and "matmat" not in one
    unrolled = _prefill_source(prefill_batch=2, unroll_layers=True)
    assert unrolled.count("tllm_matmat_q4x4(") == 6 * 5 and "/* ---- layer 4 ---- */" in unrolled


def test_generated_tree_is_deterministic_with_a_batch():
    a = compile_path(STORY, CompileOptions(max_seq=64, prefill_batch=3)).tree.files
    b = compile_path(STORY, CompileOptions(max_seq=64, prefill_batch=3)).tree.files
    assert a == b
    header = a["src/tllm_model.h"].decode()
    assert "#define TLLM_PREFILL_BATCH 3 " in header
    assert json.loads(a["manifest.json"])["prefill_batch"] == 3


@pytest.mark.parametrize("budget_k", [40, 64, 100, 160, 512])
def test_context_search_equals_bisection(budget_k):
    """fit.search.Planner.largest_fitting_seq interpolates on the bytes over
    (each plan places every buffer, and the batch search plans once per batch
    size): its answer is plain bisection's."""
    from tinyllm_gen.fit.search import Planner
    from tinyllm_gen.plan.memory import MIN_SEQ

    board = load_board("weact-h750")
    planner = Planner(board, budget_k * 1024)
    for p in (1, 4):
        s = step_of(shape(kv_bits=4), batch=p)

        def fits(seq):
            return planner.plan(s, seq).fits

        lo, hi = MIN_SEQ, 4096
        want = None
        if fits(lo):
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
            want = lo
        assert planner.largest_fitting_seq(s, 4096) == want
