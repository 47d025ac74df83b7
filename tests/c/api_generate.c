/* Host test driver for the C API (tests/c/check_tokens.cmake):
 *   tllm_api_generate MAX_NEW TEMPERATURE TOP_P SEED ID...
 * prints the generated ids on one line, space-separated.  Built with
 * API_GENERATE_DRAFT (tests/host/test_draft_cmake_host.py: a library made of
 * a `--speculate draft:MODEL` tree) it hands the tree's draft table to
 * tllm_init and prints a second line, "passes N" (passes over the weights). */
#include <stdio.h>
#include <stdlib.h>

#include "tllm_api.h"
#ifdef API_GENERATE_DRAFT
#include "tllm_draft.h"
extern const tllm_draft_model tllm_console_draft; /* draft/tllm_draft_table.c, linked in by the library */
#endif

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
#ifdef API_GENERATE_DRAFT
    tllm_config cfg = {0, &tllm_console_draft};
    tllm_status s = tllm_init(&cfg);
#else
    tllm_status s = tllm_init(NULL);
#endif
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_init: %s (%s)\n", tllm_status_message(s), tllm_error_detail());
        return 1;
    }
    tllm_result res;
    s = tllm_generate(&rq, print_id, NULL, &res);
    printf("\n");
#ifdef API_GENERATE_DRAFT
    printf("passes %u\n", (unsigned)res.passes);
#endif
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_generate: %s\n", tllm_status_message(s));
        return 1;
    }
    return 0;
}
