/* Weight streaming on the STM32H750 (tllm_board.h): one MDMA
 * transfer from the QUADSPI window into a RAM stream buffer while the core
 * computes on the previous one.
 *
 * Why MDMA: it is the only DMA master that reaches DTCM (through the core's
 * AHBS port; DMA1/DMA2 and BDMA cannot), and it reaches AXI SRAM and the
 * QUADSPI window through its 64-bit AXI master.  Register facts: RM0433
 * (MDMA, RCC) and the field positions of ST's stm32h750xx.h; the Cortex-M7
 * TRM for the cache maintenance registers.
 *
 * The transfer: channel 0, software request (CTCR.SWRM, then CCR.SWRQ),
 * repeated-block mode (TRGM 10: one request moves every block), words in and
 * out (SSIZE = DSIZE = 32 bits, both addresses incrementing by 4), bursts of
 * 16 beats (64 bytes) inside a 128-byte buffer (TLEN 127).  One block holds at
 * most 65,536 bytes (BNDT), so a longer copy is k equal blocks of a power of
 * two (BRC = k - 1, BRUR = 0: each block starts where the last one ended).
 * Buses (CTBR): the source, the QUADSPI window, is on the AXI side (SBUS 0);
 * a destination in ITCM/DTCM needs the AHB side (DBUS 1), one in AXI SRAM or
 * SRAM1..4 the AXI side (DBUS 0).  Completion is polled (CISR.CTCIF, or TEIF
 * for a bus error): the firmware runs without interrupts.
 *
 * D-cache (the H7 rule: a DMA master does not see or update the core's
 * cache).  The choice, made here and nowhere else:
 * - DTCM/ITCM destinations: nothing to do, the TCMs are never cached;
 * - destinations in cacheable RAM (AXI SRAM, SRAM1..4, write-back as the
 *   memory map leaves them; no MPU region is set up for stream buffers, so
 *   the planner's region list stays the whole truth): invalidate the
 *   destination lines by address (SCB DCIMVAC) before the transfer starts,
 *   so no dirty line can be evicted over the fresh data while the MDMA
 *   writes, and again after completion, since the core may speculatively
 *   fill lines of a Normal-memory buffer while the transfer runs.  Whole
 *   32-byte lines only (the contract's alignment rule), or an invalidate
 *   would throw away a neighbour's data;
 * - the source: the QUADSPI window is cacheable and read-only at run time,
 *   so what the MDMA reads from the flash and what the cache holds agree. */
#include <stdint.h>

#include "tllm_board.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

#define RCC_AHB3ENR REG(0x58024400u + 0x0D4u)
#define RCC_AHB3ENR_MDMAEN (1u << 0)

#define MDMA_CH0 0x52000040u /* channel x at 0x52000000 + 0x40 + 0x40 * x */
#define MDMA_CISR REG(MDMA_CH0 + 0x00u)
#define MDMA_CIFCR REG(MDMA_CH0 + 0x04u)
#define MDMA_CESR REG(MDMA_CH0 + 0x08u)
#define MDMA_CCR REG(MDMA_CH0 + 0x0Cu)
#define MDMA_CTCR REG(MDMA_CH0 + 0x10u)
#define MDMA_CBNDTR REG(MDMA_CH0 + 0x14u)
#define MDMA_CSAR REG(MDMA_CH0 + 0x18u)
#define MDMA_CDAR REG(MDMA_CH0 + 0x1Cu)
#define MDMA_CBRUR REG(MDMA_CH0 + 0x20u)
#define MDMA_CLAR REG(MDMA_CH0 + 0x24u)
#define MDMA_CTBR REG(MDMA_CH0 + 0x28u)

#define CISR_TEIF (1u << 0)
#define CISR_CTCIF (1u << 1)
#define CIFCR_ALL 0x1Fu /* CTEIF, CCTCIF, CBRTIF, CBTIF, CLTCIF */
#define CCR_EN (1u << 0)
#define CCR_PL_HIGH (2u << 6)
#define CCR_SWRQ (1u << 16)
#define CTCR_SINC_UP (2u << 0)
#define CTCR_DINC_UP (2u << 2)
#define CTCR_SSIZE_WORD (2u << 4)
#define CTCR_DSIZE_WORD (2u << 6)
#define CTCR_SINCOS_WORD (2u << 8)
#define CTCR_DINCOS_WORD (2u << 10)
#define CTCR_SBURST_16 (3u << 12)
#define CTCR_DBURST_16 (3u << 15)
#define CTCR_TLEN(bytes) ((uint32_t)((bytes) - 1u) << 18)
#define CTCR_TRGM_REPEATED_BLOCK (2u << 28)
#define CTCR_SWRM (1u << 30)
#define CBNDTR_BRC(n) ((uint32_t)(n) << 20)
#define CTBR_DBUS_AHB_TCM (1u << 17)

