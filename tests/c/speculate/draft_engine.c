/* The engine drafting with a draft model (tests/host/test_draft_engine_host.py):
 * the target (default symbols, compiled with --speculate) and a draft
 * compiled with --symbol-prefix tllm_draft_, linked together.
 *   draft_engine MAX_NEW USE_DRAFT TEMPERATURE TOP_P SEED ID...
 * runs one generation through tllm_api.h (with the draft when USE_DRAFT is 1;
 * 2: the draft through identity id tables, which must draft as 1 does; 3 and
 * 4: tables spoilt, made for another target or with an id past the draft's
 * vocabulary, which tllm_init refuses; 5:A:B:C:D: identity tables with
 * to_target's entries A and B swapped, and to_draft's C and D; the prompt
 * lookup when 0) and prints the generated ids, then each pass's token count,
 * then the draft's steps (its step function counted through the table); or
 * the refusal's status and detail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tllm_api.h"
#include "tllm_draft.h" /* tllm_draft_model; tllm_model_api.h */

extern const tllm_model_info tllm_draft;
float *tllm_draft_step(int32_t token, int32_t pos, int need_logits);
int32_t tllm_draft_greedy_token(void);
uint16_t *tllm_draft_tokens(void);
int tllm_draft_weights_check(const char **why);
void tllm_draft_canary_arm(void);
int tllm_draft_canary_ok(void);
tllm_topk *tllm_draft_topk(void);
uint16_t *tllm_draft_sample_idx(void);
/* A top-K draft compiled with room for its q per guess defines these (CompileOptions.draft_guesses); weak:
 * NULL otherwise, and the engine computes a rejected guess's q again. */
__attribute__((weak)) float *tllm_draft_guess_values(void);
__attribute__((weak)) uint16_t *tllm_draft_guess_ids(void);

static uint32_t draft_steps; /* every step the engine asks of the draft: its catch-up, its guesses, any re-step */

static float *counted_step(int32_t token, int32_t pos, int need_logits) {
    draft_steps++;
    return tllm_draft_step(token, pos, need_logits);
}

static const tllm_draft_model DRAFT = {&tllm_draft, counted_step, tllm_draft_greedy_token, tllm_draft_tokens,
                                       tllm_draft_weights_check, tllm_draft_canary_arm, tllm_draft_canary_ok,
                                       tllm_draft_topk, tllm_draft_sample_idx, tllm_draft_guess_values,
                                       tllm_draft_guess_ids, 0, 0, 0};

enum { MAX_IDS = 4096 };
static uint16_t to_draft_ids[MAX_IDS], to_target_ids[MAX_IDS];
static tllm_draft_model with_tables;

static void swap(uint16_t *t, unsigned a, unsigned b) {
    const uint16_t x = t[a];
    t[a] = t[b];
    t[b] = x;
}

/* DRAFT with identity id tables over the shared vocabulary, spoilt or swapped as USE_DRAFT says. */
static const tllm_draft_model *tabled_draft(const char *mode) {
    const int how = atoi(mode);
    if (tllm_model.vocab_size > MAX_IDS || tllm_draft.vocab_size > MAX_IDS) return &DRAFT;
    for (uint32_t i = 0; i < tllm_draft.vocab_size; i++) to_draft_ids[i] = to_target_ids[i] = (uint16_t)i;
    with_tables = DRAFT;
    with_tables.to_draft = to_draft_ids;
    with_tables.to_target = to_target_ids;
    with_tables.n_target_ids = tllm_model.vocab_size + (how == 3 ? 1u : 0u);
    if (how == 4) to_draft_ids[0] = (uint16_t)tllm_draft.vocab_size;
    unsigned a, b, c, d;
    if (how == 5 && sscanf(mode, "5:%u:%u:%u:%u", &a, &b, &c, &d) == 4 && a < tllm_draft.vocab_size &&
        b < tllm_draft.vocab_size && c < tllm_draft.vocab_size && d < tllm_draft.vocab_size) {
        swap(to_target_ids, a, b);
        swap(to_draft_ids, c, d);
    }
    return &with_tables;
}

enum { MAX_TOKENS = 512 };
static uint32_t pass_tokens[MAX_TOKENS], n_passes;

static int on_token(const tllm_token *t, void *user) {
    (void)user;
    printf(t->index ? " %d" : "tokens: %d", (int)t->id);
    if (t->pass + 1u > n_passes) pass_tokens[n_passes++] = t->pass_tokens;
    return 0;
}

int main(int argc, char **argv) {
    enum { FIRST_ID = 6 };
    static uint16_t ids[MAX_TOKENS];
    if (argc <= FIRST_ID || argc - FIRST_ID > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MAX_NEW USE_DRAFT TEMPERATURE TOP_P SEED ID...\n", argv[0]);
        return 2;
    }
    const int use_draft = atoi(argv[2]);
    tllm_config config = {0, use_draft == 1 ? &DRAFT : use_draft >= 2 ? tabled_draft(argv[2]) : 0};
    tllm_status s = tllm_init(&config);
    if (s != TLLM_OK) {
        printf("status: %d %s\n", (int)s, tllm_error_detail());
        return 0;
    }
    tllm_gen_request rq = {0};
    rq.n_prompt = (uint32_t)(argc - FIRST_ID);
    for (uint32_t i = 0; i < rq.n_prompt; i++) ids[i] = (uint16_t)atoi(argv[FIRST_ID + i]);
    rq.prompt_ids = ids;
    rq.max_new_tokens = (uint32_t)atoi(argv[1]);
    rq.temperature = (float)atof(argv[3]);
    rq.top_p = (float)atof(argv[4]);
    rq.seed = strtoull(argv[5], 0, 10);
    tllm_result result;
    s = tllm_generate(&rq, on_token, 0, &result);
    if (s != TLLM_OK) {
        printf("status: %d %s\n", (int)s, tllm_error_detail());
        return 0;
    }
    printf("\npasses:");
    for (uint32_t i = 0; i < n_passes; i++) printf(" %u", (unsigned)pass_tokens[i]);
    printf("\ndraft_steps: %u\n", (unsigned)draft_steps);
    return 0;
}
