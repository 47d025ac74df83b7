/* Host test driver for the C API (tests/c/check_tokens.cmake):
 *   tllm_api_generate MAX_NEW TEMPERATURE TOP_P SEED ID...
 * prints the generated ids on one line, space-separated. */
#include <stdio.h>
#include <stdlib.h>

#include "tllm_api.h"

static int print_id(const tllm_token *t, void *user) {
    (void)user;
    printf(t->index ? " %d" : "%d", (int)t->id);
    return 0;
}

int main(int argc, char **argv) {
    enum { MAX_PROMPT = 256 };
    static uint16_t ids[MAX_PROMPT];
    if (argc < 6 || argc - 5 > MAX_PROMPT) {
        fprintf(stderr, "usage: %s MAX_NEW TEMPERATURE TOP_P SEED ID...\n", argv[0]);
        return 2;
    }
    for (int i = 5; i < argc; i++) ids[i - 5] = (uint16_t)strtoul(argv[i], 0, 10);
    tllm_gen_request rq = {ids, (uint32_t)(argc - 5), (uint32_t)strtoul(argv[1], 0, 10), strtof(argv[2], 0),
                           strtof(argv[3], 0), strtoull(argv[4], 0, 10)};
    tllm_status s = tllm_init(NULL);
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_init: %s (%s)\n", tllm_status_message(s), tllm_error_detail());
        return 1;
    }
    tllm_result res;
    s = tllm_generate(&rq, print_id, NULL, &res);
    printf("\n");
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_generate: %s\n", tllm_status_message(s));
        return 1;
    }
    return 0;
}
