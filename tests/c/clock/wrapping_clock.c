/* Host test driver: the engine's costs with a clock that wraps (tests/host/test_engine_clock.py).
 *   wrapping_clock MAX_NEW ID...
 *
 * A board's clock is often a 32-bit hardware counter extended to 64 bits at
 * every read (boards/stm32h750/board.c extends DWT_CYCCNT that way): it stays
 * right only while no more than 2^32 ticks pass between two reads.  Here the
 * counter is a variable, and every pass over the weights the engine makes
 * (tllm_model_prefill, tllm_model_step: wrapped with the linker's --wrap)
 * advances it by ADVANCE ticks, more than half of 2^32: two passes without
 * a read lose 2^32.  Prints "prefill_cost passes" then one "cost passes" line
 * per generated token, where passes counts the model calls since the
 * previous line: the costs must be exactly passes x ADVANCE. */
#include <stdio.h>
#include <stdlib.h>

#include "tllm_api.h"

#define ADVANCE 3000000000u

static uint32_t counter;     /* the hardware register: wraps mod 2^32 */
static uint32_t counter_last;
static uint64_t counter_total;
static unsigned long calls;  /* model calls since the last printed line */

static uint64_t extended_clock(void) {
    const uint32_t now = counter;
    counter_total += (uint32_t)(now - counter_last);
    counter_last = now;
    return counter_total;
}

float *__real_tllm_model_prefill(const uint16_t *tokens, int32_t pos, int32_t n, int need_logits);
float *__real_tllm_model_step(int32_t token, int32_t pos, int need_logits);

float *__wrap_tllm_model_prefill(const uint16_t *tokens, int32_t pos, int32_t n, int need_logits) {
    counter += ADVANCE;
    calls++;
    return __real_tllm_model_prefill(tokens, pos, n, need_logits);
}

float *__wrap_tllm_model_step(int32_t token, int32_t pos, int need_logits) {
    counter += ADVANCE;
    calls++;
    return __real_tllm_model_step(token, pos, need_logits);
}

static unsigned long prefill_calls;
static int first_token = 1;

static int print_cost(const tllm_token *t, void *user) {
    (void)user;
    if (first_token) { /* the prompt's passes came before this token's (none: it is the prompt's) */
        first_token = 0;
        prefill_calls = calls;
        calls = 0;
    }
    printf("%llu %lu\n", (unsigned long long)t->cost, calls);
    calls = 0;
    return 0;
}

int main(int argc, char **argv) {
    enum { MAX_PROMPT = 256 };
    static uint16_t ids[MAX_PROMPT];
    if (argc < 3 || argc - 2 > MAX_PROMPT) {
        fprintf(stderr, "usage: %s MAX_NEW ID...\n", argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) ids[i - 2] = (uint16_t)strtoul(argv[i], 0, 10);
    tllm_gen_request rq = {ids, (uint32_t)(argc - 2), (uint32_t)strtoul(argv[1], 0, 10), 0.0f, 1.0f, 1u};
    tllm_config config = {0};
    config.clock = extended_clock;
    if (tllm_init(&config) != TLLM_OK) {
        fprintf(stderr, "tllm_init failed: %s\n", tllm_error_detail());
        return 1;
    }
    tllm_result res;
    if (tllm_generate(&rq, print_cost, NULL, &res) != TLLM_OK) {
        fprintf(stderr, "tllm_generate failed\n");
        return 1;
    }
    printf("prefill %llu %lu\n", (unsigned long long)res.prefill_cost, prefill_calls);
    return 0;
}
