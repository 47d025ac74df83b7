/* Many sampled generations in one process, one seed after another
 * (tests/host/test_speculate_distribution.py): the token distribution of a
 * speculative build against a plain one's needs thousands of seeds.
 *   sample_many MAX_NEW TEMPERATURE TOP_P SEED0 N_SEEDS ID...
 * prints, per seed SEED0 .. SEED0 + N_SEEDS - 1, the generated ids on one
 * line, then the passes over the weights they took. */
#include <stdio.h>
#include <stdlib.h>

#include "tllm_api.h"

static int print_id(const tllm_token *t, void *user) {
    (void)user;
    printf(t->index ? " %d" : "%d", (int)t->id);
    return 0;
}

int main(int argc, char **argv) {
    enum { MAX_PROMPT = 256, FIRST_ID = 6 };
    static uint16_t ids[MAX_PROMPT];
    if (argc <= FIRST_ID || argc - FIRST_ID > MAX_PROMPT) {
        fprintf(stderr, "usage: %s MAX_NEW TEMPERATURE TOP_P SEED0 N_SEEDS ID...\n", argv[0]);
        return 2;
    }
    const uint32_t n_prompt = (uint32_t)(argc - FIRST_ID);
    const unsigned long long seed0 = strtoull(argv[4], 0, 10), n_seeds = strtoull(argv[5], 0, 10);
    if (tllm_init(NULL) != TLLM_OK) {
        fprintf(stderr, "tllm_init: %s\n", tllm_error_detail());
        return 1;
    }
    for (unsigned long long seed = seed0; seed < seed0 + n_seeds; seed++) {
        /* the engine generates into the token buffer: the prompt is copied in again for each seed */
        for (uint32_t i = 0; i < n_prompt; i++) ids[i] = (uint16_t)strtoul(argv[FIRST_ID + i], 0, 10);
        tllm_gen_request rq = {ids, n_prompt, (uint32_t)strtoul(argv[1], 0, 10), strtof(argv[2], 0),
                               strtof(argv[3], 0), seed};
        tllm_result res;
        if (tllm_generate(&rq, print_id, NULL, &res) != TLLM_OK) return 1;
        printf(" | %u\n", (unsigned)res.passes);
    }
    return 0;
}
