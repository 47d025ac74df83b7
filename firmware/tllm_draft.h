/* The prompt-lookup draft of speculative decoding (compile --speculate lookup,
 * codegen/lower/speculate.py): guesses of the next tokens taken from the
 * context itself, no weights.  Text that repeats its context (a summary, an
 * extraction, an edit of given text) continues the way an earlier place of
 * the context did; elsewhere the guesses are simply rejected by the
 * verification pass, and the output is the same either way.
 *
 * The rule (twin: codegen/reference/speculative.py lookup_draft): the
 * context's suffix of m tokens, m as long as possible up to
 * TLLM_LOOKUP_NGRAM_MAX and at least TLLM_LOOKUP_NGRAM_MIN, that also ends at
 * an earlier place e < L - 1 (of the longest ones, the latest); the guesses
 * are the tokens after it, tokens[e + 1 ..], at most k of them and never
 * past the context's end.  One backward scan over the context: each earlier
 * copy of the last token is extended backwards, so a draft costs a few
 * instructions per context token. */
#ifndef TLLM_DRAFT_H
#define TLLM_DRAFT_H

#include <stdint.h>

#include "tllm_abi.h" /* TLLM_LOOKUP_NGRAM_MAX / MIN */
#include "tllm_board.h" /* tllm_board_copy_wait */
#include "tllm_model_api.h"

/* tokens[0..L) is the context; the guesses go to out[0..k) (which may be
 * tokens + L: only tokens before L are read).  Returns how many (0: no
 * earlier copy of a long enough suffix). */
static inline int32_t tllm_lookup_draft(const uint16_t *tokens, int32_t L, int32_t k, uint16_t *out) {
    if (L < 2 || k <= 0) return 0;
    const uint16_t last = tokens[L - 1];
    int32_t best_len = 0, best_end = -1;
    for (int32_t e = L - 2; e >= 0; e--) { /* latest first: a later place wins a tie */
        if (tokens[e] != last) continue;
        int32_t m = 1;
        while (m < TLLM_LOOKUP_NGRAM_MAX && e - m >= 0 && tokens[e - m] == tokens[L - 1 - m]) m++;
        if (m > best_len) {
            best_len = m;
            best_end = e;
            if (m == TLLM_LOOKUP_NGRAM_MAX) break; /* nothing earlier can be longer */
        }
    }
    if (best_len < TLLM_LOOKUP_NGRAM_MIN) return 0;
    int32_t n = L - 1 - best_end; /* tokens after the match, before the context's end */
    if (n > k) n = k;
    for (int32_t i = 0; i < n; i++) out[i] = tokens[best_end + 1 + i];
    return n;
}

/* A draft model (tllm_config.draft; twin: codegen/reference/draft.py): a
 * second generated model linked beside the target under its own symbol
 * prefix (compile --symbol-prefix tllm_draft_), a greedy-only build with the
 * target's vocabulary, or a part of it mapped by id tables, and at least its
 * context.  It proposes the guesses of greedy requests by running k steps of
 * its own with its own KV cache.
 *
 * The id tables (compile --speculate draft: emits them for a compress
 * --prune-vocab student, codegen/frontends/vocab_map.py makes them): the
 * student's ids are a renumbered subset of the target's, so the ids it is fed
 * go through to_draft (a target token it lacks is read as its token for that
 * token's first character) and its guesses through to_target.  The engine
 * maps at the draft's boundary only: its token buffer and the draft's cache
 * record (ids) hold target ids. */
typedef struct tllm_draft_model {
    const tllm_model_info *info;          /* its table (tllm_draft for the prefix tllm_draft_) */
    float *(*step)(int32_t token, int32_t pos, int need_logits);
    int32_t (*greedy_token)(void);        /* its argmax after a step with need_logits */
    uint16_t *(*tokens)(void);            /* its planned token buffer: the ids its cache holds, by position */
    int (*weights_check)(const char **why); /* its blob's check at tllm_init (NULL: not checked) */
    void (*canary_arm)(void);             /* its arenas' guard words: armed with the target's (NULL: none) */
    int (*canary_ok)(void);               /* and checked with them after every generation */
    const uint16_t *to_draft;             /* [n_target_ids] target id -> the draft id it is read as (NULL: same ids) */
    const uint16_t *to_target;            /* [info->vocab_size] draft id -> target id (NULL: same ids) */
    uint32_t n_target_ids;                /* to_draft's length: the vocab_size of the target it was made for */
} tllm_draft_model;

