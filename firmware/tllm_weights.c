/* Boot-time check of the weights blob (layout: codegen/lower/blob.py): a
 * missing, stale or corrupted weights file stops the firmware with a clear
 * message instead of generating garbage. */
#include <string.h>

#include "tllm_model.h"

#include "tllm_abi.h"
#include "tllm_board.h"

#define BLOB_HEADER_BYTES TLLM_BLOB_HEADER_BYTES

const uint8_t *tllm_weights_base(void);

int tllm_weights_check(const char **why) {
    const uint8_t *b = tllm_weights_base();
    uint32_t hdr[4];
    memcpy(hdr, b + 8, sizeof hdr);
    if (memcmp(b, TLLM_BLOB_MAGIC, TLLM_BLOB_MAGIC_BYTES) != 0) {
        *why = "no weights blob at the weights address (bad magic)";
        return -1;
    }
    if (hdr[0] != TLLM_BLOB_VERSION) { *why = "weights blob format version mismatch"; return -1; }
    if (hdr[1] != TLLM_WEIGHTS_BYTES) { *why = "weights blob size does not match this build"; return -1; }
    /* sum_i w_i * ((i*0x9E3779B1 + 1) | 1) mod 2^32, as blob.blob_checksum */
    const uint8_t *p = b + BLOB_HEADER_BYTES;
    const uint32_t words = (TLLM_WEIGHTS_BYTES - BLOB_HEADER_BYTES) / 4u;
    uint32_t sum = 0;
    for (uint32_t i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, p + 4u * i, 4);
        sum += w * ((i * 0x9E3779B1u + 1u) | 1u);
    }
    if (sum != hdr[2] || sum != TLLM_WEIGHTS_CHECKSUM) { *why = "weights blob checksum mismatch"; return -1; }
    return 0;
}

/* Weight streaming's copy hooks (tllm_board.h) for firmware that brings no
 * copy engine of its own (a user's firmware linking tinyllm::runtime): a
 * synchronous memcpy, so a streamed or pinned model runs anywhere.  A
 * board's own hooks replace these at link time (the H750's MDMA in
 * boards/stm32h750/mdma.c; boards/common/copy_sync.c, which also
 * checks the contract, on the host and QEMU). */
__attribute__((weak)) void tllm_board_copy_start(void *dst, const void *src, uint32_t len) {
    memcpy(dst, src, len);
}

__attribute__((weak)) void tllm_board_copy_wait(void) {}
