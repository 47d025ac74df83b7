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

#endif
