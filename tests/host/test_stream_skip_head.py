"""Host tier: firmware/tllm_stream.h's chunk order when a step skips the head
(a prompt token before the last, tllm_model_step's need_logits 0).

A C driver runs tllm_stream.h against a recording copy hook that enforces
the board contract (one transfer in flight, no read before its wait) and
logs every chunk started.  Steps with and without the head are mixed as the
engine mixes them (several prompts: 0 ... 0 1 1 1, then 0 again); each take
must return the chunk the step's call order expects, and a skipped head
must cost no transfer: the next step's chunk 0 is the one in flight."""
import subprocess

import pytest

from firmware_harness import need
from tinyllm_gen.resources import firmware_dir

pytestmark = pytest.mark.host

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tllm_stream.h"

static int in_flight;
static uint32_t started[4096];
static uint32_t n_started;
static const uint8_t *blob_base;

void tllm_board_copy_start(void *dst, const void *src, uint32_t len) {
    if (in_flight) { printf("FAULT second start\n"); exit(3); }
    in_flight = 1;
    memcpy(dst, src, len);
    started[n_started++] = (uint32_t)((const uint8_t *)src - blob_base);
}
void tllm_board_copy_wait(void) { in_flight = 0; }

#define N_CHUNKS %(n_chunks)d
#define CHUNK 32u

int main(void) {
    static uint8_t blob[N_CHUNKS * CHUNK];
    static uint8_t buf0[CHUNK], buf1[CHUNK];
    static const uint32_t counts[] = {%(counts)s}; /* chunks per run, summing to N_CHUNKS */
    static tllm_stream_run runs[sizeof counts / sizeof counts[0]];
    uint32_t at = 0;
    for (uint32_t r = 0; r < sizeof counts / sizeof counts[0]; r++) {
        runs[r].src = at * CHUNK;
        runs[r].stride = runs[r].len = runs[r].last_len = CHUNK;
        runs[r].count = counts[r];
        at += counts[r];
    }
    for (uint32_t i = 0; i < N_CHUNKS; i++) memset(blob + i * CHUNK, (int)(i + 1), CHUNK); /* chunk i: byte i + 1 */
    blob_base = blob;
    tllm_stream s = {runs, sizeof counts / sizeof counts[0], 0, 0, blob, {buf0, buf1}, 0, 0u, 0u, 0u, 0u,
                     %(head_run)du, 0u};
    const int need_logits[] = {%(steps)s};
    for (uint32_t t = 0; t < sizeof need_logits / sizeof need_logits[0]; t++) {
        tllm_stream_boot(&s);
        tllm_stream_begin_step(&s, need_logits[t]);
        const uint32_t n = need_logits[t] ? N_CHUNKS : %(head)du; /* the head's first chunk */
        for (uint32_t k = 0; k < n; k++) printf("%%u ", (unsigned)tllm_stream_take(&s)[0] - 1u);
        printf("|");
    }
    printf("\nstarted");
    for (uint32_t i = 0; i < n_started; i++) printf(" %%u", (unsigned)(started[i] / CHUNK));
    printf("\n");
    return 0;
}
"""

# Two generations as the engine runs them: a 3-token prompt (two steps
# without the head), two decoded tokens, then a 2-token prompt.
STEPS = [0, 0, 1, 1, 1, 0, 1, 1]


def run_driver(tmp_path, counts: list[int], head_run: int) -> tuple[list[list[int]], list[int]]:
    """The stream over runs of `counts` chunks, the head starting at run head_run."""
    need("gcc")
    n_chunks, head = sum(counts), sum(counts[:head_run])
    name = f"drv-{'-'.join(map(str, counts))}-{head_run}"
    src = tmp_path / f"{name}.c"
    src.write_text(DRIVER % {"n_chunks": n_chunks, "head": head, "head_run": head_run,
                             "counts": ", ".join(f"{c}u" for c in counts), "steps": ", ".join(map(str, STEPS))})
    exe = tmp_path / name
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(firmware_dir()), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    steps = [[int(x) for x in part.split()] for part in out[0].split("|")[:-1]]
    return steps, [int(x) for x in out[1].split()[1:]]


@pytest.mark.parametrize("counts,head_run", [([1, 2, 2], 2), ([3, 3], 1), ([1, 1, 1, 1, 1, 1], 3), ([4], 0),
                                             ([2, 2], 2), ([1], 0), ([3, 2, 1, 1], 3)])
def test_steps_without_head_skip_its_chunks(tmp_path, counts, head_run):
    """Runs of several chunks and of one; odd and even tables; ([4], 0): every
    layer pinned, only the classifier streamed; ([2, 2], 2): the classifier
    pinned; ([1], 0): one chunk."""
    steps, started = run_driver(tmp_path, counts, head_run)
    n_chunks, head = sum(counts), sum(counts[:head_run])
    expected = [list(range(n_chunks if need else head)) for need in STEPS]
    assert steps == expected
    # every chunk started was taken, except the last prefetch: chunk 0 of a step that never runs
    assert started == [k for step in expected for k in step] + [0]
