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

#endif
