/* Exception vectors and board bring-up for QEMU mps2-an500 (Cortex-M7).
 *
 * The reset path itself is boards/cortex-m/reset.c (every Cortex-M board's);
 * it calls tllm_board_bringup() here, which separates the fault handlers and
 * sets an MPU stack guard below RAM.  Faults print one line on the UART and
 * stop with a distinct exit status (see TLLM_EXIT_* below).  No CMSIS: the
 * few system registers used are written out by address. */
#include <stddef.h>
#include <stdint.h>

#include "tllm_board.h"

#include "tllm_abi.h" /* TLLM_EXIT_*: fault statuses, stated once in codegen/abi.py */

/* System control block registers (ARMv7-M). */
#define SCB_CCR (*(volatile uint32_t *)0xE000ED14u)
#define SCB_SHCSR (*(volatile uint32_t *)0xE000ED24u)
#define SCB_CFSR (*(volatile uint32_t *)0xE000ED28u)
#define SCB_HFSR (*(volatile uint32_t *)0xE000ED2Cu)
#define SCB_MMFAR (*(volatile uint32_t *)0xE000ED34u)
#define SCB_BFAR (*(volatile uint32_t *)0xE000ED38u)
#define MPU_CTRL (*(volatile uint32_t *)0xE000ED94u)
#define MPU_RNR (*(volatile uint32_t *)0xE000ED98u)
#define MPU_RBAR (*(volatile uint32_t *)0xE000ED9Cu)
#define MPU_RASR (*(volatile uint32_t *)0xE000EDA0u)

/* Defined by boards/cortex-m/linker.ld.j2. */
extern uint32_t __stack_limit__[];
extern uint32_t __stack_top__[];

/* board.c: raw UART output usable from a fault handler. */
void tllm_board_fault_puts(const char *s);

void Reset_Handler(void);
void tllm_board_early_init(void);
void tllm_board_bringup(void);
void tllm_fault_report(const uint32_t *frame, uint32_t kind) __attribute__((noreturn, used));
void NMI_Handler(void);
void HardFault_Handler(void);
void MemManage_Handler(void);
void BusFault_Handler(void);
void UsageFault_Handler(void);
void Default_Handler(void);

/* Vector table: 16 system entries + 32 external interrupts (mps2 uses fewer;
 * any that fires lands in Default_Handler). */
typedef void (*tllm_vector_t)(void);
#define TLLM_IRQ4 Default_Handler, Default_Handler, Default_Handler, Default_Handler
__attribute__((section(".vectors"), used))
const tllm_vector_t tllm_vector_table[16 + 32] = {
    (tllm_vector_t)(uintptr_t)__stack_top__,
    Reset_Handler,
    NMI_Handler,
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    0, 0, 0, 0,        /* reserved */
    Default_Handler,   /* SVCall */
    Default_Handler,   /* DebugMonitor */
    0,                 /* reserved */
    Default_Handler,   /* PendSV */
    Default_Handler,   /* SysTick */
    TLLM_IRQ4, TLLM_IRQ4, TLLM_IRQ4, TLLM_IRQ4, /* IRQ 0..15 */
    TLLM_IRQ4, TLLM_IRQ4, TLLM_IRQ4, TLLM_IRQ4, /* IRQ 16..31 */
};

/* reset.c, before .data and .bss exist: QEMU's memories need no set-up. */
void tllm_board_early_init(void)
{
}

/* reset.c, once .data and .bss are ready, before the arenas are zeroed. */
void tllm_board_bringup(void)
{
    /* Separate MemManage/BusFault/UsageFault handlers; trap integer division
     * by zero as a UsageFault (the host traps it too). */
    SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18);
    SCB_CCR |= (1u << 4);

    /* Stack guard.  The stack sits at the bottom of RAM (0x20000000) and the
     * 256 MiB below it is an unmapped hole that QEMU reads as zero and ignores
     * writes to.  Make it no-access (MPU region 0, XN) so an overflow raises
     * a MemManage fault at once; the default map covers everything else. */
    MPU_RNR = 0u;
    MPU_RBAR = 0x10000000u;
    MPU_RASR = (1u << 28) | (0u << 24) | (27u << 1) | 1u; /* XN, AP=none, 2^28 B */
    MPU_CTRL = (1u << 2) | 1u;                             /* PRIVDEFENA, ENABLE */
    __asm volatile("dsb\n isb" ::: "memory");
}

/* Fault entry: r0 = the stacked frame (MSP or PSP), r1 = fault kind.  The
 * stack is reset to its top first, so a stack overflow still gets reported. */
#define TLLM_FAULT_STUB(name, kind)                      \
    __attribute__((naked)) void name(void)               \
    {                                                    \
        __asm volatile("tst lr, #4\n"                    \
                       "ite eq\n"                        \
                       "mrseq r0, msp\n"                 \
                       "mrsne r0, psp\n"                 \
                       "ldr r1, =__stack_top__\n"        \
                       "mov sp, r1\n"                    \
                       "movs r1, #" #kind "\n"           \
                       "b tllm_fault_report\n"           \
                       ".ltorg\n");                      \
    }

TLLM_FAULT_STUB(NMI_Handler, 0)
TLLM_FAULT_STUB(HardFault_Handler, 1)
TLLM_FAULT_STUB(MemManage_Handler, 2)
TLLM_FAULT_STUB(BusFault_Handler, 3)
TLLM_FAULT_STUB(UsageFault_Handler, 4)
TLLM_FAULT_STUB(Default_Handler, 5)

static void put_hex(const char *label, uint32_t v)
{
    char buf[20];
    size_t i = 0;
    while (*label != '\0') {
        buf[i++] = *label++;
    }
    buf[i++] = '0';
    buf[i++] = 'x';
    for (int shift = 28; shift >= 0; shift -= 4) {
        buf[i++] = "0123456789abcdef"[(v >> shift) & 0xFu];
    }
    buf[i] = '\0';
    tllm_board_fault_puts(buf);
}

void tllm_fault_report(const uint32_t *frame, uint32_t kind)
{
    static const char *const names[] = {
        "NMI", "HardFault", "MemManage", "BusFault", "UsageFault", "UnexpectedIRQ",
    };
    static const int codes[] = {
        TLLM_EXIT_NMI, TLLM_EXIT_HARDFAULT, TLLM_EXIT_MEMMANAGE,
        TLLM_EXIT_BUSFAULT, TLLM_EXIT_USAGEFAULT, TLLM_EXIT_UNEXPECTED_IRQ,
    };
    if (kind > 5u) {
        kind = 5u;
    }
    tllm_board_fault_puts("\n*** ");
    tllm_board_fault_puts(names[kind]);
    /* Only trust the frame if it lies inside the stack region. */
    if ((uintptr_t)frame >= (uintptr_t)__stack_limit__ &&
        (uintptr_t)frame + 32u <= (uintptr_t)__stack_top__) {
        put_hex(" pc=", frame[6]);
        put_hex(" lr=", frame[5]);
    } else {
        put_hex(" sp=", (uint32_t)(uintptr_t)frame);
        tllm_board_fault_puts(" (stack overflow?)");
    }
    put_hex(" cfsr=", SCB_CFSR);
    put_hex(" hfsr=", SCB_HFSR);
    if (SCB_CFSR & (1u << 7)) {
        put_hex(" mmfar=", SCB_MMFAR);
    }
    if (SCB_CFSR & (1u << 15)) {
        put_hex(" bfar=", SCB_BFAR);
    }
    tllm_board_fault_puts("\n");
    tllm_board_exit(codes[kind]);
}
