/* The console firmware: the request protocol over memory or the UART, and
 * the console lines, around the generation engine (tllm_engine.c, the same
 * tllm_api.h a user's own main calls).
 *
 * Console lines (parsed by codegen/protocol.py; the text itself is printed by
 * the board from the vocabulary in flash):
 *   @TLLM begin n_prompt=<n> max_new=<n> max_seq=<n> [continue=<held tokens>]
 *   @TLLM pass <index> tokens=<n> positions=<p>   (speculative builds: before a pass's first token,
 *     how many tokens it produced, the last pass may deliver fewer, and how many positions it ran)
 *   @TLLM tok <index> <id> <instructions> "<escaped token text>"
 *   @TLLM end reason=<eos|max_tokens|context> n=<n> prefill_instructions=<n> passes=<n>[ shifts=<n>]
 *     history=<n> history_crc=<crc>   (shifts: a rolling context moved; history: the conversation the
 *     board now holds, what the next continue must name)
 *   @TLLM canary arena=<ok|BROKEN> stack=<ok|BROKEN> stack_peak=<n> stack_bytes=<n> regions=<name>:<ok|BROKEN>,...
 *     (arena: every region's guard words; stack: the deepest stack use left
 *      the 16 guard bytes at the stack limit painted)
 *   @TLLM text-begin / raw story text / @TLLM text-end
 * Requests come from memory (the board's request block, one generation) or,
 * when there is none, over the UART: "@TLLM ready max_request=<n>", the
 * request bytes, and after each generation "@TLLM done status=<n>".
 * A continue request (flags TLLM_REQUEST_CONTINUE: multi-turn KV reuse, over
 * the UART) carries only the new turn's ids and names the history it
 * extends; the board refuses one that names another (status 6) or that
 * would not fit the context (7), and keeps what it holds.
 * Exit status: 0 ok, 3 bad request, 4 weights blob mismatch, 5 canary broken,
 * 6 continue of another history, 7 continue past the context. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tllm_api.h"
#include "tllm_board.h"
#include "tllm_draft.h" /* tllm_draft_model: the console's draft model, if the tree has one */
#include "tllm_frame.h"
#include "tllm_model_api.h"
#include "tllm_request.h"

enum { EXIT_OK = TLLM_EXIT_OK, EXIT_BAD_REQUEST = TLLM_EXIT_BAD_REQUEST, EXIT_BAD_WEIGHTS = TLLM_EXIT_BAD_WEIGHTS,
       EXIT_CANARY = TLLM_EXIT_CANARY, EXIT_HISTORY = TLLM_EXIT_HISTORY,
       EXIT_CONTEXT_FULL = TLLM_EXIT_CONTEXT_FULL }; /* tllm_abi.h: stated once in codegen/abi.py */

static void puts_(const char *s) { tllm_console_write(s, strlen(s)); }

static void put_u64(uint64_t v) { tllm_console_put_u64(v); }

static void put_escaped(const uint8_t *s, uint32_t n) {
    static const char hex[] = "0123456789abcdef";
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t c = s[i];
        char e[4] = {'\\', 0, 0, 0};
        size_t len = 2;
        if (c == '\n') e[1] = 'n';
        else if (c == '"' || c == '\\') e[1] = (char)c;
        else if (c < 0x20 || c >= 0x7f) { e[1] = 'x'; e[2] = hex[c >> 4]; e[3] = hex[c & 15]; len = 4; }
        else { e[0] = (char)c; len = 1; }
        tllm_console_write(e, len);
    }
}

