/* The console firmware: the request protocol over memory or the UART, and
 * the console lines, around the generation engine (tllm_engine.c, the same
 * tllm_api.h a user's own main calls).
 *
 * Console lines (parsed by codegen/protocol.py; the text itself is printed by
 * the board from the vocabulary in flash):
 *   @TLLM begin n_prompt=<n> max_new=<n> max_seq=<n>
 *   @TLLM pass <index> tokens=<n> positions=<p>   (speculative builds: before a pass's first token,
 *     how many tokens it produced, the last pass may deliver fewer, and how many positions it ran)
 *   @TLLM tok <index> <id> <instructions> "<escaped token text>"
 *   @TLLM end reason=<eos|max_tokens|context> n=<n> prefill_instructions=<n> passes=<n>[ shifts=<n>]
 *   @TLLM canary arena=<ok|BROKEN> stack=<ok|BROKEN> stack_peak=<n> stack_bytes=<n> regions=<name>:<ok|BROKEN>,...
 *     (arena: every region's guard words; stack: the deepest stack use left
 *      the 16 guard bytes at the stack limit painted)
 *   @TLLM text-begin / raw story text / @TLLM text-end
 * Requests come from memory (the board's request block, one generation) or,
 * when there is none, over the UART: "@TLLM ready max_request=<n>", the
 * request bytes, and after each generation "@TLLM done status=<n>".
 * Exit status: 0 ok, 3 bad request, 4 weights blob mismatch, 5 canary broken. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tllm_api.h"
#include "tllm_board.h"
#include "tllm_frame.h"
#include "tllm_model_api.h"
#include "tllm_request.h"

enum { EXIT_OK = TLLM_EXIT_OK, EXIT_BAD_REQUEST = TLLM_EXIT_BAD_REQUEST, EXIT_BAD_WEIGHTS = TLLM_EXIT_BAD_WEIGHTS,
       EXIT_CANARY = TLLM_EXIT_CANARY }; /* tllm_abi.h: stated once in codegen/abi.py */

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
    out->ids = buf + TLLM_REQUEST_HEADER_BYTES;
    return 0;
}

static const char *reason_name(uint32_t r) {
    return r == TLLM_STOP_EOS ? "eos" : r == TLLM_STOP_CONTEXT ? "context" : "max_tokens";
}

/* A wire request (tllm_request.h) as the engine's request: the ids are
 * decoded into the model's token buffer, where the engine wants them (a
 * prompt too long for the context is refused by the check before any id is
 * read, so at most max_seq are decoded). */
static tllm_gen_request to_gen_request(const tllm_request *rq) {
    uint16_t *ids = tllm_model_tokens();
    const uint32_t n = rq->n_prompt < tllm_model.max_seq ? rq->n_prompt : 0u;
    for (uint32_t i = 0; i < n; i++) ids[i] = tllm_request_id(rq, i);
    tllm_gen_request g;
    g.prompt_ids = ids;
    g.n_prompt = rq->n_prompt;
    g.max_new_tokens = rq->max_new_tokens;
    g.temperature = rq->temperature;
    g.top_p = rq->top_p;
    g.seed = rq->seed;
    return g;
}

/* The request checks done as a request arrives; the greedy-only refusal
 * comes later, from the generation itself (as the protocol always had it:
 * such a request still counts for its exit flag). */
static int check_request(const tllm_request *rq, const char **why) {
    const tllm_gen_request g = to_gen_request(rq);
    const tllm_status s = tllm_check_request(&g);
    if (s == TLLM_OK || s == TLLM_ERR_GREEDY_ONLY) return 0;
    *why = tllm_status_message(s);
    return -1;
}

static void print_text(const uint16_t *tokens, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; i++) {
        uint32_t n;
        const uint8_t *b = tllm_vocab_bytes(tokens[i], &n);
        tllm_console_write((const char *)b, n);
    }
}

/* One line: arena guard words per region, and the stack-limit canary. */
static int report_canaries(void) {
    const int arena = tllm_model_canary_ok();
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

/* Runs one generation; returns the exit status it earned. */
static int generate(const tllm_request *req) {
    const tllm_gen_request rq = to_gen_request(req);
    const tllm_status refused = tllm_check_request(&rq);
    if (refused != TLLM_OK) return bad_request(tllm_status_message(refused));

    puts_("@TLLM begin n_prompt=");
    put_u64(rq.n_prompt);
    puts_(" max_new=");
    put_u64(rq.max_new_tokens);
    puts_(" max_seq=");
    put_u64(tllm_model.max_seq);
    puts_("\n");

    tllm_result res;
    (void)tllm_generate(&rq, print_token, 0, &res); /* a broken arena canary is reported below */

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
    tllm_config config;
    config.clock = tllm_board_instret;
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
    }
}
