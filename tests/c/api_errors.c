/* Every status code and stop reason of tllm_api.h, on the bundled model
 * built for the host. Prints one line per failed check; exit 0 when none. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tllm_api.h"

static int failures;

#define CHECK(cond)                                                     \
    do {                                                                \
        if (!(cond)) {                                                  \
            printf("%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            failures++;                                                 \
        }                                                               \
    } while (0)

static int stop_after_three(const tllm_token *t, void *user) {
    (*(uint32_t *)user)++;
    return t->index == 2;
}

static uint64_t ticks;
static uint64_t fake_clock(void) { return ticks += 5; }

int main(void) {
    static uint16_t ids[1024];
    const tllm_model_desc *info = tllm_info();
    CHECK(info->vocab_size == 512 && info->max_seq == 512 && info->greedy_only == 0);
    for (uint32_t i = 0; i < info->max_seq; i++) ids[i] = (uint16_t)(i % info->vocab_size);
    tllm_gen_request rq = {ids, 5, 8, 0.0f, 1.0f, 0};
    tllm_result res;

    CHECK(tllm_generate(&rq, NULL, NULL, &res) == TLLM_ERR_NOT_READY);
    tllm_config cfg = {fake_clock, 0}; /* no draft model */
    CHECK(tllm_init(&cfg) == TLLM_OK);
    CHECK(strcmp(tllm_error_detail(), "") == 0);

    CHECK(tllm_check_request(NULL) == TLLM_ERR_ARGUMENT);
    CHECK(tllm_generate(NULL, NULL, NULL, NULL) == TLLM_ERR_ARGUMENT);
    tllm_gen_request bad = rq;
    bad.prompt_ids = NULL;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_ARGUMENT);
    bad = rq, bad.n_prompt = 0;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_EMPTY_PROMPT);
    bad = rq, bad.n_prompt = info->max_seq;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_PROMPT_TOO_LONG);
    bad = rq, ids[3] = (uint16_t)info->vocab_size;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_TOKEN_ID);
    CHECK(tllm_generate(&bad, NULL, NULL, &res) == TLLM_ERR_TOKEN_ID);
    ids[3] = 3;
    bad = rq, bad.temperature = -1.0f;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_SAMPLING);
    bad = rq, bad.temperature = NAN;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_SAMPLING);
    bad = rq, bad.top_p = 0.0f;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_SAMPLING);
    bad = rq, bad.top_p = 1.5f;
    CHECK(tllm_check_request(&bad) == TLLM_ERR_SAMPLING);
    CHECK(tllm_check_request(&rq) == TLLM_OK);
    CHECK(strcmp(tllm_status_message(TLLM_ERR_EMPTY_PROMPT), "empty prompt") == 0);
    CHECK(strcmp(tllm_status_message((tllm_status)42), "unknown status") == 0);

    /* max_new_tokens reached; costs come from the clock */
    CHECK(tllm_generate(&rq, NULL, NULL, &res) == TLLM_OK);
    CHECK(res.stop_reason == TLLM_STOP_MAX_TOKENS && res.n_prompt == 5 && res.n_generated == 8);
    CHECK(res.prefill_cost > 0 && res.tokens != NULL && res.tokens[0] == ids[0]);

    /* the callback stops it after three tokens */
    uint32_t seen = 0;
    CHECK(tllm_generate(&rq, stop_after_three, &seen, &res) == TLLM_OK);
    CHECK(res.stop_reason == TLLM_STOP_CALLBACK && res.n_generated == 3 && seen == 3);

    /* nothing to generate */
    rq.max_new_tokens = 0;
    CHECK(tllm_generate(&rq, NULL, NULL, &res) == TLLM_OK);
    CHECK(res.stop_reason == TLLM_STOP_MAX_TOKENS && res.n_generated == 0);

    /* the context fills up */
    rq.n_prompt = info->max_seq - 2;
    rq.max_new_tokens = 100;
    CHECK(tllm_generate(&rq, NULL, NULL, &res) == TLLM_OK);
    CHECK(res.stop_reason == TLLM_STOP_CONTEXT && res.n_generated == 2);

    /* multi-turn KV reuse: the context just filled holds max_seq tokens, so any continue is past it */
    const tllm_history *held = tllm_history_held();
    CHECK(held->n_tokens == info->max_seq && held->crc != 0);
    tllm_history named = *held;
    tllm_gen_request next = {ids + 10, 1, 4, 0.0f, 1.0f, 0};
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_ERR_CONTEXT_FULL);
    CHECK(tllm_check_continue(NULL, &named) == TLLM_ERR_ARGUMENT);
    /* a fresh conversation of 5 ids and 4 tokens, then its continue and one of another history */
    rq.n_prompt = 5;
    rq.max_new_tokens = 4;
    CHECK(tllm_generate(&rq, NULL, NULL, &res) == TLLM_OK);
    CHECK(tllm_history_held()->n_tokens == 9);
    named = *tllm_history_held();
    named.crc ^= 1u;
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_ERR_HISTORY);
    named.crc ^= 1u, named.n_tokens++;
    CHECK(tllm_check_continue(&next, &named) == TLLM_ERR_HISTORY);
    named.n_tokens--;
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_OK); /* the refusals kept it */
    CHECK(res.n_prompt == 1 && res.n_generated == 4 && res.tokens[0] == ids[10]);
    CHECK(tllm_history_held()->n_tokens == 14);
    next.n_prompt = 0; /* no new ids: the last token, then on */
    named = *tllm_history_held();
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_OK && tllm_history_held()->n_tokens == 18);
    next.max_new_tokens = 0; /* runs nothing: ends the conversation */
    named = *tllm_history_held();
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_OK && tllm_history_held()->n_tokens == 0);
    CHECK(tllm_continue(&next, &named, NULL, NULL, &res) == TLLM_ERR_HISTORY);
    CHECK(strcmp(tllm_status_message(TLLM_ERR_HISTORY), "unknown status") != 0);
    CHECK(strcmp(tllm_status_message(TLLM_ERR_CONTEXT_FULL), "unknown status") != 0);

    /* token text */
    uint32_t len = 99;
    const uint8_t *text = tllm_token_text(-1, &len);
    CHECK(text != NULL && len == 0);
    text = tllm_token_text(300, &len);
    CHECK(text != NULL && len > 0);

    if (failures == 0) printf("all API checks passed\n");
    return failures != 0;
}
