/* Request frames in, CRC-checked console lines out: see tllm_frame.h. */
#include "tllm_frame.h"

#include <string.h>

#include "tllm_board.h"
#include "tllm_crc32.h"
#include "tllm_request.h"

static const uint8_t MAGIC[4] = {'T', 'L', 'R', 'Q'};

/* ---------------------------------------------------------------- CRC32 */

uint32_t tllm_crc32(uint32_t crc, const void *p, size_t n) {
    return ~tllm_crc_update(~crc, (const uint8_t *)p, n);
}

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

uint32_t tllm_request_stored_crc(const uint8_t *buf) { return load_le32(buf + TLLM_REQUEST_CRC_OFFSET); }

uint32_t tllm_request_crc(const uint8_t *buf, uint32_t total) {
    static const uint8_t zero[4] = {0, 0, 0, 0};
    uint32_t c = ~0u;
    c = tllm_crc_update(c, buf, TLLM_REQUEST_CRC_OFFSET);
    c = tllm_crc_update(c, zero, 4);
    c = tllm_crc_update(c, buf + TLLM_REQUEST_CRC_OFFSET + 4u, total - (TLLM_REQUEST_CRC_OFFSET + 4u));
    return ~c;
}

/* ---------------------------------------------------------------- console lines */

static struct {
    char pre[5];    /* the start of the current line until it is known to be "@TLLM" or not */
    uint32_t npre;
    int state;      /* 0 line start, 1 an "@TLLM" line (CRC running), 2 any other line */
    uint32_t crc;   /* running (non-inverted) CRC of the current "@TLLM" line */
} con;

static void put_hex32(uint32_t v, char out[8]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 7; i >= 0; i--) {
        out[i] = hex[v & 15u];
        v >>= 4;
    }
}

void tllm_console_write(const char *s, size_t n) {
    size_t run = 0; /* s[run..i) is pending output of the current line */
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (con.state == 0) {
            if (c != '\n' && c == "@TLLM"[con.npre]) {
                con.pre[con.npre++] = c;
                if (con.npre == 5) {
                    con.state = 1;
                    con.crc = tllm_crc_update(~0u, (const uint8_t *)con.pre, 5);
                    tllm_board_write(con.pre, 5);
                }
                run = i + 1;
                continue;
            }
            tllm_board_write(con.pre, con.npre); /* not a protocol line: pass it through */
            con.npre = 0;
            con.state = 2;
            run = i;
        }
        if (c == '\n') {
            tllm_board_write(s + run, i - run);
            if (con.state == 1) {
                char tail[14] = {' ', 'c', 'r', 'c', '='};
                put_hex32(~con.crc, tail + 5);
                tail[13] = '\n';
                tllm_board_write(tail, sizeof tail);
            } else {
                tllm_board_write("\n", 1);
            }
            con.state = 0;
            con.npre = 0;
            run = i + 1;
        } else if (con.state == 1) {
            con.crc = tllm_crc_update(con.crc, (const uint8_t *)&s[i], 1);
        }
    }
    if (con.state != 0 && run < n) tllm_board_write(s + run, n - run);
}

static void con_puts(const char *s) { tllm_console_write(s, strlen(s)); }

void tllm_console_put_u64(uint64_t v) {
    char buf[21];
    int i = 20;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    con_puts(buf + i);
}

static void con_put_u32(uint32_t v) { tllm_console_put_u64(v); }

/* ---------------------------------------------------------------- frames */

void tllm_frame_init(tllm_frame_reader *r, uint8_t *buf, uint32_t cap) {
    memset(r, 0, sizeof *r);
    r->buf = buf;
    r->cap = cap;
    r->timeout_ms = TLLM_FRAME_TIMEOUT_MS;
}

/* Junk counts saturate rather than wrap (a line spewing noise for hours). */
static uint32_t add_sat(uint32_t a, uint32_t b) { return a > UINT32_MAX - b ? UINT32_MAX : a + b; }

/* Drops buf[0..k) for the smallest k >= from where what is left could still
 * be the start of a frame (a prefix of the magic, or the whole magic): the
 * bytes of a dead frame are searched again, never skipped unread. */
