"""Host tier: the top-K sampler of `--sampler topk:K` builds, C against its
twin (firmware/tllm_sampler.c tllm_topk_push / tllm_sample_topk vs
codegen/sampler.py top_k_ids / Sampler(top_k=K)), bit for bit.

The logits arrive in chunks as the classifier produces them; the set must
be the first K of the (logit descending, id ascending) order whatever the
chunk size: ties across chunk boundaries, -0.0 beside +0.0, K larger than a
chunk, a vocabulary that is not a multiple of the chunk, K above the
vocabulary."""
import struct
import subprocess

import numpy as np
import pytest

from firmware_harness import need
from tinyllm_gen.resources import firmware_dir
from tinyllm_gen.sampler import Sampler, SamplingOptions, top_k_ids

pytestmark = pytest.mark.host

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>

#include "tllm_sampler.h"

/* stdin: vocab, K, chunk, draws, temperature, top_p, seed, then vocab float32 logits.
 * stdout: the set's ids after each draw's pushes, then the drawn token. */
int main(void) {
    uint32_t vocab, k, chunk, draws;
    float temperature, top_p;
    uint64_t seed;
    if (fread(&vocab, 4, 1, stdin) != 1 || fread(&k, 4, 1, stdin) != 1 || fread(&chunk, 4, 1, stdin) != 1 ||
        fread(&draws, 4, 1, stdin) != 1 || fread(&temperature, 4, 1, stdin) != 1 || fread(&top_p, 4, 1, stdin) != 1 ||
        fread(&seed, 8, 1, stdin) != 1) return 2;
    float *logits = malloc(4 * vocab);
    if (fread(logits, 4, vocab, stdin) != vocab) return 2;
    float *value = malloc(4 * k);
    uint16_t *id = malloc(2 * k);
    tllm_topk set = {value, id, (int32_t)k, 0};
    tllm_sampler s;
    tllm_sampler_init(&s, temperature, top_p, seed);
    for (uint32_t d = 0; d < draws; d++) {
        for (uint32_t r0 = 0; r0 < vocab; r0 += chunk)
            tllm_topk_push(&set, logits + r0, (int32_t)(vocab - r0 < chunk ? vocab - r0 : chunk), (int32_t)r0);
        for (int32_t i = 0; i < set.n; i++) printf("%u ", (unsigned)set.id[i]);
        printf("| %d\n", (int)tllm_sample_topk(&s, &set));
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    need("gcc")
    tmp = tmp_path_factory.mktemp("topk")
    (tmp / "d.c").write_text(DRIVER)
    fw = firmware_dir()
    exe = tmp / "d"
    subprocess.run(["gcc", "-O2", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", "-Werror", "-I", str(fw),
                    str(tmp / "d.c"), str(fw / "tllm_sampler.c"), str(fw / "tllm_kernels.c"), "-lm", "-o", str(exe)],
                   check=True)
    return exe


def run_c(exe, logits, k, chunk, draws, sampling):
    x = np.asarray(logits, np.float32)
    head = struct.pack("<IIIIffQ", len(x), k, chunk, draws, sampling.temperature, sampling.top_p, sampling.seed)
    out = subprocess.run([str(exe)], input=head + x.tobytes(), capture_output=True, check=True).stdout.decode()
    rows = [line.split("|") for line in out.splitlines()]
    return [[int(i) for i in ids.split()] for ids, _ in rows], [int(tok) for _, tok in rows]


def test_tie_rule_lower_id_first_and_kept():
    x = np.array([1.0, 3.0, 3.0, 0.0, -0.0, 0.0, 3.0, 2.0, -1.0], np.float32)
    assert top_k_ids(x, 9).tolist() == [1, 2, 6, 7, 0, 3, 4, 5, 8]  # -0.0 == 0.0: by id
    assert top_k_ids(x, 2).tolist() == [1, 2]  # of three equal maxima the two lowest ids
    assert top_k_ids(x, 20).tolist() == top_k_ids(x, 9).tolist()  # K above the vocabulary: all of it


def _logits(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "ties":  # few distinct values: ties inside and across chunks, and -0.0 / +0.0
        x = rng.integers(-3, 4, n).astype(np.float32) * np.float32(0.75)
        x[rng.random(n) < 0.1] = np.float32(-0.0)
        return x
    return (rng.standard_normal(n) * 3).astype(np.float32)


CASES = [  # vocab, K, chunk
    (300, 40, 64),    # 300 = 4 chunks of 64 + 44
    (300, 100, 64),   # K larger than a chunk
    (257, 8, 16),
    (50, 64, 64),     # K above the vocabulary, one short chunk
    (1000, 1, 64),    # K = 1: greedy whatever the temperature
]
SAMPLINGS = [SamplingOptions(), SamplingOptions(0.8, 1.0, 5), SamplingOptions(1.3, 0.9, 99),
             SamplingOptions(0.5, 0.3, 1 << 63)]


@pytest.mark.parametrize("vocab,k,chunk", CASES)
@pytest.mark.parametrize("kind", ["ties", "normal"])
def test_c_top_k_equals_the_reference(driver, vocab, k, chunk, kind):
    x = _logits(kind, vocab, vocab + k)
    for sampling in SAMPLINGS:
        sets, tokens = run_c(driver, x, k, chunk, 6, sampling)
        expect = top_k_ids(x, k).tolist()
        assert all(s == expect for s in sets)
        ref = Sampler(sampling, top_k=k)
        assert tokens == [ref.sample(x) for _ in range(6)]
        if sampling.temperature == 0:
            assert tokens[0] == int(np.argmax(x))
