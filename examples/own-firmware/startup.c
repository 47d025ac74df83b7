/* The user's reset path for QEMU mps2-an500 (Cortex-M7): vector table,
 * FPU on, .data copied, .bss (which holds the model's arena, see
 * mps2_an500.ld) zeroed, main(), then a semihosting exit with main's status. */
#include <stdint.h>

extern uint32_t __stack_top__[], __data_load__[], __data_start__[], __data_end__[], __bss_start__[], __bss_end__[];
int main(void);
void Reset_Handler(void);
void Fault_Handler(void);
void reset_c(void) __attribute__((noreturn, used));

static void __attribute__((noreturn)) semihost_exit(uint32_t code) {
    /* SYS_EXIT_EXTENDED with ADP_Stopped_ApplicationExit: QEMU exits with `code` */
    volatile uint32_t block[2] = {0x20026u, code};
    register uint32_t r0 __asm__("r0") = 0x20u;
    register volatile uint32_t *r1 __asm__("r1") = block;
    __asm__ volatile("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)__stack_top__, Reset_Handler, Fault_Handler, Fault_Handler,
    Fault_Handler, Fault_Handler, Fault_Handler, 0, 0, 0, 0, Fault_Handler, Fault_Handler, 0,
    Fault_Handler, Fault_Handler,
};

/* The FPU must be on before the first float instruction, so this is assembly. */
__attribute__((naked)) void Reset_Handler(void) {
    __asm__ volatile("ldr r0, =0xE000ED88\n" /* CPACR: CP10, CP11 full access */
                     "ldr r1, [r0]\n"
                     "orr r1, r1, #(0xF << 20)\n"
                     "str r1, [r0]\n"
                     "dsb\n"
                     "isb\n"
                     "b reset_c\n"
                     ".ltorg\n");
}

void reset_c(void) {
    volatile uint32_t *dst = __data_start__;
    const uint32_t *src = __data_load__;
    while (dst < __data_end__) *dst++ = *src++;
    for (dst = __bss_start__; dst < __bss_end__; ++dst) *dst = 0u;
    semihost_exit((uint32_t)main());
}

void Fault_Handler(void) { semihost_exit(250u); }
