/* A user's own main over a `--speculate draft:MODEL` tree (tests/host/test_draft_cmake_host.py):
 *   cmake_draft MAX_NEW ID...
 * links the library tinyllm_add_model / tinyllm_generate_model make of such a tree, hands its
 * draft table to tllm_init and prints the greedy generation's ids on one line, then
 * "passes N" (passes over the target's weights). */
#include <stdio.h>
#include <stdlib.h>

#include "tllm_api.h"
#include "tllm_draft.h"

extern const tllm_draft_model tllm_console_draft; /* draft/tllm_draft_table.c, linked in by the library */

static int print_id(const tllm_token *t, void *user) {
    (void)user;
    printf(t->index ? " %d" : "%d", (int)t->id);
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
    tllm_config cfg = {0, &tllm_console_draft};
    tllm_status s = tllm_init(&cfg);
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_init: %s (%s)\n", tllm_status_message(s), tllm_error_detail());
        return 1;
    }
    tllm_gen_request rq = {ids, (uint32_t)(argc - 2), (uint32_t)strtoul(argv[1], 0, 10), 0.0f, 1.0f, 0};
    tllm_result res;
    s = tllm_generate(&rq, print_id, NULL, &res);
    printf("\npasses %u\n", (unsigned)res.passes);
    if (s != TLLM_OK) {
        fprintf(stderr, "tllm_generate: %s (%s)\n", tllm_status_message(s), tllm_error_detail());
        return 1;
    }
    return 0;
}
