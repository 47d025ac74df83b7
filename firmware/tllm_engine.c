/* The generation engine behind tllm_api.h: one state machine, used by the
 * console firmware (tllm_main.c) and by a user's own main alike.
 *
 *   IDLE -> PREFILL (tllm_model_prefill, up to prefill_batch prompt tokens
 *                    per call; only the last token runs the head, since
 *                    only its logits are sampled)
 *        -> SAMPLE -> EMIT -> DECODE -> SAMPLE ... -> DONE
 *
 * With speculative decoding (tllm_model.speculation, compile --speculate)
 * each pass after EMIT drafts first:
 *
 *        EMIT -> DRAFT (prompt-lookup guesses, tllm_draft.h, into the token
 *                       buffer after the last token; with tllm_config.draft
 *                       a draft model's k steps instead, each guess drawn by
 *                       the request's sampler)
 *             -> VERIFY (the last token and the guesses through every
 *                        weight together, then per position the sampler's
 *                        token given its guess: the accepted guesses and the
 *                        model's own next token)
 *             -> EMIT (each of the pass's tokens in turn) -> DRAFT ...
 *        DRAFT -> DECODE when there is no guess (a plain step).
 *
 * The KV entries of rejected positions are overwritten by the next pass,
 * which starts at the first position after the pass's last token.  The rule
 * and the order of the sampler's coins are codegen/reference/speculative.py's.
 *
 * Multi-turn KV reuse (tllm_continue): the engine keeps the conversation
 * it holds (tllm_history: its token count, a running CRC32 of its ids, the
 * position of its last token) from one generation to the next.  A token
 * enters the history when it enters the token buffer for good: a request's
 * ids as the request starts, a generated token as it is emitted (with
 * speculative decoding a rejected guess is never emitted, so never enters).
 * The KV cache then holds every history token but the last (sampled, not
 * yet run); a continued prefill starts with that one at held_pos.  The CRC
 * runs over tokens, not cache slots: a cache that drops or shifts entries
 * keeps it valid, and only held_pos has to follow the cache.
 *
 * With a rolling context (tllm_model.context_roll, compile --context-policy
 * roll) EMIT never stops at the context's end: when the token just emitted
 * sits at the last position, context_shift drops the oldest positions after
 * the sinks first.  A verification pass never crosses the end (guess_room),
 * so plain and speculative runs shift at the same tokens.
 *
 * The state lives in the planned arena (tllm_gen_state), so a generation
 * allocates nothing.  No board function is called here: the clock comes in
 * through tllm_config, the text goes out through the token callback. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tllm_api.h"
#include "tllm_crc32.h"
#include "tllm_draft.h"
#include "tllm_model_api.h"
#include "tllm_sampler.h"

static uint64_t (*engine_clock)(void);
static const tllm_draft_model *engine_draft; /* tllm_config.draft: NULL drafts by prompt lookup */
static uint32_t draft_cached;                /* positions the draft model's KV cache holds (tllm_model_draft) */
static tllm_draft_qs draft_qs;               /* the pending pass's q at each guess (a sampled request) */
static int engine_ready;
static const char *engine_detail; /* NULL: nothing to add */

static uint64_t now(void) { return engine_clock ? engine_clock() : 0u; }

/* The conversation held between generations (tllm_api.h): not in the
 * generation state, which every generation clears. */
static tllm_history held;  /* crc: the running (non-inverted) register while n_tokens > 0 */
static uint32_t held_pos;   /* the cache position of the last held token (the next prefill's first) */
static tllm_history held_out; /* what tllm_history_held hands out (the CRC inverted) */

static void history_add(const uint16_t *ids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t le[2] = {(uint8_t)(ids[i] & 0xFFu), (uint8_t)(ids[i] >> 8)};
        held.crc = tllm_crc_update(held.crc, le, 2);
    }
    held.n_tokens += n;
}

const tllm_history *tllm_history_held(void) {
    held_out.n_tokens = held.n_tokens;
    held_out.crc = held.n_tokens ? ~held.crc : 0u;
    return &held_out;
}

/* Phase marker for the instruction-count plugin (bench/tllm_icount.c): an
 * out-of-line empty function whose address the plugin watches. Called before
 * and after every model step and after every sampling, a few instructions
 * each. */
__attribute__((noinline)) void tllm_mark(void);
__attribute__((noinline)) void tllm_mark(void) { __asm__ volatile(""); }

static int is_eos(int32_t tok) {
    for (uint32_t i = 0; i < tllm_model.n_eos; i++)
        if (tllm_model.eos_ids[i] == tok) return 1;
    return 0;
}

