/* What the generated model (tllm_model.c, tllm_vocab.c) provides to the
 * hand-written runtime. The generator and this header agree on
 * TLLM_ABI_VERSION; tllm_model.h stops the build with #error otherwise. */
#ifndef TLLM_MODEL_API_H
#define TLLM_MODEL_API_H

#include <stdint.h>

#include "tllm_sampler.h"

#include "tllm_abi.h" /* TLLM_ABI_VERSION */

/* Generation state machine (lives in the planned arena). Fixed-size fields
 * only: the planner reserves TLLM_GEN_STATE_BYTES for it. */
typedef enum {
    TLLM_IDLE = 0, TLLM_PREFILL, TLLM_DECODE, TLLM_SAMPLE, TLLM_EMIT, TLLM_DONE,
    TLLM_DRAFT, TLLM_VERIFY /* speculative decoding (tllm_engine.c) */
} tllm_phase;

typedef struct {
    uint32_t phase;
    uint32_t pos;        /* next position to compute */
    uint32_t n_prompt;   /* where the prefill ends: the prompt's length, a continue's conversation so far */
    uint32_t n_generated;
    uint32_t max_new;
    int32_t token;       /* token being fed / just sampled */
    uint32_t stop_reason; /* 0 running, 1 eos, 2 max tokens, 3 context full */
    uint32_t passes;      /* passes over the weights that produced tokens (the prompt's last one first) */
    tllm_sampler sampler;
    uint64_t t_start;
    uint64_t t_prefill;
} tllm_gen_state;

/* Speculative decoding (compile --speculate, codegen/lower/speculate.py;
 * the engine's rule: codegen/reference/speculative.py).  A build that
 * decodes plainly has none (tllm_model_info.speculation is NULL). */
typedef struct {
    uint32_t k; /* prompt-lookup guesses per pass at most: verify takes 1 .. k + 1 tokens */
    /* The verification pass: n tokens at positions pos .. pos + n - 1 through
     * the layers together, as tllm_model_prefill runs them, then the head on
     * every one of them, the classifier's weights read once for the n.  The
     * KV cache ends as n tllm_model_step calls leave it, bit for bit, and so
     * does each position's classifier result: full builds return position
     * i's logits at the result + i * vocab_size (NULL otherwise). */
    float *(*verify)(const uint16_t *tokens, int32_t pos, int32_t n);
    int32_t (*token)(int32_t i);   /* after verify: position i's argmax (greedy-only builds; -1 otherwise) */
    tllm_topk *(*topk)(int32_t i); /* after verify: position i's set (top-K builds; NULL otherwise) */
} tllm_speculation;

/* Rolling context (compile --context-policy roll[:sinks], docs/rolling-context.md):
 * when the token after the next would not fit, the engine drops `discard`
 * positions after the first `sinks` and moves the rest down.  A build that
 * stops at the context's end has none (tllm_model_info.context_roll is NULL). */
typedef struct {
    uint32_t sinks;   /* the first positions, always kept (attention sinks) */
    uint32_t discard; /* positions dropped per shift, the oldest after the sinks */
    /* Every layer's KV rows sinks + discard .. sinks + discard + n_rows - 1
     * move to rows sinks .., each key turned back by discard positions
     * (tllm_kv_shift_i8 / tllm_kv_shift_kv4 / tllm_kv_shift_k8v4). */
    void (*shift)(int32_t n_rows);
} tllm_context_roll;

typedef struct {
    uint32_t vocab_size;
    uint32_t max_seq;
    uint32_t n_eos;
    const int32_t *eos_ids; /* n_eos ids, any number (a model may have several) */
    uint32_t greedy_only; /* --sampler greedy: requests must have temperature 0 */
    uint32_t top_k;       /* --sampler topk:K: K (sampling within the K largest logits); 0 otherwise */
    uint32_t prefill_batch; /* prompt tokens tllm_model_prefill takes per call (1..4, codegen/lower/prefill.py) */
    const tllm_speculation *speculation; /* the verification pass; NULL: plain decoding */
    const tllm_context_roll *context_roll; /* the rolling context; NULL: stop at max_seq */
} tllm_model_info;

extern const tllm_model_info tllm_model;

/* Runs one decode step for `token` at `pos` (writing the KV cache at pos);
 * returns the logits buffer.  need_logits 0 skips the head (the final norm
 * and the classifier, with a weight stream the head's chunks too) and
 * returns NULL: the engine passes 0 for every prompt token but the last,
 * whose logits nobody reads. */
float *tllm_model_step(int32_t token, int32_t pos, int need_logits);
/* Runs n prompt tokens (1 <= n <= tllm_model.prefill_batch) at positions
 * pos .. pos + n - 1 through the layers together: each weight is read once
 * for the n (batched prefill). The KV cache ends as n tllm_model_step calls
 * leave it, bit for bit; need_logits runs the head for the last of them
 * only and returns as tllm_model_step does. A build with prefill_batch 1
 * runs tllm_model_step per token. */
float *tllm_model_prefill(const uint16_t *tokens, int32_t pos, int32_t n, int need_logits);
/* Greedy-only builds (TLLM_GREEDY_ONLY): the step computes the classifier
 * in chunks and keeps only its argmax, returned here after a step with
 * need_logits; tllm_model_step then returns NULL. Full builds return -1. */
int32_t tllm_model_greedy_token(void);
/* Top-K builds (tllm_model.top_k > 0): the classifier filled this set in the
 * last step with need_logits (tllm_model_step returns NULL); NULL otherwise. */
tllm_topk *tllm_model_topk(void);

/* Planned buffers the runtime needs. */
tllm_gen_state *tllm_model_state(void);
uint16_t *tllm_model_tokens(void);      /* [max_seq] */
uint16_t *tllm_model_sample_idx(void);  /* [vocab] sampler scratch */
uint8_t *tllm_model_request_buffer(void); /* a UART request lands here */
uint32_t tllm_model_request_capacity(void);

/* Arena guard words written at start and checked after generation. */
void tllm_model_canary_arm(void);
int tllm_model_canary_ok(void);

/* Region i's canary: 1 intact, 0 broken, -1 no such region; *name = its name. */
int tllm_model_region_canary_ok(uint32_t i, const char **name);

/* The stack the plan reserved (TLLM_STACK_BYTES). */
uint32_t tllm_model_stack_bytes(void);

/* 0 when the weights blob header matches this build. */
int tllm_weights_check(const char **why);

/* The bytes token `id` stands for (UTF-8 fragments; may be empty). */
const uint8_t *tllm_vocab_bytes(int32_t id, uint32_t *len);

#endif
