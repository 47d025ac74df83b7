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
 * prefix (compile --symbol-prefix tllm_draft_) with the target's vocabulary,
 * or a part of it mapped by id tables, and at least its context.  It
 * proposes the guesses by running k steps of its own with its own KV cache,
 * each guess drawn by the request's sampler from its output: greedy requests
 * its argmax, sampled ones with the request's temperature, top-p and the
 * build's top-K (a build with the target's --sampler; a greedy-only draft
 * drafts greedy requests only).
 *
 * The id tables (compile --speculate draft: emits them for a compress
 * --prune-vocab student, codegen/frontends/vocab_map.py makes them): the
 * student's ids are a renumbered subset of the target's, so the ids it is fed
 * go through to_draft (a target token it lacks is read as its token for that
 * token's first character) and its guesses through to_target.  The engine
 * maps at the draft's boundary only: its token buffer and the draft's cache
 * record (ids) hold target ids; its q is asked by target id through the
 * same tables (tllm_model_draft_q). */
typedef struct tllm_draft_model {
    const tllm_model_info *info;          /* its table (tllm_draft for the prefix tllm_draft_) */
    float *(*step)(int32_t token, int32_t pos, int need_logits);
    int32_t (*greedy_token)(void);        /* its argmax after a step with need_logits (greedy-only builds) */
    uint16_t *(*tokens)(void);            /* its planned token buffer: the ids its cache holds, by position */
    int (*weights_check)(const char **why); /* its blob's check at tllm_init (NULL: not checked) */
    void (*canary_arm)(void);             /* its arenas' guard words: armed with the target's (NULL: none) */
    int (*canary_ok)(void);               /* and checked with them after every generation */
    tllm_topk *(*topk)(void);             /* its set after a step (top-K builds; NULL or returning NULL: none) */
    uint16_t *(*sample_idx)(void);        /* its sampler scratch [vocab] (full-sampler builds) */
    /* A top-K build's room for its q per guess (compile --speculate draft: plans it for the target's k
     * guesses): guess j's set at j x K; NULL: none, a rejected guess's q is computed again
     * (tllm_model_draft_q). */
    float *(*guess_values)(void);
    uint16_t *(*guess_ids)(void);
    const uint16_t *to_draft;             /* [n_target_ids] target id -> the draft id it is read as (NULL: same ids) */
    const uint16_t *to_target;            /* [info->vocab_size] draft id -> target id (NULL: same ids) */
    uint32_t n_target_ids;                /* to_draft's length: the vocab_size of the target it was made for */
} tllm_draft_model;

/* An id through one of the tables (NULL: the same vocabulary, the id itself). */
static inline uint16_t tllm_draft_id(const uint16_t *table, uint32_t id) {
    return table ? table[id] : (uint16_t)id;
}

/* The draft's q for each guess of the pass (DraftModel.propose's qs): what
 * the acceptance test reads, q at the guess and q's total.  The whole q is
 * needed only after a rejection, at most once per pass: a top-K draft with
 * room for it keeps its set's candidates per guess (n of them in
 * d->guess_values / guess_ids at j x K); otherwise it is computed again
 * from a repeated draft step (tllm_model_draft_q), so a full sampler needs
 * no vocabulary-sized copy per guess. */
typedef struct {
    float at_guess[TLLM_SPECULATE_MAX_K];
    float total[TLLM_SPECULATE_MAX_K];
    int32_t n[TLLM_SPECULATE_MAX_K]; /* candidates kept (top-K drafts with guess_values) */
} tllm_draft_qs;

/* The draft's guard words, where it has them (d NULL or without: nothing to arm, intact). */
static inline void tllm_draft_model_arm(const tllm_draft_model *d) {
    if (d && d->canary_arm) d->canary_arm();
}
static inline int tllm_draft_model_intact(const tllm_draft_model *d) { return !d || !d->canary_ok || d->canary_ok(); }

/* Whether d samples as the target does: the same sampler build (full, or
 * top-K with the same K), so a sampled request's guesses and q are the
 * reference's (its Sampler serves both models). */
static inline int tllm_draft_model_samples(const tllm_draft_model *d) {
    if (d->info->greedy_only || tllm_model.greedy_only || d->info->top_k != tllm_model.top_k) return 0;
    return d->info->top_k ? d->topk != 0 : d->sample_idx != 0;
}

/* Why the engine cannot draft with d beside its target (NULL: it can). */
static inline const char *tllm_draft_model_problem(const tllm_draft_model *d) {
    if (!tllm_model.speculation) return "the draft model needs a target compiled with --speculate";
    if (!d->info || !d->step || !d->tokens) return "the draft model's table is incomplete";
    if (d->info->greedy_only ? !d->greedy_token : d->info->top_k ? !d->topk : !d->sample_idx)
        return "the draft model's table is incomplete";
    if (!d->guess_values != !d->guess_ids) return "the draft model's table is incomplete";
    if (!d->info->greedy_only && !tllm_draft_model_samples(d))
        return "the draft model must be compiled with the target's --sampler (or --sampler greedy)";
    if (!d->to_draft && !d->to_target) {
        if (d->info->vocab_size != tllm_model.vocab_size) return "the draft model's vocabulary is not the target's";
    } else { /* both tables, every id in range both ways: tables made for another pair are refused, not followed */
        int ok = d->to_draft && d->to_target && d->n_target_ids == tllm_model.vocab_size;
        for (uint32_t i = 0; ok && i < d->n_target_ids; i++) ok = d->to_draft[i] < d->info->vocab_size;
        for (uint32_t i = 0; ok && i < d->info->vocab_size; i++) ok = d->to_target[i] < tllm_model.vocab_size;
        if (!ok) return "the draft model's id tables do not map it onto the target's vocabulary";
    }
    if (d->info->max_seq < tllm_model.max_seq) return "the draft model's context is shorter than the target's";
    const tllm_context_roll *t = tllm_model.context_roll, *r = d->info->context_roll;
    if (t && (!r || r->sinks != t->sinks || r->discard != t->discard || !r->shift))
        return "the draft model must roll its context as the target does (the target's --context-policy)";
    return 0;
}

/* The target's context shift on the draft's own cache (DraftModel.shift):
 * the draft's rows sinks + discard .. *n_cached - 1 move down by discard,
 * with the ids they hold; a cache that holds no row past the dropped ones
 * keeps its sinks only.  The draft's roll is the target's (checked at
 * tllm_init), so its positions stay the target's, and the next pass's
 * catch-up finds its rows the context's again. */
static inline void tllm_draft_model_shift(const tllm_draft_model *d, uint32_t *n_cached) {
    const tllm_context_roll *roll = d->info->context_roll;
    const uint32_t from = roll->sinks + roll->discard, n = *n_cached;
    if (n > from) {
        uint16_t *ids = d->tokens();
        roll->shift((int32_t)(n - from));
        for (uint32_t i = 0; i < n - from; i++) ids[roll->sinks + i] = ids[from + i]; /* down: no overlap hazard */
        *n_cached = n - roll->discard;
    } else if (n > roll->sinks) {
        *n_cached = roll->sinks;
    }
}

/* The draft's token for guess j after a step that returned logits (NULL:
 * greedy-only or top-K), drawn by the request's sampler s as Sampler.sample
 * draws it (one coin when sampled); a sampled one also leaves q at the token
 * and q's total in qs (and a top-K draft with room its candidates). */
static inline int32_t tllm_draft_model_token(const tllm_draft_model *d, tllm_sampler *s, float *logits,
                                             tllm_draft_qs *qs, uint32_t j) {
    if (d->info->greedy_only) return d->greedy_token();
    if (s->temperature == 0.0f) return logits ? tllm_argmax(logits, (int32_t)d->info->vocab_size) : d->topk()->id[0];
    tllm_dist q;
    if (logits) tllm_dist_full(s, logits, (int32_t)d->info->vocab_size, d->sample_idx(), &q);
    else tllm_dist_topk(s, d->topk(), &q);
    const int32_t t = tllm_dist_draw(s, &q);
    qs->at_guess[j] = tllm_dist_at(&q, t);
    qs->total[j] = q.total;
    qs->n[j] = q.n;
    if (!logits && d->guess_values) { /* the set's candidates, in order: guess j's q */
        float *value = d->guess_values() + j * d->info->top_k;
        uint16_t *id = d->guess_ids() + j * d->info->top_k;
        for (int32_t i = 0; i < q.n; i++) {
            value[i] = q.p[i];
            id[i] = q.ids[i];
        }
    }
    return t;
}

/* k guesses after tokens[pos] into tokens[pos + 1 ..] (DraftModel.propose):
 * the draft's cache holds ids[0 .. *n_cached); from the first position where
 * they and the context differ it steps again (no head), up to pos - 1; then
 * tokens[pos] and each guess but the last, the head run, the request's
 * sampler s drawing the next guess (qs: each guess's q, when sampled).
 * Rejected guesses' rows are overwritten by a later catch-up.
 * A pruned draft is fed tllm_draft_id(to_draft, ...) and its guesses come
 * back through to_target; ids[] records the target ids it was fed (the
 * reference's `cached`), so the catch-up compares target ids.
 * A model that streams its weights ends every step with the next step's
 * first chunk in flight, and the board moves one transfer at a time: the
 * target's lands before the draft starts its own, and the draft's before
 * the target runs again (each lands in its own model's stream buffer, where
 * that model's next take finds it). */
static inline uint32_t tllm_model_draft(const tllm_draft_model *d, uint32_t *n_cached, uint16_t *tokens,
                                        uint32_t pos, uint32_t k, tllm_sampler *s, tllm_draft_qs *qs) {
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
        float *logits = d->step(tllm_draft_id(d->to_draft, feed), (int32_t)(pos + j), 1);
        ids[pos + j] = feed;
        feed = tllm_draft_id(d->to_target, (uint32_t)tllm_draft_model_token(d, s, logits, qs, j));
        tokens[pos + 1u + j] = feed;
    }
    *n_cached = pos + k;
    tllm_board_copy_wait();
    return k;
}

