/* The contract between the portable runtime and a board.
 *
 * A board (boards/<name>/) implements these few functions and owns the reset
 * path: it prepares memory, calls tllm_board_init(), then tllm_main(), then
 * tllm_board_exit() with tllm_main's return value.  Nothing else in the
 * runtime touches hardware, so the same generated sources run on the host,
 * under QEMU and on an STM32H750. */
#ifndef TLLM_BOARD_H
#define TLLM_BOARD_H

#include <stddef.h>
#include <stdint.h>

/* The runtime's entry point (firmware/tllm_main.c). Returns the exit status. */
int tllm_main(void);

/* Clocks, console UART, cycle/instruction counter. */
void tllm_board_init(void);

/* Blocking write of n bytes to the console (UART on targets, stdout on host). */
void tllm_board_write(const char *buf, size_t n);

/* Non-zero when tllm_board_instret() measures something real. */
int tllm_board_can_count(void);

/* Instructions retired since tllm_board_init(), as far as the board can tell
 * (QEMU with -icount shift=0: timer ticks x 40). 0 when it cannot count. */
uint64_t tllm_board_instret(void);

/* The generation request the host placed for us (see tllm_request.h for the
 * layout), and its size in bytes via *len. NULL when there is none. */
const uint8_t *tllm_board_request(size_t *len);

/* Bytes of stack used since reset (the startup code paints the stack and
 * this finds the deepest overwritten word); 0 where the board cannot tell
 * (the host).  tllm_main checks it against the planned stack after each
 * generation: the stack-limit canary. */
size_t tllm_board_stack_peak(void);

/* Blocking read of exactly n bytes from the console (UART on targets, stdin
 * on the host): 0 on success, -1 when the board has no console input or it
 * ended. Used for requests sent over the UART. */
int tllm_board_read(uint8_t *buf, size_t n);

/* One console byte, waiting at most timeout_ms milliseconds by the board's
 * own clock (0: as long as it takes). 0: *c holds the byte; 1: timed out;
 * 2: a byte was lost (receiver overrun); -1: the board has no console input
 * or it ended. The request frame reader (tllm_frame.c) uses it. */
int tllm_board_read_byte(uint8_t *c, uint32_t timeout_ms);

/* Stop with an exit status the host can read (semihosting on QEMU). */
void tllm_board_exit(int code) __attribute__((noreturn));

/* Stop on a broken runtime contract (a bad copy argument, ...): one line
 * naming it on the console, then an exit status the host reads. */
void tllm_board_fault(const char *why) __attribute__((noreturn));

/* Weight streaming (DWUP): one background copy from the weights
 * (external flash) into a RAM stream buffer while the CPU computes on the
 * previous one.
 *
 *   tllm_board_copy_start(dst, src, len);   // returns at once on the H750
 *   ... compute on another buffer ...
 *   tllm_board_copy_wait();                 // dst[0..len) now holds src
 *
 * Contract (the same on every board, so every test tier runs this path):
 * - at most one transfer in flight: call tllm_board_copy_wait() before the
 *   next tllm_board_copy_start() (the H750 faults on a second start);
 * - dst, src and len are multiples of 4 bytes; len >= 4; len <= 64 KiB, or a
 *   multiple of 4 KiB up to 16 MiB (the MDMA's block and repeat counters);
 * - a dst in cacheable RAM (AXI SRAM, SRAM1..4) must be 32-byte aligned with
 *   len a multiple of 32: whole D-cache lines, since the H750 invalidates them;
 *   DTCM (not cached) only needs the word alignment;
 * - until tllm_board_copy_wait() returns, the caller neither reads nor writes
 *   dst[0..len), nor writes src[0..len); it may read src and touch any other
 *   memory freely;
 * - after tllm_board_copy_wait() returns, the CPU sees the copied bytes
 *   (cache maintenance, if any, is the board's job, done inside wait).
 * Host and QEMU: a memcpy in start, wait does nothing.  STM32H750: MDMA
 * channel 0, software-requested, completion polled (boards/stm32h750/
 * mdma.c). */
void tllm_board_copy_start(void *dst, const void *src, uint32_t len);
void tllm_board_copy_wait(void);

/* The contract's argument rules in one place, for every board's copy hook:
 * NULL when (dst, src, len) may be started, else what is wrong.  The
 * cache-line rule for cacheable destinations is the H750's own check. */
static inline const char *tllm_board_copy_args_error(const void *dst, const void *src, uint32_t len)
{
    if ((((uintptr_t)dst | (uintptr_t)src | len) & 3u) != 0u) {
        return "copy: dst, src and len must be multiples of 4";
    }
    if (len == 0u || (len > 65536u && ((len & 4095u) != 0u || len > (16u << 20)))) {
        return "copy: len must be 4..65536, or a multiple of 4096 up to 16 MiB";
    }
    return NULL;
}

#endif
