"""Regression (issue 11): the over-budget message of `plan --sampler greedy`
suggested contexts planned with the full sampler (`fixes()` rebuilt the
shape without it): for the stories15M shape at --ram-budget 400K it said
`--kv-bits 4 --max-seq 92` where 171 fits.  Every suggested context must be
the largest that fits with the same sampler."""
import json
import re
import subprocess
import sys

import pytest

from llama2c_shapes import write_llama2c_v0


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def s15m(tmp_path_factory):
    return write_llama2c_v0(tmp_path_factory.mktemp("fix") / "s15m.bin", 288, 768, 6, 6, 6, 32000, 256)


# --prefill-batch 1: the over-budget message's contexts are P = 1's (the failing plan's), while --max-seq auto
# with the default auto batch would trade a tenth of the context for P = 4 (lower/prefill.py); --stream off:
# with auto's stream --max-seq auto keeps the timing model's chunk (8 KiB: 164 tokens) where the message's
# plan halves it (2 KiB: 169), both fit; --kv-region sram: the 400K plan's contexts (auto would take the SDRAM)
COMMON = ["--board", "stm32h750b-dk", "--sampler", "greedy", "--ram-budget", "400K", "--prefill-batch", "1",
          "--stream", "off", "--kv-region", "sram"]


def auto_seq(model, kv_bits):
    proc = cli("plan", model, *COMMON, "--kv-bits", kv_bits, "--max-seq", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["max_seq"]


def test_every_suggested_context_is_the_greedy_plans_own(s15m):
    over = cli("plan", s15m, *COMMON, "--kv-bits", "8", "--max-seq", "256")  # the model's context, asked for
    assert over.returncode == 2, over.stdout
    kv4 = re.search(r"--kv-bits 4 --max-seq (\d+)", over.stderr)
    plain = re.findall(r"(?<!bits 4 )--max-seq (\d+)", over.stderr)
    assert kv4 and plain, over.stderr
    assert int(kv4.group(1)) == auto_seq(s15m, "4") == 171, over.stderr
    assert int(plain[-1]) == auto_seq(s15m, "8"), over.stderr
    best = auto_seq(s15m, "4")
    assert cli("plan", s15m, *COMMON, "--kv-bits", "4", "--max-seq", best).returncode == 0
    assert cli("plan", s15m, *COMMON, "--kv-bits", "4", "--max-seq", best + 1).returncode == 2
