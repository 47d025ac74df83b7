/* Reset path and vectors for the STM32H750 boards (Cortex-M7).
 *
 * Reset_Handler enables the FPU, then tllm_reset_c: D2 SRAM clocks on,
 * .data copied, .bss zeroed, tllm_board_bringup() (bringup.c: 480 MHz
 * clocks, QUADSPI memory-mapped, caches), every planned arena zeroed (the
 * linker's zero table lists them), the stack painted for
 * tllm_board_stack_peak(), then tllm_board_init(), tllm_main(),
 * tllm_board_exit().  No CMSIS. */
#include <stddef.h>
#include <stdint.h>

#include "tllm_board.h"

#define RCC_AHB2ENR (*(volatile uint32_t *)0x580244DCu)
#define RCC_AHB2ENR_SRAM123 (7u << 29) /* SRAM1EN | SRAM2EN | SRAM3EN */
#define STACK_CANARY 0xC5C5C5C5u
#define N_IRQ 150u

extern uint32_t __stack_limit__[];
extern uint32_t __stack_top__[];
extern uint32_t __data_load__[];
extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t *__zero_table_start__[];
extern uint32_t *__zero_table_end__[];
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);

void tllm_board_fault(const char *what) __attribute__((noreturn));
void tllm_board_bringup(void);
void Reset_Handler(void);
void tllm_reset_c(void) __attribute__((noreturn, used));
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

/* Reset_Handler (boards/cortex-m/reset.c) enables the FPU, then jumps here. */
void tllm_reset_c(void)
{
    /* SRAM1..3 sit in the D2 domain: allocate them to the CPU before use. */
    RCC_AHB2ENR |= RCC_AHB2ENR_SRAM123;
    __asm volatile("dsb" ::: "memory");

    volatile uint32_t *dst = __data_start__;
    const uint32_t *src = __data_load__;
    while (dst < __data_end__) {
        *dst++ = *src++;
    }
    for (dst = __bss_start__; dst < __bss_end__; ++dst) {
        *dst = 0u;
    }
    tllm_board_bringup();
    for (uint32_t **z = __zero_table_start__; z < __zero_table_end__; z += 2) {
        for (dst = z[0]; dst < z[1]; ++dst) {
            *dst = 0u;
        }
    }
    uint32_t sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    for (dst = __stack_limit__; (uintptr_t)dst < (uintptr_t)sp - 64u; ++dst) {
        *dst = STACK_CANARY;
    }
    for (void (**f)(void) = __init_array_start; f < __init_array_end; ++f) {
        (*f)();
    }
    tllm_board_init();
    tllm_board_exit(tllm_main());
}

size_t tllm_board_stack_peak(void)
{
    const uint32_t *p = __stack_limit__;
    while (p < __stack_top__ && *p == STACK_CANARY) {
        ++p;
    }
    return (size_t)((uintptr_t)__stack_top__ - (uintptr_t)p);
}

void HardFault_Handler(void)
{
    tllm_board_fault("fault");
}

void Default_Handler(void)
{
    tllm_board_fault("unexpected interrupt");
}
