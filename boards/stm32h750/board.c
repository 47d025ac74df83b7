/* Board services for the STM32H750 boards: a polled USART console (which
 * USART and pins: board_config.h), the DWT cycle counter, the request block
 * flashed next to the weights in QSPI, and an exit that reports its status
 * on the console and parks the core (no debugger to hand it to). */
#include <stddef.h>
#include <stdint.h>

#include "board_config.h"
#include "tllm_abi.h" /* TLLM_EXIT_* */
#include "tllm_board.h"

#define REG(addr) (*(volatile uint32_t *)(addr))
#define RCC_BASE 0x58024400u
#define RCC_AHB4ENR REG(RCC_BASE + 0x0E0u)
#define RCC_UART_ENR REG(RCC_BASE + TLLM_UART_RCC_ENR_OFFSET)
#define GPIO_MODER REG(TLLM_UART_GPIO_BASE + 0x00u)
#define GPIO_AFR(pin) REG(TLLM_UART_GPIO_BASE + ((pin) < 8u ? 0x20u : 0x24u))
#define USART_CR1 REG(TLLM_UART_BASE + 0x00u)
#define USART_BRR REG(TLLM_UART_BASE + 0x0Cu)
#define USART_ISR REG(TLLM_UART_BASE + 0x1Cu)
#define USART_TDR REG(TLLM_UART_BASE + 0x28u)
#define USART_RDR REG(TLLM_UART_BASE + 0x24u)
#define USART_CR1_RE 0x4u
#define USART_ISR_RXNE 0x20u
#define USART_ISR_ORE 0x8u
#define USART_ICR REG(TLLM_UART_BASE + 0x20u)
#define USART_ICR_ORECF 0x8u
#define USART_CR1_UE 0x1u
#define USART_CR1_TE 0x8u
#define USART_ISR_TXE 0x80u

/* DWT cycle counter (the M7 needs its lock access register opened). */
#define DEMCR REG(0xE000EDFCu)
#define DWT_CTRL REG(0xE0001000u)
#define DWT_CYCCNT REG(0xE0001004u)
#define DWT_LAR REG(0xE0001FB0u)

#define REQUEST_MAGIC 0x51524C54u /* "TLRQ" */

extern uint32_t tllm_bringup_pclk_hz; /* bringup.c; 0 until the PLL runs */

static int uart_ready;
static uint32_t cyc_last;
static uint64_t cyc_total;

static void pin_af(uint32_t pin)
{
    GPIO_MODER = (GPIO_MODER & ~(3u << (2u * pin))) | (2u << (2u * pin));
    const uint32_t shift = 4u * (pin & 7u);
    GPIO_AFR(pin) = (GPIO_AFR(pin) & ~(0xFu << shift)) | (TLLM_UART_AF << shift);
}

static void uart_init(void)
{
    RCC_AHB4ENR |= 1u << TLLM_UART_GPIO_RCC_BIT;
    RCC_UART_ENR |= 1u << TLLM_UART_RCC_ENR_BIT;
    (void)RCC_UART_ENR; /* read back: the clock is on before the first access */
    pin_af(TLLM_UART_TX_PIN);
    pin_af(TLLM_UART_RX_PIN);
    USART_CR1 = 0u;
    const uint32_t kernel_hz = tllm_bringup_pclk_hz ? tllm_bringup_pclk_hz : TLLM_UART_KERNEL_HZ;
    USART_BRR = (kernel_hz + TLLM_UART_BAUD / 2u) / TLLM_UART_BAUD;
    USART_CR1 = USART_CR1_UE | USART_CR1_TE | USART_CR1_RE;
    uart_ready = 1;
}

void tllm_board_init(void)
{
    uart_init();
    DEMCR |= 1u << 24; /* TRCENA */
    DWT_LAR = 0xC5ACCE55u;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= 1u;
    cyc_last = 0u;
    cyc_total = 0u;
}

void tllm_board_write(const char *buf, size_t n)
{
    if (!uart_ready) {
        uart_init();
    }
    for (size_t i = 0; i < n; ++i) {
        while (!(USART_ISR & USART_ISR_TXE)) {
        }
        USART_TDR = (uint32_t)(unsigned char)buf[i];
    }
}

/* Polled receive of a request sent over the console USART (pyserial). */
int tllm_board_read(uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        while (!(USART_ISR & USART_ISR_RXNE)) {
            if (USART_ISR & USART_ISR_ORE) { /* a byte was lost: the request is unusable */
                USART_ICR = USART_ICR_ORECF;
                return -1;
            }
        }
        buf[i] = (uint8_t)USART_RDR;
    }
    return 0;
}

/* One byte with a timeout in DWT cycles of the core clock (4 x the APB
 * clock bringup.c set up; the reset clock before it). */
int tllm_board_read_byte(uint8_t *c, uint32_t timeout_ms)
{
    const uint32_t core_hz = tllm_bringup_pclk_hz ? 4u * tllm_bringup_pclk_hz : TLLM_UART_KERNEL_HZ;
    const uint64_t limit = (uint64_t)timeout_ms * (core_hz / 1000u);
    const uint64_t start = tllm_board_instret();
    while (!(USART_ISR & USART_ISR_RXNE)) {
        if (USART_ISR & USART_ISR_ORE) {
            USART_ICR = USART_ICR_ORECF;
            return 2;
        }
        if (timeout_ms != 0u && tllm_board_instret() - start >= limit) {
            return 1;
        }
    }
    *c = (uint8_t)USART_RDR;
    return 0;
}

int tllm_board_can_count(void)
{
    return 1;
}

/* Core cycles (not instructions) on hardware; 64-bit across CYCCNT wraps as
 * long as it is read at least once per 2^32 cycles (8.9 s at 480 MHz): the
 * engine reads it after every pass over the weights. */
uint64_t tllm_board_instret(void)
{
    const uint32_t now = DWT_CYCCNT;
    cyc_total += (uint32_t)(now - cyc_last);
    cyc_last = now;
    return cyc_total;
}

const uint8_t *tllm_board_request(size_t *len)
{
    const volatile uint32_t *hdr = (const volatile uint32_t *)TLLM_REQUEST_ADDR;
    const uint32_t total = hdr[1];
    if (hdr[0] != REQUEST_MAGIC || total < 8u || total > TLLM_REQUEST_MAX) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)total;
    return (const uint8_t *)TLLM_REQUEST_ADDR;
}

static void put_status(int code)
{
    char buf[4] = {0, 0, 0, 0};
    int i = 3;
    uint32_t v = (uint32_t)code & 0xFFu;
    do {
        buf[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    tllm_board_write(buf + i, (size_t)(3 - i));
}

void tllm_board_exit(int code)
{
    static const char msg[] = "@TLLM exit ";
    tllm_board_write(msg, sizeof msg - 1u);
    put_status(code);
    tllm_board_write("\n", 1u);
    for (;;) {
        __asm volatile("wfi");
    }
}

void tllm_board_fault(const char *what) __attribute__((noreturn));
void tllm_board_fault(const char *what)
{
    static const char msg[] = "\n*** ";
    tllm_board_write(msg, sizeof msg - 1u);
    size_t n = 0;
    while (what[n] != '\0') {
        ++n;
    }
    tllm_board_write(what, n);
    tllm_board_write("\n", 1u); /* the exit line starts a line of its own, as the host's parser expects */
    tllm_board_exit(TLLM_EXIT_HARDFAULT);
}
