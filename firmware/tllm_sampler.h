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

/* ---- a draft model's guesses (codegen/reference/sampler.py Sampler.distribution, sample_guess) ----
 * A sampled request drafts with the request's own sampler on the draft's
 * output, so the acceptance rule needs the draft's distribution q as well
 * as the target's p.  Both are a tllm_dist: the candidates a sampled
 * request draws from, in their order, and their mass as the coin is scaled. */
typedef struct {
    const float *p;      /* the probabilities: by token id (a full sampler's vector), or in the candidates' order */
    const uint16_t *ids; /* the candidates in order; NULL: every id 0 .. n - 1 (a full sampler at top_p = 1) */
    int32_t n;           /* how many */
    int32_t by_id;       /* p is indexed by token id */
    float total;         /* their float32 sum as the draw scales its coin (1 where the softmax is all candidates) */
    /* A vocabulary-pruned draft's q, asked by target id (tllm_dist_at): target id -> its id, and back; an id
     * whose round trip is another has q 0 (a token the draft lacks).  NULL: the ids are the asker's. */
    const uint16_t *from_target;
    const uint16_t *to_target;
} tllm_dist;

/* The distribution a sampled request (temperature > 0) draws from, no coin:
 * full-sampler logits (n floats, overwritten by the probabilities; idx [n]
 * scratch, the nucleus's ids when top_p < 1), or a top-K set (its values
 * overwritten).  d points into those buffers. */
void tllm_dist_full(const tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, tllm_dist *d);
void tllm_dist_topk(const tllm_sampler *s, tllm_topk *t, tllm_dist *d);

/* One coin from d, the token tllm_sample / tllm_sample_topk draws from the
 * same logits, bit for bit. */
int32_t tllm_dist_draw(tllm_sampler *s, const tllm_dist *d);

/* d's probability of token id: 0 outside its candidates (and, through d's id
 * maps, for a token a pruned draft lacks). */
float tllm_dist_at(const tllm_dist *d, int32_t id);

/* The first half of a guessed position under a draft model's q: the guess g
 * is kept when u * (q_g * S) < p(g) * q_total (one coin u; p the
 * distribution of the target's logits as tllm_dist_full makes it, S its
 * total).  Returns 1 when kept; 0 when not, with *p describing the target's
 * candidates for the residual draw.  The caller only then needs the draft's
 * whole q (the engine computes it again: tllm_model_draft_q). */
int tllm_guess_kept(tllm_sampler *s, float *logits, int32_t n, uint16_t *idx, int32_t g, float q_g, float q_total,
                    tllm_dist *p);

/* The same within the target's top-K set t (tllm_dist_topk). */
int tllm_topk_guess_kept(tllm_sampler *s, tllm_topk *t, int32_t g, float q_g, float q_total, tllm_dist *p);

/* The second half after a rejection: a second coin draws from p's
 * candidates without g, weighted max(0, p * q->total - q * p->total) (the
 * normalised max(0, p - q)), in order (the last of them when rounding leaves
 * the coin above every running sum). */
int32_t tllm_guess_residual(tllm_sampler *s, const tllm_dist *p, int32_t g, const tllm_dist *q);

#endif
