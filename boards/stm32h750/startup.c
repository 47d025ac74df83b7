/* Vectors and the first reset step for the STM32H750 boards (Cortex-M7).
 *
 * The reset path is boards/cortex-m/reset.c (every Cortex-M board's): FPU
 * on, tllm_board_early_init() here (D2 SRAM clocks), .data copied, .bss
 * zeroed, tllm_board_bringup() (bringup.c: 480 MHz clocks, QUADSPI
 * memory-mapped, caches), every planned arena zeroed (the linker's zero
 * table), the stack painted, then tllm_board_init(), tllm_main(),
 * tllm_board_exit().  No CMSIS. */
#include <stddef.h>
#include <stdint.h>

#include "tllm_board.h"

#define RCC_AHB2ENR (*(volatile uint32_t *)0x580244DCu)
#define RCC_AHB2ENR_SRAM123 (7u << 29) /* SRAM1EN | SRAM2EN | SRAM3EN */
#define N_IRQ 150u

extern uint32_t __stack_top__[]; /* boards/cortex-m/linker.ld.j2 */

void tllm_board_fault(const char *what) __attribute__((noreturn));
void tllm_board_early_init(void);
void Reset_Handler(void);
void HardFault_Handler(void);
void Default_Handler(void);

typedef void (*tllm_vector_t)(void);
__attribute__((section(".vectors"), used))
const tllm_vector_t tllm_vector_table[16 + N_IRQ] = {
    [0] = (tllm_vector_t)(uintptr_t)__stack_top__,
    [1] = Reset_Handler,
    [2] = Default_Handler,   /* NMI */
    [3] = HardFault_Handler,
    [4] = HardFault_Handler, /* MemManage */
    [5] = HardFault_Handler, /* BusFault (e.g. QSPI not memory-mapped) */
    [6] = HardFault_Handler, /* UsageFault */
    [11] = Default_Handler,  /* SVCall */
    [12] = Default_Handler,  /* DebugMonitor */
    [14] = Default_Handler,  /* PendSV */
    [15] = Default_Handler,  /* SysTick */
    [16 ... 16 + N_IRQ - 1] = Default_Handler,
};

/* reset.c, before .data and .bss exist: SRAM1..3 sit in the D2 domain,
 * allocate them to the CPU before use. */
void tllm_board_early_init(void)
{
    RCC_AHB2ENR |= RCC_AHB2ENR_SRAM123;
    __asm volatile("dsb" ::: "memory");
}

void HardFault_Handler(void)
{
    tllm_board_fault("fault");
}

void Default_Handler(void)
{
    tllm_board_fault("unexpected interrupt");
}