/* The draft's whole q for the guess at position pos + j (after the pass's
 * proposal, before the next): a top-K draft's kept candidates (qs), or the
 * draft's step at pos + j again, on the token it was fed there
 * (tokens[pos + j]: the pass's last token or an accepted guess), so the
 * same logits bit for bit (its cache rows up to pos + j are those the
 * proposal read, and the row it writes is the same), then the request's
 * distribution on them, no coin.  q points into the draft's own buffers,
 * which nothing touches until its next step.  Its ids are the draft's; a
 * pruned draft's q carries its id tables, so that tllm_dist_at answers by
 * target id (0 for a token it lacks), as reference/draft.py spreads q over
 * the target's ids. */
static inline void tllm_model_draft_q(const tllm_draft_model *d, const uint16_t *tokens, uint32_t pos, uint32_t j,
                                      const tllm_sampler *s, const tllm_draft_qs *qs, tllm_dist *q) {
    if (d->info->top_k && d->guess_values) {
        const uint32_t at = j * d->info->top_k;
        q->p = d->guess_values() + at;
        q->ids = d->guess_ids() + at;
        q->n = qs->n[j];
        q->by_id = 0;
        q->total = qs->total[j];
    } else {
        tllm_board_copy_wait();
        float *logits = d->step(tllm_draft_id(d->to_draft, tokens[pos + j]), (int32_t)(pos + j), 1);
        tllm_board_copy_wait();
        if (logits) tllm_dist_full(s, logits, (int32_t)d->info->vocab_size, d->sample_idx(), q);
        else tllm_dist_topk(s, d->topk(), q);
    }
    q->from_target = d->to_draft; /* the residual asks q by target id (NULL: the same ids) */
    q->to_target = d->to_target;
}

#endif