static void resync(tllm_frame_reader *r, uint32_t from) {
    uint32_t k = from;
    for (; k < r->have; k++) {
        const uint32_t n = r->have - k < 4u ? r->have - k : 4u;
        if (memcmp(r->buf + k, MAGIC, n) == 0) break;
    }
    if (k > r->have) k = r->have;
    memmove(r->buf, r->buf + k, r->have - k);
    r->have -= k;
    r->skipped = add_sat(r->skipped, k);
}

static void frame_error(const char *what, uint32_t got, uint32_t want) {
    con_puts("@TLLM error frame: ");
    con_puts(what);
    if (want) {
        con_puts(" after ");
        con_put_u32(got);
        con_puts(" of ");
        con_put_u32(want);
        con_puts(" bytes");
    }
    con_puts("\n");
}

/* Reads until r->have >= need: 0, or 1 when the frame stopped arriving (a
 * silence of timeout_ms, a lost byte or the end of the input; reported). */
static int fill(tllm_frame_reader *r, uint32_t need, uint32_t want) {
    while (r->have < need) {
        uint8_t c;
        const int rc = tllm_board_read_byte(&c, r->timeout_ms);
        if (rc != 0) {
            frame_error(rc == 1 ? "timeout, partial frame dropped" : rc == 2 ? "byte lost (overrun)"
                                                                             : "input ended inside a frame",
                        r->have, want);
            return 1;
        }
        r->buf[r->have++] = c;
    }
    return 0;
}

int tllm_frame_read(tllm_frame_reader *r, uint32_t *total) {
    if (r->taken) { /* the last frame was served: its buffer went to the model, and with it what followed */
        r->skipped = add_sat(r->skipped, r->have - r->taken);
        r->have = 0;
        r->taken = 0;
    }
    r->crc_known = 0;
    resync(r, 0);
    /* The magic, byte by byte: wait as long as it takes for the first byte;
     * a silence inside the magic only means the bytes so far were junk. */
    while (r->have < 4u) {
        uint8_t c;
        const int rc = tllm_board_read_byte(&c, r->have ? r->timeout_ms : 0u);
        if (rc < 0) return TLLM_FRAME_NO_INPUT;
        if (rc > 0) {
            r->skipped = add_sat(r->skipped, r->have);
            r->have = 0;
            continue;
        }
        r->buf[r->have++] = c;
        resync(r, 0);
    }
    if (fill(r, 8u, 0u) != 0) goto drop;
    const uint32_t len = load_le32(r->buf + 4);
    /* Checked before anything is computed from it: no sum below can wrap. */
    if (len < TLLM_REQUEST_HEADER_BYTES || (len & 3u) != 0 || len > r->cap) {
        con_puts("@TLLM error frame: bad length ");
        con_put_u32(len);
        con_puts(" (max ");
        con_put_u32(r->cap);
        con_puts(")\n");
        goto drop;
    }
    if (fill(r, len, len) != 0) goto drop;
    r->crc = tllm_request_stored_crc(r->buf);
    r->crc_known = 1;
    if (tllm_request_crc(r->buf, len) != r->crc) {
        frame_error("crc mismatch", 0, 0);
        goto drop;
    }
    if (r->skipped) {
        con_puts("@TLLM note frame: skipped ");
        con_put_u32(r->skipped);
        con_puts(" bytes around the request\n");
    }
    /* Bytes past the frame (received while a dead frame claimed them) stay
     * until the caller is done with the frame: tllm_frame_refuse keeps them,
     * the next read drops them when the frame was served. */
    r->skipped = 0;
    r->taken = len;
    *total = len;
    return TLLM_FRAME_OK;
drop:
    /* The next magic, searched from the byte after this frame's magic (the
     * magic has no proper prefix that is also its suffix, so no candidate
     * starts inside it). */
    resync(r, (uint32_t)sizeof MAGIC);
    return TLLM_FRAME_ERROR;
}

void tllm_frame_refuse(tllm_frame_reader *r) {
    if (!r->taken) return;
    memmove(r->buf, r->buf + r->taken, r->have - r->taken);
    r->have -= r->taken;
    r->taken = 0;
}

void tllm_frame_done(const tllm_frame_reader *r, int status) {
    con_puts("@TLLM done status=");
    con_put_u32((uint32_t)status);
    if (r && r->crc_known) {
        char hex[9];
        put_hex32(r->crc, hex);
        hex[8] = 0;
        con_puts(" req=");
        con_puts(hex);
    } else {
        con_puts(" req=none");
    }
    con_puts("\n");
}
