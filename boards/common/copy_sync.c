/* Weight streaming hooks (tllm_board.h) for boards without a DMA engine
 * (the host, QEMU mps2-an500): the copy is synchronous (memcpy in start,
 * wait does nothing), so the same calls run as on the H750's MDMA, and the
 * contract is checked as there, so a caller that breaks it fails here
 * before it does on a board. */
#include <stdint.h>
#include <string.h>

#include "tllm_board.h"

static int copy_in_flight;

void tllm_board_copy_start(void *dst, const void *src, uint32_t len)
{
    const char *why = tllm_board_copy_args_error(dst, src, len);
    if (why != NULL) {
        tllm_board_fault(why);
    }
    if (copy_in_flight) {
        tllm_board_fault("copy: started while the previous transfer is in flight (call tllm_board_copy_wait first)");
    }
    copy_in_flight = 1;
    memcpy(dst, src, len);
}

void tllm_board_copy_wait(void)
{
    copy_in_flight = 0;
}
