/* Batched prefill against step-by-step decoding, in one binary
 * (tests/host/test_prefill_logits.py): the prompt's ids come in argv; mode
 * "batched" runs them through tllm_model_prefill, prefill_batch at a time
 * as the engine does, mode "steps" one tllm_model_step each. Both then
 * decode one more token (`next`) at the position after the prompt, which
 * reads every position's k and v. Printed: the last prompt token's logits
 * and the decoded token's, as float32 bit patterns in hex, one per line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tllm_board.h"
#include "tllm_model_api.h"

/* A weight stream's copy hooks (board/copy_sync.c) stop here on misuse. */
void tllm_board_fault(const char *why) {
    fprintf(stderr, "fault: %s\n", why);
    exit(4);
}

static void print_bits(const float *logits) {
    for (uint32_t i = 0; i < tllm_model.vocab_size; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], 4);
        printf("%08x\n", u);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s batched|steps NEXT ID...\n", argv[0]);
        return 2;
    }
    const int batched = strcmp(argv[1], "batched") == 0;
    const int32_t next = atoi(argv[2]);
    const int32_t n = argc - 3;
    static uint16_t ids[4096];
    if ((uint32_t)n + 1u >= tllm_model.max_seq) return 2;
    for (int32_t i = 0; i < n; i++) ids[i] = (uint16_t)atoi(argv[3 + i]);
    float *logits = 0;
    if (batched) {
        for (int32_t pos = 0; pos < n;) {
            const int32_t left = n - pos, batch = (int32_t)tllm_model.prefill_batch;
            const int32_t k = left < batch ? left : batch;
            logits = tllm_model_prefill(ids + pos, pos, k, pos + k == n);
            pos += k;
        }
    } else {
        for (int32_t pos = 0; pos < n; pos++) logits = tllm_model_step(ids[pos], pos, pos == n - 1);
    }
    if (!logits) return 3;
    print_bits(logits);
    print_bits(tllm_model_step(next, n, 1));
    return 0;
}