tllm_status tllm_init(const tllm_config *config) {
    engine_clock = config ? config->clock : 0;
    engine_draft = config ? config->draft : 0;
    draft_cached = 0;
    engine_ready = 0;
    engine_detail = 0;
    held.n_tokens = 0; /* a re-init (after a broken canary) trusts no cache */
    if (engine_draft && (engine_detail = tllm_draft_model_problem(engine_draft)) != 0) return TLLM_ERR_ARGUMENT;
    tllm_model_canary_arm();
    tllm_draft_model_arm(engine_draft);
    if (tllm_weights_check(&engine_detail) != 0) return TLLM_ERR_WEIGHTS;
    if (engine_draft && engine_draft->weights_check && engine_draft->weights_check(&engine_detail) != 0)
        return TLLM_ERR_WEIGHTS; /* the draft's blob: flashed with the target's, checked the same way */
    engine_ready = 1;
    return TLLM_OK;
}

const char *tllm_error_detail(void) { return engine_detail ? engine_detail : ""; }

const tllm_model_desc *tllm_info(void) {
    static tllm_model_desc desc;
    desc.vocab_size = tllm_model.vocab_size;
    desc.max_seq = tllm_model.max_seq;
    desc.greedy_only = tllm_model.greedy_only;
    desc.top_k = tllm_model.top_k;
    desc.abi_version = TLLM_ABI_VERSION;
    return &desc;
}

const uint8_t *tllm_token_text(int32_t id, uint32_t *len) {
    static const uint8_t empty[1] = {0};
    uint32_t n = 0;
    const uint8_t *b = (id >= 0 && (uint32_t)id < tllm_model.vocab_size) ? tllm_vocab_bytes(id, &n) : empty;
    if (len) *len = n;
    return b;
}

const char *tllm_status_message(tllm_status status) {
    switch (status) {
    case TLLM_OK: return "ok";
    case TLLM_ERR_ARGUMENT: return "NULL request, result or prompt_ids";
    case TLLM_ERR_NOT_READY: return "tllm_init has not succeeded";
    case TLLM_ERR_WEIGHTS: return "weights blob missing, stale or corrupt";
    case TLLM_ERR_EMPTY_PROMPT: return "empty prompt";
    case TLLM_ERR_PROMPT_TOO_LONG: return "prompt does not fit the context";
    case TLLM_ERR_TOKEN_ID: return "prompt id out of vocabulary";
    case TLLM_ERR_SAMPLING: return "bad sampling options";
    case TLLM_ERR_GREEDY_ONLY:
        return "this firmware decodes greedily only (compiled with --sampler greedy): send temperature 0";
    case TLLM_ERR_CANARY: return "arena guard word overwritten";
    case TLLM_ERR_HISTORY: return "continue refused: the engine holds another conversation";
    case TLLM_ERR_CONTEXT_FULL: return "continue refused: the conversation and the new ids do not fit the context";
    }
    return "unknown status";
}

/* The checks after the prompt's length: ids, sampling options, greedy-only. */
static tllm_status check_ids_and_options(const tllm_gen_request *rq) {
    engine_detail = 0; /* an earlier request's refusal says nothing of this one */
    if (rq->n_prompt && !rq->prompt_ids) return TLLM_ERR_ARGUMENT;
    for (uint32_t i = 0; i < rq->n_prompt; i++)
        if (rq->prompt_ids[i] >= tllm_model.vocab_size) return TLLM_ERR_TOKEN_ID;
    if (!(rq->temperature >= 0.0f) || !(rq->top_p > 0.0f && rq->top_p <= 1.0f)) return TLLM_ERR_SAMPLING;
    if (tllm_model.greedy_only && rq->temperature != 0.0f) return TLLM_ERR_GREEDY_ONLY;
    if (engine_draft && rq->temperature != 0.0f && !tllm_draft_model_samples(engine_draft)) {
        engine_detail = "the draft model is a greedy-only build, which drafts greedy requests only: send "
                        "temperature 0, or compile the draft with the target's --sampler";
        return TLLM_ERR_SAMPLING;
    }
    return TLLM_OK;
}

tllm_status tllm_check_request(const tllm_gen_request *rq) {
    if (!rq) return TLLM_ERR_ARGUMENT;
    if (rq->n_prompt == 0) return TLLM_ERR_EMPTY_PROMPT;
    if (rq->n_prompt >= tllm_model.max_seq) return TLLM_ERR_PROMPT_TOO_LONG;
    return check_ids_and_options(rq);
}

/* A continue: the history first (a host out of step hears so whatever else
 * is wrong), then the context, then what tllm_check_request checks. */