int tllm_request_parse(const uint8_t *buf, size_t len, tllm_request *out, const char **why) {
    uint32_t w[TLLM_REQUEST_HEADER_BYTES / 4u];
    if (!buf || len < TLLM_REQUEST_HEADER_BYTES) { *why = "no request"; return -1; }
    memcpy(w, buf, sizeof w);
    if (w[0] != TLLM_REQUEST_MAGIC) { *why = "bad request magic"; return -1; }
    if ((w[2] & 0xFFFFu) != TLLM_REQUEST_VERSION) { *why = "request version mismatch"; return -1; }
    /* (w[1] - header) / 2 >= n_prompt, never header + 2 * n_prompt: that can wrap */
    if (w[1] > len || w[1] < TLLM_REQUEST_HEADER_BYTES || (w[1] - TLLM_REQUEST_HEADER_BYTES) / 2u < w[3]) {
        *why = "truncated request";
        return -1;
    }
    if (tllm_request_crc(buf, w[1]) != w[9]) { *why = "request crc mismatch"; return -1; }
    out->n_prompt = w[3];
    out->max_new_tokens = w[4];
    memcpy(&out->temperature, &w[5], 4);
    memcpy(&out->top_p, &w[6], 4);
    out->seed = (uint64_t)w[7] | ((uint64_t)w[8] << 32);
    out->flags = w[2] >> 16;
    out->history_tokens = w[10];
    out->history_crc = w[11];
    if (!(out->flags & TLLM_REQUEST_CONTINUE) && (w[10] | w[11])) {
        *why = "history fields set without the continue flag";
        return -1;
    }
    out->ids = (const uint16_t *)(const void *)(buf + TLLM_REQUEST_HEADER_BYTES);
    return 0;
}

static const char *reason_name(uint32_t r) {
    return r == TLLM_STOP_EOS ? "eos" : r == TLLM_STOP_CONTEXT ? "context" : "max_tokens";
}

static int is_continue(const tllm_request *rq) { return (rq->flags & TLLM_REQUEST_CONTINUE) != 0; }

/* A wire request (tllm_request.h) as the engine's request: the ids stay in
 * the request buffer, and the engine copies them into its token buffer once
 * the request is accepted (a refused one leaves the held conversation). */
static tllm_gen_request to_gen_request(const tllm_request *rq, tllm_history *history) {
    tllm_gen_request g;
    g.prompt_ids = rq->ids;
    g.n_prompt = rq->n_prompt;
    g.max_new_tokens = rq->max_new_tokens;
    g.temperature = rq->temperature;
    g.top_p = rq->top_p;
    g.seed = rq->seed;
    history->n_tokens = rq->history_tokens;
    history->crc = rq->history_crc;
    return g;
}

/* A refused request's line: the engine's detail where it says more than the
 * status (a sampled request to a firmware whose draft model is greedy-only). */
static const char *refusal(tllm_status s) {
    return *tllm_error_detail() ? tllm_error_detail() : tllm_status_message(s);
}

/* The request checks done as a request arrives; the greedy-only refusal
 * comes later, from the generation itself (as the protocol always had it:
 * such a request still counts for its exit flag), and so do a continue's
 * history and context checks (statuses of their own). */
static int check_request(const tllm_request *rq, const char **why) {
    tllm_history h;
    const tllm_gen_request g = to_gen_request(rq, &h);
    /* a continue may bring no ids (its options are checked with its history) */
    const tllm_status s = is_continue(rq) && g.n_prompt == 0 ? TLLM_OK : tllm_check_request(&g);
    if (s == TLLM_OK || s == TLLM_ERR_GREEDY_ONLY) return 0;
    *why = refusal(s);
    return -1;
}

static void print_text(const uint16_t *tokens, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; i++) {
        uint32_t n;
        const uint8_t *b = tllm_vocab_bytes(tokens[i], &n);
        tllm_console_write((const char *)b, n);
    }
}

#ifdef TLLM_CONSOLE_DRAFT /* compile --speculate draft:MODEL: the tree's draft model (draft/tllm_draft_table.c) */
extern const tllm_draft_model tllm_console_draft;
#define CONSOLE_DRAFT (&tllm_console_draft)
#else
#define CONSOLE_DRAFT ((const tllm_draft_model *)0) /* the engine drafts by prompt lookup */
#endif

/* One line: arena guard words per region (the draft model's arenas as
 * "draft"), and the stack-limit canary. */
