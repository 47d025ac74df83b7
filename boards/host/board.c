/* The host "board": runs the generated firmware as an ordinary program.
 *
 *   ./fw [request.bin]
 *
 * The request file (optional) is read into a static buffer; text goes to
 * stdout; the exit status is tllm_main()'s return value.  The host cannot
 * count instructions, so tllm_board_instret() is always 0. */
#define _POSIX_C_SOURCE 200809L /* poll, read */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "board_config.h" /* generated from board.json: the request block */
#include "tllm_abi.h" /* TLLM_EXIT_* */
#include "tllm_board.h"

#define REQUEST_MAGIC "TLRQ"

/* uint32_t keeps the buffer 4-byte aligned, like the PSRAM copy on targets. */
static uint32_t request_words[TLLM_REQUEST_MAX / 4u];
static size_t request_bytes; /* bytes read from the file; 0 without one */

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static int read_request(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "tllm: cannot open request file %s\n", path);
        return -1;
    }
    unsigned char *buf = (unsigned char *)request_words;
    size_t n = fread(buf, 1, sizeof request_words, f);
    int extra = fgetc(f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "tllm: cannot read request file %s\n", path);
        return -1;
    }
    if (extra != EOF) {
        fprintf(stderr, "tllm: request file %s is larger than %u bytes\n", path,
                (unsigned)TLLM_REQUEST_MAX);
        return -1;
    }
    request_bytes = n;
    return 0;
}

void tllm_board_init(void)
{
}

void tllm_board_write(const char *buf, size_t n)
{
    if (n != 0) {
        fwrite(buf, 1, n, stdout);
        if (memchr(buf, '\n', n) != NULL) {
            fflush(stdout); /* a host reading the pipe sees each line as it is printed */
        }
    }
}

/* Console input is stdin (unbuffered reads of fd 0, so the timeout below
 * sees every byte): a request piped in when no request file is given. */
int tllm_board_read_byte(uint8_t *c, uint32_t timeout_ms)
{
    fflush(stdout);
    struct pollfd p = {0, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms != 0u ? (int)timeout_ms : -1);
    if (ready == 0) {
        return 1;
    }
    return ready > 0 && read(0, c, 1) == 1 ? 0 : -1;
}

int tllm_board_read(uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        if (tllm_board_read_byte(&buf[i], 0u) != 0) {
            return -1;
        }
    }
    return 0;
}

int tllm_board_can_count(void)
{
    return 0;
}

uint64_t tllm_board_instret(void)
{
    return 0;
}

/* Same rule as on the targets: the magic, then a total length (header
 * included) that the file actually holds. */
const uint8_t *tllm_board_request(size_t *len)
{
    const uint8_t *buf = (const uint8_t *)request_words;
    if (request_bytes < 8u || memcmp(buf, REQUEST_MAGIC, 4) != 0) {
        if (len != NULL) {
            *len = 0;
        }
        return NULL;
    }
    uint32_t total = load_le32(buf + 4);
    if (total < 8u || total > request_bytes) {
        if (len != NULL) {
            *len = 0;
        }
        return NULL;
    }
    if (len != NULL) {
        *len = (size_t)total;
    }
    return buf;
}

/* A broken runtime contract (boards/common/copy_sync.c): one line, then stop. */
void tllm_board_fault(const char *why)
{
    fflush(stdout);
    fprintf(stderr, "tllm: %s\n", why);
    exit(TLLM_EXIT_MEMMANAGE);
}

/* The OS owns the host's stack: nothing to measure. */
size_t tllm_board_stack_peak(void)
{
    return 0;
}

void tllm_board_exit(int code)
{
    fflush(stdout);
    exit(code);
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [request.bin]\n", argv[0]);
        return 2;
    }
    if (argc == 2 && read_request(argv[1]) != 0) {
        return 2;
    }
    tllm_board_init();
    int rc = tllm_main();
    fflush(stdout);
    return rc;
}
