"""--kv-bits as typed data (quant/kv.parse_kv_bits): the three spellings, the
one-line refusal of any other, the manifest's values; and the planner's
bytes per position of K and V apart for the 8:4 cache (int8 K, int4 V),
against the layouts quant/kv.py states, built from shapes only."""
import subprocess
import sys
from pathlib import Path

import pytest

from plans import auto_max_seq, plan_memory, shape, step_of
from tinyllm_gen.errors import UserError
from tinyllm_gen.ir import ModelConfig
from tinyllm_gen.lower.step import with_kv_bits
from tinyllm_gen.quant.kv import KV4, KV8, KV8V4, KVBits, kv_bytes_per_token, kv_rotation, parse_kv_bits

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024
# stories260K's shape: 5 layers, 4 KV heads of head_dim 8 (int4 group 8: one scale per head)
STORIES260K = ModelConfig("llama", 64, 172, 5, 8, 4, 8, 512, 512, tied_embeddings=True, eos_ids=(2,))
# a head_dim of 64 (SmolLM2's): int4 groups of 32, two scales per head
HD64 = ModelConfig("llama", 192, 512, 2, 3, 1, 64, 512, 256, tied_embeddings=True, eos_ids=(2,))


@pytest.mark.parametrize("text,want", [("8", KV8), ("4", KV4), ("8:4", KV8V4), (8, KV8), (4, KV4), (" 8:4 ", KV8V4),
                                       (KV8V4, KV8V4)])
def test_the_three_spellings_parse_to_k_and_v_bits(text, want):
    got = parse_kv_bits(text)
    assert isinstance(got, KVBits) and (got.k, got.v) == (want.k, want.v)


@pytest.mark.parametrize("bad", ["5", "4:8", "8:8", "8:", ":4", "", "eight", 16, True, None, 8.0])
def test_any_other_value_is_one_line_naming_the_choices(bad):
    with pytest.raises(UserError) as e:
        parse_kv_bits(bad)
    assert str(e.value) == f"--kv-bits {bad} is not supported: choose one of 8, 4, 8:4"


def test_a_uniform_cache_reads_as_its_number_and_the_mixed_one_as_its_spelling():
    assert KV8 == 8 and KV4 == 4 and KV8V4 != 8 and KV8V4 != 4 and KV8 != KV8V4
    assert {KV8: "a"}[8] == "a" and hash(KV4) == hash(4)  # dicts keyed by 8 / 4 keep working
    assert [str(k) for k in (KV8, KV4, KV8V4)] == ["8", "4", "8:4"]
    assert [k.json_value() for k in (KV8, KV4, KV8V4)] == [8, 4, "8:4"]
    assert [k.describe() for k in (KV8, KV4, KV8V4)] == ["int8", "int4", "int8 K / int4 V"]
    assert all(parse_kv_bits(k.json_value()) == k for k in (KV8, KV4, KV8V4))  # a manifest's value reads back


def test_the_int8_keys_of_8_4_are_never_rotated():
    assert kv_rotation("auto", KV8V4, 64) == "off" and kv_rotation("auto", KV4, 64) == "hadamard"
    with pytest.raises(UserError, match="this build has int8 K / int4 V KV: add --kv-bits 4"):
        kv_rotation("hadamard", "8:4", 64)


@pytest.mark.parametrize("args", [["plan", "models/story-260k", "--kv-bits", "4:8"],
                                  ["reference", "models/story-260k", "--prompt", "a", "--kv-bits", "8:8"],
                                  ["eval", "models/story-260k", "--data", "README.md", "--kv-bits", "2"]])