tllm_status tllm_check_continue(const tllm_gen_request *rq, const tllm_history *h) {
    if (!rq || !h) return TLLM_ERR_ARGUMENT;
    const tllm_history *mine = tllm_history_held();
    if (mine->n_tokens == 0 || h->n_tokens != mine->n_tokens || h->crc != mine->crc) return TLLM_ERR_HISTORY;
    /* A rolling build that shifted holds more history than cache (held_pos + 1 < n_tokens): its
     * conversation no longer fits, so it is refused as full and the host starts afresh. */
    if (held_pos + 1u != mine->n_tokens || rq->n_prompt >= tllm_model.max_seq - mine->n_tokens)
        return TLLM_ERR_CONTEXT_FULL;
    return check_ids_and_options(rq);
}

/* How many guesses the next pass may verify: the build's k, less where the
 * pass would produce a token past max_new_tokens or past the context's end
 * (the pass yields at most its guesses plus one). */
static uint32_t guess_room(const tllm_gen_state *st, uint32_t k) {
    const uint32_t left = st->max_new - st->n_generated - 1u;  /* EMIT stopped at max_new */
    const uint32_t room = tllm_model.max_seq - 2u - st->pos;   /* EMIT stopped at pos + 1 == max_seq */
    if (k > left) k = left;
    return k < room ? k : room;
}

/* The cache is full (the token just emitted sits at max_seq - 1): drop
 * roll->discard positions after the sinks, move the rest of the KV rows and
 * the token buffer down (the draft reads the buffer as the model's
 * context), and step back.  The rule is codegen/context.py's. */
static void context_shift(tllm_gen_state *st, uint16_t *tokens, const tllm_context_roll *roll) {
    const uint32_t from = roll->sinks + roll->discard;
    roll->shift((int32_t)(st->pos - from)); /* rows from .. pos - 1: pos's token has not run yet */
    memmove(tokens + roll->sinks, tokens + from, (st->pos + 1u - from) * sizeof tokens[0]);
    st->pos -= roll->discard;
    if (engine_draft) tllm_draft_model_shift(engine_draft, &draft_cached); /* its cache as the target's */
}

/* The token at verified position i given a draft model's sampled guess g
 * there: kept by the test on q(g) and q's total from the proposal, else
 * drawn from the residual of the draft's whole q (tllm_model_draft_q: a
 * top-K draft's kept candidates, or one more draft step, only after a
 * rejection). */
static int32_t drafted_token(tllm_gen_state *st, const tllm_speculation *spec, float *logits, const uint16_t *tokens,
                             uint32_t i, int32_t g) {
    const uint32_t vocab = tllm_model.vocab_size;
    const float q_g = draft_qs.at_guess[i], q_total = draft_qs.total[i];
    tllm_dist p, q;
    if (logits ? tllm_guess_kept(&st->sampler, logits + i * vocab, (int32_t)vocab, tllm_model_sample_idx(), g, q_g,
                                 q_total, &p)
               : tllm_topk_guess_kept(&st->sampler, spec->topk((int32_t)i), g, q_g, q_total, &p))
        return g;
    tllm_model_draft_q(engine_draft, tokens, st->pos, i, &st->sampler, &draft_qs, &q);
    return tllm_guess_residual(&st->sampler, &p, g, &q);
}

/* The token at verified position i given the guess g there (g < 0: none):
 * the sampler's (tllm_sample_guess) from position i's logits, from its
 * top-K set, or a greedy-only build's argmax; a draft model's sampled guess
 * under its own q (drafted_token).  It is g exactly when the guess is
 * accepted. */
static int32_t verified_token(tllm_gen_state *st, const tllm_speculation *spec, float *logits, const uint16_t *tokens,
                              uint32_t i, int32_t g) {
    const uint32_t vocab = tllm_model.vocab_size;
    if (g >= 0 && engine_draft && st->sampler.temperature != 0.0f) return drafted_token(st, spec, logits, tokens, i, g);
    if (logits) return tllm_sample_guess(&st->sampler, logits + i * vocab, (int32_t)vocab, tllm_model_sample_idx(), g);
    if (tllm_model.top_k) return tllm_sample_topk_guess(&st->sampler, spec->topk((int32_t)i), g);
    return spec->token((int32_t)i);
}

/* After a verification pass over the last token and n_guess guesses at
 * tokens[pos + 1 ..]: keeps the accepted guesses, writes the model's own
 * token after them, and returns how many tokens the pass produced. */