static int report_canaries(void) {
    const int draft = tllm_draft_model_intact(CONSOLE_DRAFT);
    const int arena = tllm_model_canary_ok() && draft;
    const size_t peak = tllm_board_stack_peak();
    const int stack = peak + 16u <= tllm_model_stack_bytes();
    puts_(arena ? "@TLLM canary arena=ok" : "@TLLM canary arena=BROKEN");
    puts_(stack ? " stack=ok stack_peak=" : " stack=BROKEN stack_peak=");
    put_u64(peak);
    puts_(" stack_bytes=");
    put_u64(tllm_model_stack_bytes());
    puts_(" regions=");
    const char *name;
    for (uint32_t i = 0; tllm_model_region_canary_ok(i, &name) >= 0; i++) {
        if (i) puts_(",");
        puts_(name);
        puts_(tllm_model_region_canary_ok(i, &name) ? ":ok" : ":BROKEN");
    }
#ifdef TLLM_CONSOLE_DRAFT
    puts_(draft ? ",draft:ok" : ",draft:BROKEN");
#endif
    puts_("\n");
    return arena && stack;
}

static int bad_request(const char *why) {
    puts_("@TLLM error request: ");
    puts_(why);
    puts_("\n");
    return EXIT_BAD_REQUEST;
}

static int print_token(const tllm_token *tok, void *user) {
    (void)user;
    static uint32_t next_pass; /* the first pass not announced yet */
    if (tok->index == 0) next_pass = 0; /* a new generation */
    if (tllm_model.speculation && tok->pass >= next_pass) {
        puts_("@TLLM pass ");
        put_u64(tok->pass);
        puts_(" tokens=");
        put_u64(tok->pass_tokens);
        puts_(" positions=");
        put_u64(tok->pass_positions);
        puts_("\n");
        next_pass = tok->pass + 1u;
    }
    puts_("@TLLM tok ");
    put_u64(tok->index);
    puts_(" ");
    put_u64((uint64_t)tok->id);
    puts_(" ");
    put_u64(tok->cost);
    puts_(" \"");
    put_escaped(tok->text, tok->text_len);
    puts_("\"\n");
    return 0;
}

static void put_hex32(uint32_t v) {
    static const char hex[] = "0123456789abcdef";
    char out[9];
    for (int i = 7; i >= 0; i--, v >>= 4) out[i] = hex[v & 15u];
    out[8] = 0;
    puts_(out);
}

/* A continue the engine refused: what the board holds against what the
 * request named, so a host out of step sees why in one line. */
static int refused_continue(tllm_status s, const tllm_request *req) {
    const tllm_history *mine = tllm_history_held();
    puts_("@TLLM error request: ");
    puts_(tllm_status_message(s));
    puts_(" (the board holds ");
    put_u64(mine->n_tokens);
    puts_(" tokens crc ");
    put_hex32(mine->crc);
    puts_(", the request names ");
    put_u64(req->history_tokens);
    puts_(" crc ");
    put_hex32(req->history_crc);
    puts_(" and ");
    put_u64(req->n_prompt);
    puts_(" new of a context of ");
    put_u64(tllm_model.max_seq);
    puts_(")\n");
    return s == TLLM_ERR_HISTORY ? EXIT_HISTORY : EXIT_CONTEXT_FULL;
}

