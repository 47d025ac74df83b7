/* Framing of the console protocol: request frames in, checked lines out.
 *
 * Requests (tllm_request.h, version 2) arrive over the console UART as one
 * frame: the magic "TLRQ", the total length, the body, and a CRC32 over the
 * whole request (the CRC field counted as zero).  The reader
 *
 *   - hunts for the magic byte by byte: junk before it is dropped (and
 *     counted in a "@TLLM note frame:" line once a frame is found);
 *   - checks the length before reading the body (>= the header, a multiple
 *     of 4, <= the request buffer): no arithmetic on it can overflow;
 *   - drops a partial frame when no byte arrives for TLLM_FRAME_TIMEOUT_MS,
 *     measured by the board's own clock (cycles of the DWT on the STM32H750,
 *     TIMER0 ticks under QEMU, poll() on the host);
 *   - verifies the CRC32 (IEEE 802.3, as zlib.crc32);
 *   - after any error ("@TLLM error frame: ..."), resynchronises inside what
 *     it already holds: the search for the next magic resumes at the byte
 *     after the dead frame's magic, so a request that followed junk, or that
 *     a host restarted mid-frame sent while a cut-off frame still waited
 *     for its tail, is served;
 *   - a frame whose CRC holds but which the caller refuses (version, fields:
 *     tllm_frame_refuse) ends where its length says: bytes already received
 *     after it are searched next.
 *
 * The guarantee (tests/fuzz/test_frame_property.py checks it on random byte
 * streams).  Over the bytes a reader receives, call every occurrence of the
 * magic at offset p a candidate, and its claimed length claim(p) the length
 * field at p + 4 when that passes the length checks (>= the header, a
 * multiple of 4, <= cap), else 8 (the header bytes read before the length is
 * refused).  A frame V at offset q with a good length and CRC that the
 * caller serves, whose bytes arrive with no silence of timeout_ms (and no
 * lost byte) between its first and its last, is served unless
 *   (1) a CRC-good frame A at a < q claims V's first byte (a + claim(a) > q):
 *       a frame inside another good frame's length is that frame's data; or
 *   (2) V's first byte was already received when an earlier frame A was
 *       served: the request buffer goes to the model, and what it held
 *       past A is dropped.  That needs a candidate c < a whose claimed
 *       length reached V (c + claim(c) > q): only a dead frame's claim
 *       makes the reader take bytes past the frame it serves.
 * Both need a candidate before V whose claimed length reaches V, so every
 * good frame that no other frame's claimed length overlaps is served.  A
 * dead frame's claim (a cut-off frame, a bit flip, a false magic in junk)
 * costs no request by itself: what it swallowed is searched again, and only
 * good frames after the first one served from inside it can be lost.  No
 * frame is served twice, and frames are served in the order they arrived.
 *
 * Lines out: every console line that starts with "@TLLM" gets a
 * " crc=XXXXXXXX" suffix (CRC32 of the line before the suffix, 8 lowercase
 * hex digits) when it goes through tllm_console_write; codegen/protocol.py
 * verifies it.  Other lines (the story text) pass through unchanged. */
#ifndef TLLM_FRAME_H
#define TLLM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#ifndef TLLM_FRAME_TIMEOUT_MS
#define TLLM_FRAME_TIMEOUT_MS 250u /* longest silence inside a frame */
#endif

enum { TLLM_FRAME_OK = 0, TLLM_FRAME_ERROR = -1, TLLM_FRAME_NO_INPUT = -2 };

typedef struct {
    uint8_t *buf;        /* the planned request buffer */
    uint32_t cap;        /* its size in bytes */
    uint32_t have;       /* bytes in buf: a frame candidate kept across a resync */
    uint32_t skipped;    /* junk bytes dropped since the last good frame */
    uint32_t timeout_ms; /* TLLM_FRAME_TIMEOUT_MS unless a test changes it */
    uint32_t crc;        /* CRC field of the last frame read (served or refused) */
    int crc_known;       /* 0: the last frame ended before its CRC field */
    uint32_t taken;      /* length of the frame the last TLLM_FRAME_OK handed out, 0 once released */
} tllm_frame_reader;

/* CRC32 (reflected, polynomial 0xEDB88320): crc = tllm_crc32(0, p, n), and
 * chains like zlib.crc32(data, crc). */
uint32_t tllm_crc32(uint32_t crc, const void *p, size_t n);

/* The CRC a request carries at TLLM_REQUEST_CRC_OFFSET, and the one its
 * bytes give (the field counted as zero); total >= TLLM_REQUEST_HEADER_BYTES. */
uint32_t tllm_request_stored_crc(const uint8_t *buf);
uint32_t tllm_request_crc(const uint8_t *buf, uint32_t total);

void tllm_frame_init(tllm_frame_reader *r, uint8_t *buf, uint32_t cap);

/* Reads the next request frame into r->buf (*total: its length).
 * TLLM_FRAME_OK, TLLM_FRAME_ERROR (an "@TLLM error frame:" line was
 * printed; call again to go on) or TLLM_FRAME_NO_INPUT (the board has no
 * console input, or it ended).  After TLLM_FRAME_OK the caller may use
 * r->buf as it likes (the model's first step does): the next read drops
 * whatever it held, unless tllm_frame_refuse was called. */
int tllm_frame_read(tllm_frame_reader *r, uint32_t *total);

/* The frame the last read returned is refused (a field check failed) and
 * r->buf was not written: the bytes received after the frame stay, and the
 * next read searches them first. */
void tllm_frame_refuse(tllm_frame_reader *r);

/* "@TLLM done status=<n> req=<crc|none>": which request the status is for. */
void tllm_frame_done(const tllm_frame_reader *r, int status);

/* The console writer: tllm_board_write plus the line CRC of "@TLLM" lines. */
void tllm_console_write(const char *s, size_t n);
/* v in decimal through tllm_console_write (the one number formatter of the console). */
void tllm_console_put_u64(uint64_t v);

#endif