static uint32_t accept_pass(tllm_gen_state *st, const tllm_speculation *spec, float *logits, uint16_t *tokens,
                            uint32_t n_guess) {
    for (uint32_t j = 0;; j++) {
        const int32_t g = j < n_guess ? (int32_t)tokens[st->pos + 1u + j] : -1;
        const int32_t t = verified_token(st, spec, logits, tokens, j, g);
        if (t != g) {
            tokens[st->pos + 1u + j] = (uint16_t)t;
            return j + 1u;
        }
    }
}

/* One generation: the prefill runs from cache position pos0 (0 for a fresh
 * conversation; a continue's is the last held token's) through the request's
 * ids, which go into the token buffer at `first` (0, or pos0 + 1: the buffer
 * is indexed by cache position). */
static tllm_status run(const tllm_gen_request *req, uint32_t first, uint32_t pos0, tllm_token_callback callback,
                       void *user, tllm_result *result) {
    const tllm_gen_request rq = *req;
    tllm_gen_state *st = tllm_model_state();
    uint16_t *tokens = tllm_model_tokens();
    memset(st, 0, sizeof *st);
    st->phase = TLLM_IDLE;
    st->pos = pos0;
    if (first == 0u) draft_cached = 0u; /* a fresh conversation: the draft model's cache holds nothing of it */
    st->n_prompt = first + rq.n_prompt; /* the prefill's end position */
    st->max_new = rq.max_new_tokens;
    tllm_sampler_init(&st->sampler, rq.temperature, rq.top_p, rq.seed);
    /* The console hands over ids in its request buffer, never in the token buffer. */
    if (rq.n_prompt && rq.prompt_ids != tokens + first)
        memmove(tokens + first, rq.prompt_ids, rq.n_prompt * sizeof tokens[0]);
    history_add(tokens + first, rq.n_prompt);

    float *logits = 0;
    uint64_t t_token = 0;
    int stop_asked = 0;
    const tllm_speculation *spec = tllm_model.speculation;
    uint32_t n_guess = 0;     /* guesses the pending verification pass checks */
    uint32_t pass_tokens = 0; /* tokens the current pass produced */
    uint32_t pass_positions = 0; /* positions it ran through the weights */
    uint32_t queued = 0;      /* of them, still to emit after the current one */
    const tllm_context_roll *roll = tllm_model.context_roll;
    uint32_t shifts = 0;
    st->t_start = now();
    st->t_prefill = st->t_start; /* max_new_tokens 0: no prefill ran, prefill_cost 0 (it used to wrap) */
    st->phase = st->max_new ? TLLM_PREFILL : TLLM_DONE;
    st->stop_reason = st->max_new ? 0u : (uint32_t)TLLM_STOP_MAX_TOKENS;
    while (st->phase != TLLM_DONE) {
        switch (st->phase) {
        case TLLM_PREFILL: {
            /* prefill_batch tokens per call: the weights are read once for all of them */
            const uint32_t left = st->n_prompt - st->pos;
            const uint32_t n = left < tllm_model.prefill_batch ? left : tllm_model.prefill_batch;
            tllm_mark();
            logits = tllm_model_prefill(tokens + st->pos, (int32_t)st->pos, (int32_t)n, st->pos + n == st->n_prompt);
            tllm_mark();
            st->pos += n;
            /* Read after every pass, not only after the last: a board's clock may
             * be a 32-bit counter extended at each read (the H750's DWT_CYCCNT
             * wraps every 2^32 cycles, 8.9 s at 480 MHz), so no more than one
             * pass may lie between two reads. */
            const uint64_t t = now();
            if (st->pos == st->n_prompt) {
                st->t_prefill = t;
                t_token = t;
                st->phase = TLLM_SAMPLE;
            }
            break;
        }
        case TLLM_SAMPLE:
            if (logits)
                st->token = tllm_sample(&st->sampler, logits, (int32_t)tllm_model.vocab_size, tllm_model_sample_idx());
            else if (tllm_model.top_k)
                st->token = tllm_sample_topk(&st->sampler, tllm_model_topk()); /* the step kept the K best */
            else
                st->token = tllm_model_greedy_token(); /* greedy-only: the step kept the argmax */
            tllm_mark();
            tokens[st->pos] = (uint16_t)st->token;
            st->n_generated++;
            st->passes++;
            pass_tokens = 1;
            pass_positions = 1;
            st->phase = TLLM_EMIT;
            break;
        case TLLM_EMIT: {
            const uint64_t t = now();
            history_add(tokens + st->pos, 1u); /* delivered: the conversation's newest token */
            if (callback) {
                tllm_token tok;
                tok.index = st->n_generated - 1;
                tok.id = st->token;
                tok.text = tllm_vocab_bytes(st->token, &tok.text_len);
                tok.cost = t - t_token;
                tok.pass = st->passes - 1u;
                tok.pass_tokens = pass_tokens;
                tok.pass_positions = pass_positions;
                stop_asked = callback(&tok, user) != 0;
            }
            if (is_eos(st->token)) st->stop_reason = TLLM_STOP_EOS;
            else if (st->n_generated >= st->max_new) st->stop_reason = TLLM_STOP_MAX_TOKENS;
            else if (st->pos + 1 >= tllm_model.max_seq && !roll) st->stop_reason = TLLM_STOP_CONTEXT;
            else if (stop_asked) st->stop_reason = TLLM_STOP_CALLBACK;
            t_token = now(); /* the callback's time is not the model's cost */
            if (st->stop_reason) {
                st->phase = TLLM_DONE;
            } else if (queued) { /* the pass's next token: already in the buffer */
                queued--;
                st->pos++;
                st->token = tokens[st->pos];
                st->n_generated++;
            } else {
                if (roll && st->pos + 1 >= tllm_model.max_seq) { /* no pass ends past max_seq - 1: queued is 0 */
                    context_shift(st, tokens, roll);
                    shifts++;
                }
                st->phase = spec ? TLLM_DRAFT : TLLM_DECODE;
            }
            break;
        }
        case TLLM_DRAFT: {
            const uint32_t k = guess_room(st, spec->k);
            if (!k) n_guess = 0u;
            else if (engine_draft)
                n_guess = tllm_model_draft(engine_draft, &draft_cached, tokens, st->pos, k, &st->sampler, &draft_qs);
            else n_guess = (uint32_t)tllm_lookup_draft(tokens, (int32_t)st->pos + 1, (int32_t)k, tokens + st->pos + 1);
            st->phase = n_guess ? TLLM_VERIFY : TLLM_DECODE; /* no guess: a plain step */
            break;
        }
        case TLLM_VERIFY:
            tllm_mark();
            logits = spec->verify(tokens + st->pos, (int32_t)st->pos, (int32_t)n_guess + 1);
            tllm_mark();
            pass_tokens = accept_pass(st, spec, logits, tokens, n_guess);
            tllm_mark();
            st->passes++;
            pass_positions = n_guess + 1u;
            queued = pass_tokens - 1u;
            st->pos++;
            st->token = tokens[st->pos];
            st->n_generated++;
            st->phase = TLLM_EMIT;
            break;
        case TLLM_DECODE:
            tllm_mark();
            logits = tllm_model_step(st->token, (int32_t)st->pos, 1);
            tllm_mark();
            st->pos++;
            st->phase = TLLM_SAMPLE;
            break;
        default:
            st->phase = TLLM_DONE;
            break;
        }
    }
    held_pos = st->pos; /* the last delivered token's position: not run yet */
    if (st->n_generated == 0) held.n_tokens = 0; /* nothing ran: the new ids are not in the cache */
    if (result) {
        result->stop_reason = st->stop_reason;
        result->n_prompt = rq.n_prompt;
        result->n_generated = st->n_generated;
        result->prefill_cost = st->t_prefill - st->t_start;
        result->passes = st->passes;
        result->shifts = shifts;
        if (shifts) { /* the buffer was moved: what the model still sees, from its start */
            result->tokens = tokens;
            result->n_tokens = st->pos + 1u;
        } else { /* this request's ids and tokens */
            result->tokens = tokens + first;
            result->n_tokens = rq.n_prompt + st->n_generated;
        }
    }
    return tllm_model_canary_ok() && tllm_draft_model_intact(engine_draft) ? TLLM_OK : TLLM_ERR_CANARY;
}

tllm_status tllm_generate(const tllm_gen_request *req, tllm_token_callback callback, void *user,
                          tllm_result *result) {
    if (!engine_ready) return TLLM_ERR_NOT_READY;
    held.n_tokens = 0; /* a fresh conversation, or none when refused */
    held.crc = ~0u;
    const tllm_status ok = tllm_check_request(req);
    if (ok != TLLM_OK) return ok;
    return run(req, 0u, 0u, callback, user, result);
}

tllm_status tllm_continue(const tllm_gen_request *req, const tllm_history *history, tllm_token_callback callback,
                          void *user, tllm_result *result) {
    if (!engine_ready) return TLLM_ERR_NOT_READY;
    const tllm_status ok = tllm_check_continue(req, history);
    if (ok != TLLM_OK) return ok;
    return run(req, held_pos + 1u, held_pos, callback, user, result);
}
