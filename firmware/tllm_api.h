/* tinyllm-gen's C API: run a generated model from your own firmware.
 *
 * Your main(), HAL, RTOS and build stay yours; link the model's CMake target
 * (tinyllm_add_model / tinyllm_generate_model in cmake/TinyLLM.cmake) and
 * call, from one thread:
 *
 *     static int on_token(const tllm_token *t, void *user) {
 *         my_uart_write(t->text, t->text_len);   // the token's bytes (UTF-8 fragment)
 *         return 0;                              // non-zero stops the generation
 *     }
 *
 *     tllm_status s = tllm_init(NULL);             // or a tllm_config with a clock
 *     if (s != TLLM_OK) my_log(tllm_status_message(s), tllm_error_detail());
 *     tllm_gen_request rq = { .prompt_ids = ids, .n_prompt = n, .max_new_tokens = 64,
 *                             .temperature = 0.8f, .top_p = 0.9f, .seed = 42 };
 *     tllm_result res;
 *     s = tllm_generate(&rq, on_token, NULL, &res); // res.stop_reason, res.n_generated, ...
 *
 * examples/own-firmware/main.c is a complete one.
 *
 * Prompt ids come from the model's tokenizer on the host (`tinyllm-gen
 * reference MODEL --prompt "..." --json` prints them as prompt_ids); the
 * tokens are the ones `tinyllm-gen reference` and `tinyllm-gen run` give for
 * the same ids and options, bit for bit, provided the runtime and the model
 * were compiled under the numerics contract (tinyllm::numerics; see
 * tllm_numerics.h for what the C enforces on its own).
 *
 * Memory: nothing is allocated.  The model's buffers (KV cache, activations,
 * token ids, generation state) live in its planned arena, a static array in
 * section ".tllm_arena" (".tllm_arena.<region>" on multi-region boards):
 * your linker script must place it in RAM, and your startup code should zero
 * it like .bss.  The weights blob is read at the board's weights address
 * (external storage: flash OUT/weights.bin there) or linked in (host).
 *
 * Not reentrant: one generation at a time (the arena is the model's only
 * state).  The console firmware of `tinyllm-gen build` (tllm_main.c) is one
 * user of this API. */
#ifndef TLLM_API_H
#define TLLM_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TLLM_API_VERSION 3 /* 2: tllm_model_desc.top_k; 3: tllm_continue, tllm_history_held */

/* Every function returns TLLM_OK or one of these (tllm_status_message()
 * gives a one-line text for each). */
typedef enum {
    TLLM_OK = 0,
    TLLM_ERR_ARGUMENT = -1,         /* a NULL request/result or prompt_ids pointer */
    TLLM_ERR_NOT_READY = -2,        /* tllm_generate before a successful tllm_init */
    TLLM_ERR_WEIGHTS = -3,          /* tllm_init: the weights blob is missing, stale or corrupt (tllm_error_detail) */
    TLLM_ERR_EMPTY_PROMPT = -4,     /* n_prompt == 0 (the model needs at least BOS) */
    TLLM_ERR_PROMPT_TOO_LONG = -5,  /* n_prompt >= the context (tllm_info()->max_seq) */
    TLLM_ERR_TOKEN_ID = -6,         /* a prompt id >= the vocabulary size */
    TLLM_ERR_SAMPLING = -7,         /* temperature < 0 or NaN, top_p outside (0, 1] */
    TLLM_ERR_GREEDY_ONLY = -8,      /* temperature > 0 on a model compiled with --sampler greedy */
    TLLM_ERR_CANARY = -9,           /* after the generation: an arena guard word was overwritten
                                       (memory corruption; the result is filled in, distrust it) */
    TLLM_ERR_HISTORY = -10,         /* tllm_continue: the history named is not the one the engine holds */
    TLLM_ERR_CONTEXT_FULL = -11     /* tllm_continue: the history and the new ids do not fit the context */
} tllm_status;

/* Why a generation stopped (tllm_result.stop_reason). */
typedef enum {
    TLLM_STOP_EOS = 1,        /* the model emitted an end-of-sequence token (it is delivered) */
    TLLM_STOP_MAX_TOKENS = 2, /* max_new_tokens generated */
    TLLM_STOP_CONTEXT = 3,    /* the context (max_seq positions) is full */
    TLLM_STOP_CALLBACK = 4    /* the token callback returned non-zero */
} tllm_stop_reason;

/* One generation request. */
typedef struct {
    const uint16_t *prompt_ids; /* n_prompt token ids, usually starting with BOS */
    uint32_t n_prompt;          /* 1 .. max_seq - 1 */
    uint32_t max_new_tokens;    /* 0 generates nothing */
    float temperature;          /* 0: greedy (argmax); > 0: sample */
    float top_p;                /* in (0, 1]; 1 samples the whole distribution */
    uint64_t seed;              /* xorshift64* seed (sampling only) */
} tllm_gen_request;

/* A generated token, as the callback sees it (valid during the call only). */
typedef struct {
    uint32_t index;       /* 0 for the first generated token */
    int32_t id;
    const uint8_t *text;  /* the token's bytes from the vocabulary; may be empty */
    uint32_t text_len;
    uint64_t cost;        /* clock units (tllm_config.clock) since the previous token was
                             delivered, or since the prompt was processed; 0 without a clock */
    uint32_t pass;        /* the pass over the weights that produced it (0: the prompt's last) */
    uint32_t pass_tokens; /* how many tokens that pass produced: 1, or with speculative decoding
                             (compile --speculate) the accepted guesses plus the model's own */
    uint32_t pass_positions; /* positions that pass ran through the weights: 1, or the guesses it
                                verified plus the last token */
} tllm_token;

