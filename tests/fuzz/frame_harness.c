/* The firmware's frame reader (firmware/tllm_frame.c) on the host, fed a
 * scripted byte stream: tests/fuzz/test_frame_property.py builds it with gcc
 * (AddressSanitizer when it links) and checks the framer's guarantee.
 *
 *   frame_harness CAP < events
 *
 * Events on stdin: a byte, except 0xFF followed by 0x00 (the byte 0xFF) or
 * 0x01 (a silence of the frame timeout: a read waiting with a timeout sees
 * it expire; a read waiting without one, in the hunt for a magic, does not
 * notice it).  The end of stdin is the end of the console input.
 *
 * The loop is tllm_main.c's: read a frame; a frame of the current version
 * (TLLM_REQUEST_VERSION) is "served"
 * (its bytes printed as "#served <hex>", then the request buffer, exactly
 * CAP bytes from malloc, is overwritten as the model's first step would);
 * any other version is refused (tllm_frame_refuse, "#refused <hex>"); each
 * ends with the done line.  Console lines go to stdout as the firmware
 * prints them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tllm_board.h"
#include "tllm_abi.h" /* TLLM_REQUEST_VERSION */
#include "tllm_frame.h"

void tllm_board_write(const char *buf, size_t n) { fwrite(buf, 1, n, stdout); }

int tllm_board_read_byte(uint8_t *c, uint32_t timeout_ms) {
    for (;;) {
        int b = getchar();
        if (b == EOF) return -1;
        if (b == 0xFF) {
            const int e = getchar();
            if (e == EOF) return -1;
            if (e == 0x01) {
                if (timeout_ms != 0u) return 1;
                continue; /* no deadline: the silence passes unnoticed */
            }
            b = 0xFF;
        }
        *c = (uint8_t)b;
        return 0;
    }
}

static void put_frame(const char *what, const uint8_t *p, uint32_t n) {
    char line[16];
    snprintf(line, sizeof line, "#%s ", what);
    tllm_board_write(line, strlen(line));
    for (uint32_t i = 0; i < n; i++) {
        snprintf(line, sizeof line, "%02x", p[i]);
        tllm_board_write(line, 2);
    }
    tllm_board_write("\n", 1);
}

int main(int argc, char **argv) {
    if (argc != 2) return 64;
    const uint32_t cap = (uint32_t)strtoul(argv[1], 0, 10);
    uint8_t *buf = malloc(cap);
    if (!buf) return 65;
    tllm_frame_reader r;
    tllm_frame_init(&r, buf, cap);
    for (;;) {
        uint32_t total = 0;
        const int got = tllm_frame_read(&r, &total);
        if (got == TLLM_FRAME_NO_INPUT) break;
        int status = 3;
        if (got == TLLM_FRAME_OK) {
            if (total < 10u || total > cap) return 66; /* the reader broke its own length checks */
            if ((uint32_t)(buf[8] | (buf[9] << 8)) == TLLM_REQUEST_VERSION) {
                put_frame("served", buf, total);
                memset(buf, 0xA5, cap); /* the model's first step reuses the request buffer */
                status = 0;
            } else {
                put_frame("refused", buf, total);
                tllm_frame_refuse(&r);
            }
        }
        tllm_frame_done(&r, status);
    }
    free(buf);
    return 0;
}