/* An id through one of the tables (NULL: the same vocabulary, the id itself). */
static inline uint16_t tllm_draft_id(const uint16_t *table, uint32_t id) {
    return table ? table[id] : (uint16_t)id;
}

/* The draft's guard words, where it has them (d NULL or without: nothing to arm, intact). */
static inline void tllm_draft_model_arm(const tllm_draft_model *d) {
    if (d && d->canary_arm) d->canary_arm();
}
static inline int tllm_draft_model_intact(const tllm_draft_model *d) { return !d || !d->canary_ok || d->canary_ok(); }

/* Why the engine cannot draft with d beside its target (NULL: it can). */
static inline const char *tllm_draft_model_problem(const tllm_draft_model *d) {
    if (!tllm_model.speculation) return "the draft model needs a target compiled with --speculate";
    if (!d->info || !d->step || !d->greedy_token || !d->tokens) return "the draft model's table is incomplete";
    if (!d->info->greedy_only) return "the draft model must be a greedy-only build (--sampler greedy)";
    if (!d->to_draft && !d->to_target) {
        if (d->info->vocab_size != tllm_model.vocab_size) return "the draft model's vocabulary is not the target's";
    } else { /* both tables, every id in range both ways: tables made for another pair are refused, not followed */
        int ok = d->to_draft && d->to_target && d->n_target_ids == tllm_model.vocab_size;
        for (uint32_t i = 0; ok && i < d->n_target_ids; i++) ok = d->to_draft[i] < d->info->vocab_size;
        for (uint32_t i = 0; ok && i < d->info->vocab_size; i++) ok = d->to_target[i] < tllm_model.vocab_size;
        if (!ok) return "the draft model's id tables do not map it onto the target's vocabulary";
    }
    if (d->info->max_seq < tllm_model.max_seq) return "the draft model's context is shorter than the target's";
    return 0;
}

/* k guesses after tokens[pos] into tokens[pos + 1 ..] (DraftModel.propose):
 * the draft's cache holds ids[0 .. *n_cached); from the first position where
 * they and the context differ it steps again (no head), up to pos - 1; then
 * tokens[pos] and each guess but the last, the head run, its argmax the next
 * guess.  Rejected guesses' rows are overwritten by a later catch-up.
 * A pruned draft is fed tllm_draft_id(to_draft, ...) and its guesses come
 * back through to_target; ids[] records the target ids it was fed (the
 * reference's `cached`), so the catch-up compares target ids.
 * A model that streams its weights ends every step with the next step's
 * first chunk in flight, and the board moves one transfer at a time: the
 * target's lands before the draft starts its own, and the draft's before
 * the target runs again (each lands in its own model's stream buffer, where
 * that model's next take finds it). */
static inline uint32_t tllm_model_draft(const tllm_draft_model *d, uint32_t *n_cached, uint16_t *tokens,
                                        uint32_t pos, uint32_t k) {
    uint16_t *ids = d->tokens();
    tllm_board_copy_wait();
    const uint32_t limit = *n_cached < pos ? *n_cached : pos;
    uint32_t same = 0;
    while (same < limit && ids[same] == tokens[same]) same++;
    for (uint32_t p = same; p < pos; p++) {
        d->step(tllm_draft_id(d->to_draft, tokens[p]), (int32_t)p, 0);
        ids[p] = tokens[p];
    }
    uint16_t feed = tokens[pos];
    for (uint32_t j = 0; j < k; j++) {
        d->step(tllm_draft_id(d->to_draft, feed), (int32_t)(pos + j), 1);
        ids[pos + j] = feed;
        feed = tllm_draft_id(d->to_target, (uint32_t)d->greedy_token());
        tokens[pos + 1u + j] = feed;
    }
    *n_cached = pos + k;
    tllm_board_copy_wait();
    return k;
}

#endif