/* Called once per generated token; return 0 to go on, non-zero to stop
 * (TLLM_STOP_CALLBACK).  Time spent in it is not counted in the next cost. */
typedef int (*tllm_token_callback)(const tllm_token *token, void *user);

typedef struct {
    uint32_t stop_reason;       /* tllm_stop_reason */
    uint32_t n_prompt;
    uint32_t n_generated;
    uint64_t prefill_cost;      /* clock units spent on the prompt (one model step per prompt
                                   token; only the last one runs the classifier) */
    const uint16_t *tokens;     /* this request's ids then the generated ids (n_tokens of them), in
                                   the model's arena: valid until the next tllm_generate or
                                   tllm_continue */
    uint32_t passes;            /* passes over the weights that produced the generated tokens
                                   (n_generated / passes: tokens per pass, 1 without speculation) */
    uint32_t shifts;            /* context shifts (a rolling-context build, 0 otherwise) */
    uint32_t n_tokens;          /* ids at tokens: n_prompt + n_generated; after a shift the whole
                                   buffer from its start instead (the sinks and the window the
                                   model still sees) */
} tllm_result;

struct tllm_draft_model; /* tllm_draft.h */

typedef struct {
    /* Optional monotonic counter (cycles, instructions, microseconds) for
     * tllm_token.cost and tllm_result.prefill_cost; NULL: costs are 0.  The
     * engine reads it after every pass over the weights, so a counter that
     * extends a narrower hardware register at each read stays right while
     * one pass takes less than that register's wrap. */
    uint64_t (*clock)(void);
    /* Optional draft model for a target compiled with --speculate (tllm_draft.h):
     * it drafts the guesses instead of the prompt lookup, each drawn by the
     * request's sampler from its output (a draft compiled with the target's
     * --sampler); a greedy-only draft drafts greedy requests only (a request
     * with a temperature is refused, TLLM_ERR_SAMPLING); NULL: lookup. */
    const struct tllm_draft_model *draft;
} tllm_config;

/* What the compiled model is. */
typedef struct {
    uint32_t vocab_size;
    uint32_t max_seq;      /* context: prompt + generated tokens must fit */
    uint32_t greedy_only;  /* compiled with --sampler greedy: temperature must be 0 */
    uint32_t abi_version;  /* TLLM_ABI_VERSION of runtime and model */
    uint32_t top_k;        /* compiled with --sampler topk:K: K, and a temperature samples within the
                              K largest logits (top_p within them); 0: the whole vocabulary */
} tllm_model_desc;

/* Arms the arena guard words and checks the weights blob (magic, size,
 * checksum).  config may be NULL.  Call again to re-arm after TLLM_ERR_CANARY
 * once the cause is fixed. */
tllm_status tllm_init(const tllm_config *config);

/* Checks a request without running it (tllm_generate checks it too), in
 * this order: prompt length, prompt ids, sampling options, greedy-only. */
tllm_status tllm_check_request(const tllm_gen_request *request);

/* Runs one generation: the prompt, then up to max_new_tokens tokens, each
 * passed to callback (may be NULL).  result may be NULL.  On TLLM_OK and
 * TLLM_ERR_CANARY the result is filled in. */
tllm_status tllm_generate(const tllm_gen_request *request, tllm_token_callback callback, void *user,
                          tllm_result *result);

/* Multi-turn KV reuse.  After a generation that ran (max_new_tokens >= 1)
 * the engine holds the conversation: every token since the last fresh
 * tllm_generate, in order (each request's ids, each generated token).  All
 * but the last are in the KV cache; the last, the final generated token, was
 * sampled but not yet run through the model, so a continued generation's
 * prefill starts with it, at the position after the cache's.  A request
 * that runs nothing (max_new_tokens 0), every tllm_generate (refused or
 * not: it starts a new one) and tllm_init end the conversation (n_tokens 0);
 * a refused tllm_continue keeps it.  With
 * speculative decoding only the tokens a pass delivered enter it (a
 * rejected guess never does). */
typedef struct {
    uint32_t n_tokens; /* tokens in the conversation (0: none held) */
    uint32_t crc;      /* CRC32 (zlib's) of their ids as little-endian uint16, in order */
} tllm_history;

/* The conversation the engine holds now. */
const tllm_history *tllm_history_held(void);

/* Runs the next turn of the held conversation: request->prompt_ids are the
 * new ids only (n_prompt may be 0), history names the conversation the
 * caller believes is held; TLLM_ERR_HISTORY when it is not exactly that
 * (count and CRC), TLLM_ERR_CONTEXT_FULL when held + new ids would reach
 * max_seq.  Either refusal leaves the held conversation as it was.  The
 * tokens are those of a fresh tllm_generate on the whole conversation, bit
 * for bit; the prefill runs only the last held token and the new ids
 * (result->prefill_cost), and result->tokens points at the new ids. */
tllm_status tllm_continue(const tllm_gen_request *request, const tllm_history *history,
                          tllm_token_callback callback, void *user, tllm_result *result);

/* Checks a continue without running it (tllm_continue checks it too), in
 * this order: the history, the context, prompt ids, sampling options,
 * greedy-only. */
tllm_status tllm_check_continue(const tllm_gen_request *request, const tllm_history *history);

/* The model's vocabulary size, context and options. */
const tllm_model_desc *tllm_info(void);

/* The bytes token `id` stands for; *len = 0 and "" for an unknown id. */
const uint8_t *tllm_token_text(int32_t id, uint32_t *len);

/* One line of text per status (never NULL). */
const char *tllm_status_message(tllm_status status);

/* More about the last failure of tllm_init (which check of the weights
 * blob failed), or "" when there is nothing more to say. */
const char *tllm_error_detail(void);

#ifdef __cplusplus
}
#endif

#endif
