/* Token sampling; bit-exact twin: codegen/sampler.py. */
#ifndef TLLM_SAMPLER_H
#define TLLM_SAMPLER_H

#include "tllm_numerics.h" /* first: the float rules, see there */

#include <stdint.h>

typedef struct {
    uint64_t rng_state;
    float temperature; /* 0: greedy */
    float top_p;       /* in (0, 1]; 1: sample the full distribution */
} tllm_sampler;

void tllm_sampler_init(tllm_sampler *s, float temperature, float top_p, uint64_t seed);

/* Picks the next token. logits (n floats) is overwritten with probabilities
 * when sampling; idx (n entries) is scratch for the top-p candidates. */
int32_t tllm_sample(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx);

int32_t tllm_argmax(const float *x, int32_t n);

/* Speculative decoding (codegen/reference/sampler.py Sampler.sample_guess):
 * the token at a position the draft guessed g for, under the acceptance
 * rule of a one-hot draft (q(g) = 1).  g < 0 (no guess): tllm_sample.
 * Temperature 0: the argmax (the guess survives when it is the argmax).
 * Otherwise p = the sampler's distribution (softmax(logits / T), within the
 * nucleus when top_p < 1, total S its sum; S = 1 when top_p = 1): a coin u
 * keeps g when u * S < p(g) (probability p(g) / S; never when g is outside
 * the nucleus); else a second coin draws from the candidates without g
 * (normalised max(0, p - q)).  The returned token is g exactly when it was
 * kept.  logits and idx as tllm_sample. */
int32_t tllm_sample_guess(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, int32_t g);

/* --sampler topk:K builds (codegen/sampler.py's docstring defines them): no
 * logits vector; the classifier's chunks feed a running set of the K
 * largest logits in (value descending, id ascending) order, kept sorted in
 * two planned K-entry buffers. */
typedef struct {
    float *value;  /* [cap] the logits, then (tllm_sample_topk) the probabilities */
    uint16_t *id;  /* [cap] */
    int32_t cap;   /* K */
    int32_t n;     /* entries held */
} tllm_topk;

/* Rows r0 .. r0 + n - 1 of the logits are x[0..n), rows in ascending order
 * over the calls: each row enters when the set has room or when it is
 * strictly greater than the last entry (an equal one has a higher id, so
 * it sorts after).  r0 == 0 empties the set first. */
void tllm_topk_push(tllm_topk *t, const float *x, int32_t n, int32_t r0);

/* Picks the next token from the set (overwrites its values). */
int32_t tllm_sample_topk(tllm_sampler *s, tllm_topk *t);

/* tllm_sample_guess within a top-K set (its values are overwritten): the
 * candidates are the set (within its nucleus when top_p < 1), in its order;
 * temperature 0: the set's first entry; g < 0: tllm_sample_topk. */
int32_t tllm_sample_topk_guess(tllm_sampler *s, tllm_topk *t, int32_t g);

#endif