/* Runs one generation; returns the exit status it earned. */
static int generate(const tllm_request *req) {
    tllm_history named;
    const tllm_gen_request rq = to_gen_request(req, &named);
    const int cont = is_continue(req);
    const uint32_t held = tllm_history_held()->n_tokens;
    const tllm_status refused = cont ? tllm_check_continue(&rq, &named) : tllm_check_request(&rq);
    if (refused == TLLM_ERR_HISTORY || refused == TLLM_ERR_CONTEXT_FULL) return refused_continue(refused, req);
    if (refused != TLLM_OK) return bad_request(refusal(refused)); /* the held conversation stays */

    puts_("@TLLM begin n_prompt=");
    put_u64(rq.n_prompt);
    puts_(" max_new=");
    put_u64(rq.max_new_tokens);
    puts_(" max_seq=");
    put_u64(tllm_model.max_seq);
    if (cont) {
        puts_(" continue=");
        put_u64(held);
    }
    puts_("\n");

    tllm_result res; /* a broken arena canary is reported below */
    if (cont) (void)tllm_continue(&rq, &named, print_token, 0, &res);
    else (void)tllm_generate(&rq, print_token, 0, &res);

    const tllm_history *now_held = tllm_history_held();
    puts_("@TLLM end reason=");
    puts_(reason_name(res.stop_reason));
    puts_(" n=");
    put_u64(res.n_generated);
    puts_(" prefill_instructions=");
    put_u64(res.prefill_cost);
    puts_(" passes=");
    put_u64(res.passes);
    if (res.shifts) { /* a rolling context moved: the text below is what the model still sees */
        puts_(" shifts=");
        put_u64(res.shifts);
    }
    puts_(" history=");
    put_u64(now_held->n_tokens);
    puts_(" history_crc=");
    put_hex32(now_held->crc);
    puts_("\n@TLLM text-begin\n");
    print_text(res.tokens, 0, res.n_tokens);
    puts_("\n@TLLM text-end\n");
    return report_canaries() ? EXIT_OK : EXIT_CANARY;
}

/* A request over the console UART (codegen/run.py run_serial): announce
 * readiness, then read one frame into the planned request buffer
 * (tllm_frame.c: resync on the magic, timeout, length and CRC checks; a
 * refused frame hands back the bytes after it). */
static tllm_frame_reader uart_frames;

static int read_uart_request(tllm_request *rq, int *exit_after) {
    uint8_t *buf = tllm_model_request_buffer();
    const uint32_t cap = tllm_model_request_capacity();
    const char *why = 0;
    uint32_t total;
    puts_("@TLLM ready max_request=");
    put_u64(cap);
    puts_("\n");
    if (uart_frames.buf != buf) tllm_frame_init(&uart_frames, buf, cap);
    const int got = tllm_frame_read(&uart_frames, &total);
    if (got == TLLM_FRAME_NO_INPUT) return -2; /* the board has no console input */
    if (got != TLLM_FRAME_OK) return EXIT_BAD_REQUEST;
    if (tllm_request_parse(buf, total, rq, &why) != 0 || check_request(rq, &why) != 0) {
        tllm_frame_refuse(&uart_frames); /* buf untouched: what came after the frame is searched next */
        return bad_request(why);
    }
    *exit_after = (rq->flags & TLLM_REQUEST_EXIT_AFTER) != 0;
    return 0;
}


int tllm_main(void) {
    const char *why = 0;
    tllm_config config = {0};
    config.clock = tllm_board_instret;
    config.draft = CONSOLE_DRAFT;
    if (tllm_init(&config) != TLLM_OK) {
        puts_("@TLLM error weights: ");
        puts_(tllm_error_detail());
        puts_("\n");
        return EXIT_BAD_WEIGHTS;
    }
    size_t rq_len = 0;
    const uint8_t *rq_buf = tllm_board_request(&rq_len);
    tllm_request rq;
    if (rq_buf) { /* placed in memory by the host: one generation, then exit */
        if (tllm_request_parse(rq_buf, rq_len, &rq, &why) != 0 || check_request(&rq, &why) != 0)
            return bad_request(why);
        return generate(&rq);
    }
    /* Otherwise serve requests over the UART until one asks to exit. */
    for (;;) {
        int exit_after = 0;
        const int got = read_uart_request(&rq, &exit_after);
        if (got == -2) return bad_request("no request in memory and no console input");
        const int status = got != 0 ? got : generate(&rq);
        tllm_frame_done(&uart_frames, status);
        if (exit_after || status == EXIT_CANARY) return status;
        tllm_model_canary_arm();
        tllm_draft_model_arm(CONSOLE_DRAFT);
    }
}
