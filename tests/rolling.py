"""Rolling-context builds of the bundled model (compile --context-policy roll)
and their check against the reference, shared by the host and QEMU tiers."""
from __future__ import annotations

from pathlib import Path

from bounds import BACKSTOP_S
from tinyllm_gen.build.cmake import build
from tinyllm_gen.compile import CompileOptions, compile_path, quantize, write_tree
from tinyllm_gen.context import context_roll
from tinyllm_gen.frontends import load_model
from tinyllm_gen.reference.executor import Executor, QuantKernels, generate
from tinyllm_gen.reference.sampler import SamplingOptions, top_k_of
from tinyllm_gen.reference.speculative import generate_speculative
from tinyllm_gen.run.firmware import run_firmware

STORY = Path(__file__).resolve().parents[1] / "models" / "story-260k"
MAX_SEQ = 32  # small, so 4 x max_seq tokens are cheap
N_NEW = 4 * MAX_SEQ
SAMPLED = SamplingOptions(0.9, 0.85, 1234)
# prompts whose generations (greedy and SAMPLED) reach N_NEW without an EOS, by KV precision
PROMPTS = {8: "One day", 4: "Once upon a time", "8:4": "One day"}


def built(root: Path, board: str, **opts) -> Path:
    out = root / (board + "-" + "-".join(f"{k}{v}" for k, v in sorted(opts.items())).replace(":", ""))
    if not (out / "build").is_dir():
        write_tree(compile_path(STORY, CompileOptions(board=board, max_seq=MAX_SEQ, **opts)).tree, out)
        build(out)
    return out


def check_rolls(out: Path, opts: dict, samplings=(SamplingOptions(), SAMPLED)) -> list[int]:
    """The firmware's tokens and shift count against the reference's, N_NEW tokens each; returns the shifts."""
    m = load_model(STORY)
    kv = opts.get("kv_bits", 8)
    ex = Executor(m.graph, QuantKernels(quantize(m, CompileOptions(kv_bits=kv), max_seq=MAX_SEQ), MAX_SEQ))
    roll = context_roll(opts["context_policy"], MAX_SEQ)
    k = int(opts["speculate"].split(":")[1]) if "speculate" in opts else 0
    top_k = top_k_of(opts.get("sampler", "full"))
    ids = m.tokenizer.encode(PROMPTS[kv])
    shifts = []
    for sampling in samplings:
        fw = run_firmware(out, ids, N_NEW, sampling, timeout_s=BACKSTOP_S).output
        want = generate_speculative(ex, ids, N_NEW, MAX_SEQ, m.graph.config.eos_ids, sampling, top_k, k, roll)
        assert (fw.generated_ids, fw.stop_reason) == (want.generated_ids, want.stop_reason), sampling
        assert (len(want.generated_ids), want.stop_reason) == (N_NEW, "max_tokens"), "the prompt hit an EOS"
        assert fw.shifts == want.shifts >= 3, (fw.shifts, want.shifts)
        if sampling.temperature == 0:  # speculation or not: greedy tokens are plain decoding's, shifts included
            assert want.generated_ids == generate(ex, ids, N_NEW, MAX_SEQ, m.graph.config.eos_ids, sampling,
                                                  top_k, roll).generated_ids
        assert fw.canary_ok is True
        shifts.append(fw.shifts)
    return shifts