#define SCB_DCIMVAC REG(0xE000EF5Cu)
#define DCACHE_LINE 32u

#define MDMA_BLOCK_MAX 65536u

void tllm_board_fault(const char *what) __attribute__((noreturn)); /* board.c */

static uint32_t pending_dst, pending_len; /* pending_len 0: nothing in flight */
static int pending_cached;

static void barrier(void)
{
    __asm volatile("dsb\n isb" ::: "memory");
}

/* ITCM (0x00000000, 64 KiB) and DTCM (0x20000000, 128 KiB): uncached, and
 * reached by the MDMA only through the AHB/TCM side. */
static int is_tcm(uint32_t a)
{
    return a < 0x00010000u || (a >= 0x20000000u && a < 0x20020000u);
}

static void dcache_invalidate(uint32_t addr, uint32_t len)
{
    barrier();
    for (uint32_t a = addr; a < addr + len; a += DCACHE_LINE) {
        SCB_DCIMVAC = a;
    }
    barrier();
}

void tllm_board_copy_start(void *dst, const void *src, uint32_t len)
{
    const char *why = tllm_board_copy_args_error(dst, src, len);
    if (why != NULL) {
        tllm_board_fault(why);
    }
    if (pending_len != 0u) {
        tllm_board_fault("copy: started while the previous transfer is in flight (call tllm_board_copy_wait first)");
    }
    const uint32_t d = (uint32_t)(uintptr_t)dst;
    const int tcm = is_tcm(d);
    if (!tcm && ((d | len) & (DCACHE_LINE - 1u)) != 0u) {
        tllm_board_fault("copy: a cacheable destination must be whole 32-byte lines");
    }
    if (!(RCC_AHB3ENR & RCC_AHB3ENR_MDMAEN)) {
        RCC_AHB3ENR |= RCC_AHB3ENR_MDMAEN;
        (void)RCC_AHB3ENR; /* read back: the clock runs before the first MDMA access */
    }
    if (!tcm) {
        dcache_invalidate(d, len); /* no dirty line may land on the fresh data */
    }
    /* One block, or k equal power-of-two blocks (the contract keeps k <= 4096). */
    uint32_t block = len, repeats = 0u;
    if (len > MDMA_BLOCK_MAX) {
        block = len & (0u - len);
        if (block > MDMA_BLOCK_MAX) {
            block = MDMA_BLOCK_MAX;
        }
        repeats = len / block - 1u;
    }
    MDMA_CIFCR = CIFCR_ALL;
    MDMA_CTCR = CTCR_SINC_UP | CTCR_DINC_UP | CTCR_SSIZE_WORD | CTCR_DSIZE_WORD | CTCR_SINCOS_WORD |
                CTCR_DINCOS_WORD | CTCR_SBURST_16 | CTCR_DBURST_16 | CTCR_TLEN(128u) |
                CTCR_TRGM_REPEATED_BLOCK | CTCR_SWRM;
    MDMA_CBNDTR = block | CBNDTR_BRC(repeats); /* BRSUM = BRDUM = 0: addresses count up */
    MDMA_CSAR = (uint32_t)(uintptr_t)src;
    MDMA_CDAR = d;
    MDMA_CBRUR = 0u;
    MDMA_CLAR = 0u;                          /* no linked list */
    MDMA_CTBR = tcm ? CTBR_DBUS_AHB_TCM : 0u; /* SBUS 0: the QUADSPI window is on the AXI side */
    pending_dst = d;
    pending_len = len;
    pending_cached = !tcm;
    barrier(); /* the invalidates and the register writes before the enable */
    MDMA_CCR = CCR_PL_HIGH | CCR_EN;
    MDMA_CCR = CCR_PL_HIGH | CCR_EN | CCR_SWRQ;
}

void tllm_board_copy_wait(void)
{
    if (pending_len == 0u) {
        return; /* nothing in flight */
    }
    uint32_t isr;
    while (((isr = MDMA_CISR) & (CISR_CTCIF | CISR_TEIF)) == 0u) {
    }
    if (isr & CISR_TEIF) {
        tllm_board_fault("copy: MDMA transfer error (CESR says where)");
    }
    MDMA_CIFCR = CIFCR_ALL;
    MDMA_CCR = 0u; /* the hardware clears EN at the end of a channel transfer; make sure */
    if (pending_cached) {
        dcache_invalidate(pending_dst, pending_len); /* drop lines filled while the MDMA wrote */
    } else {
        barrier();
    }
    pending_len = 0u;
}
