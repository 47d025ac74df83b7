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
    static tllm_stream_chunk chunks[N_CHUNKS];
    for (uint32_t i = 0; i < N_CHUNKS; i++) {
        chunks[i].src = i * CHUNK;
        chunks[i].len = CHUNK;
        memset(blob + i * CHUNK, (int)(i + 1), CHUNK); /* chunk i holds the byte i + 1 */
    }
    blob_base = blob;
    tllm_stream s = {chunks, N_CHUNKS, 0, 0, blob, {buf0, buf1}, 0, 0u, 0u, 0u, %(head)du, 0u};
    const int need_logits[] = {%(steps)s};
    for (uint32_t t = 0; t < sizeof need_logits / sizeof need_logits[0]; t++) {
        tllm_stream_boot(&s);
        tllm_stream_begin_step(&s, need_logits[t]);
        const uint32_t n = need_logits[t] ? N_CHUNKS : %(head)du;
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


def run_driver(tmp_path, n_chunks: int, head: int) -> tuple[list[list[int]], list[int]]:
    need("gcc")
    src = tmp_path / f"drv-{n_chunks}-{head}.c"
    src.write_text(DRIVER % {"n_chunks": n_chunks, "head": head, "steps": ", ".join(map(str, STEPS))})
    exe = tmp_path / f"drv-{n_chunks}-{head}"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(firmware_dir()), str(src), "-o", str(exe)],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    steps = [[int(x) for x in part.split()] for part in out[0].split("|")[:-1]]
    return steps, [int(x) for x in out[1].split()[1:]]


@pytest.mark.parametrize("n_chunks,head", [(5, 3), (6, 3), (4, 0), (4, 4), (1, 0), (7, 6)])
def test_steps_without_head_skip_its_chunks(tmp_path, n_chunks, head):
    """(5, 3)/(6, 3): odd and even tables; (4, 0): every layer pinned, only the
    classifier streamed; (4, 4): the classifier pinned; (1, 0): one chunk."""
    steps, started = run_driver(tmp_path, n_chunks, head)
    expected = [list(range(n_chunks if need else head)) for need in STEPS]
    assert steps == expected
    # every chunk started was taken, except the last prefetch: chunk 0 of a step that never runs
    assert started == [k for step in expected for k in step] + [0]