def test_the_cli_refuses_a_bad_value_in_one_line_with_exit_2(args):
    r = subprocess.run([sys.executable, "-m", "tinyllm_gen", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--kv-bits" in lines[0] and "8, 4, 8:4" in lines[0], r.stderr


@pytest.mark.parametrize("config,k_pos,v_pos", [
    # K: 4 heads x 8 int8 + 4 float scales = 48 B; V: 4 x 8 / 2 nibble bytes + 4 scales = 32 B; x 5 layers
    (STORIES260K, 5 * 48, 5 * 32),
    # K: 64 int8 + 1 scale = 68 B; V: 32 nibble bytes + 2 scales = 40 B; x 2 layers
    (HD64, 2 * 68, 2 * 40)])
def test_the_plan_counts_k_and_v_per_position_apart(config, k_pos, v_pos):
    seq = 128
    plans = {kv: plan_memory(shape(config, kv_bits=kv), seq, 64 * 1024 * KIB) for kv in (KV8, KV4, KV8V4)}
    p = plans[KV8V4]
    assert (p.kv_bytes_per_position("k"), p.kv_bytes_per_position("v")) == (k_pos, v_pos)
    assert p.kv_bytes_per_position("k") == plans[KV8].kv_bytes_per_position("k")  # K exactly as int8 stores it
    assert p.kv_bytes_per_position("v") == plans[KV4].kv_bytes_per_position("v")  # V exactly as int4 stores it
    assert kv_bytes_per_token(config, KV8V4) == k_pos + v_pos == p.kv_cache_bytes // seq
    assert plans[KV4].kv_cache_bytes < p.kv_cache_bytes < plans[KV8].kv_cache_bytes
    decls = {d.name: (d.ctype, d.per_seq) for d in step_of(shape(config, kv_bits=KV8V4)).decls if d.kind == "kv"}
    assert decls["l0.k_cache"][0] == "int8_t" and decls["l0.v_cache"][0] == "uint8_t"


def test_with_kv_bits_gives_the_step_lowering_gives():
    """--max-seq auto's note and the fixes change a step's precision without lowering again: to 8:4 and back."""
    src8, src84 = shape(STORIES260K), shape(STORIES260K, kv_bits="8:4")
    lowered = step_of(src84)
    assert with_kv_bits(step_of(src8), "8:4").decls == lowered.decls
    assert [c.args for c in with_kv_bits(step_of(src8), KV8V4).calls] == [c.args for c in lowered.calls]
    assert with_kv_bits(lowered, 8).decls == step_of(src8).decls


def test_max_seq_auto_fits_more_context_with_8_4_than_int8_and_less_than_int4():
    budget = 160 * KIB
    seqs = {kv: auto_max_seq(shape(STORIES260K, kv_bits=kv), 512, budget) for kv in (KV8, KV8V4, KV4)}
    assert seqs[KV8] < seqs[KV8V4] < seqs[KV4] <= 512, seqs
    # each is the largest that fits: one more token does not
    for kv, seq in seqs.items():
        assert plan_memory(shape(STORIES260K, kv_bits=kv), seq, budget).fits
        with pytest.raises(UserError):
            plan_memory(shape(STORIES260K, kv_bits=kv), seq + 1, budget)


def test_an_over_budget_8_4_plan_names_its_sizes_and_the_smaller_caches_fix():
    with pytest.raises(UserError) as e:
        plan_memory(shape(STORIES260K, kv_bits="8:4"), 512, 200 * KIB)
    msg = str(e.value)
    assert "KV cache int8 K / int4 V at 512 tokens is 204,800 B" in msg and "--kv-bits 4" in msg, msg


def test_an_over_budget_int8_plan_suggests_8_4_first_where_it_fits():
    """int8 K kept, V halved: the fix that costs the least quality comes before int4 KV's."""
    budget = 160 * KIB
    seq84 = auto_max_seq(shape(STORIES260K, kv_bits=KV8V4), 512, budget)
    with pytest.raises(UserError) as e:
        plan_memory(shape(STORIES260K, kv_bits=KV8), seq84, budget)  # 8:4 fits this context, int8 does not
    msg = str(e.value)
    assert "--kv-bits 8:4" in msg and msg.index("--kv-bits 8:4") < msg.index("--kv-bits 4"), msg
    with pytest.raises(UserError) as e:
        plan_memory(shape(STORIES260K, kv_bits=KV8), seq84 + 1, budget)  # nor does 8:4 here
    assert "--kv-bits 8:4" not in str(e.value)
