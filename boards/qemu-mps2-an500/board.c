/* Board services for QEMU mps2-an500: CMSDK UART0 console, CMSDK TIMER0 as
 * an instruction counter (exact under -icount shift=0: one tick per 40
 * instructions), semihosting exit, and the request block the host loads into
 * PSRAM.  Also the few newlib syscalls, so stdio and abort() behave. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "board_config.h" /* generated from board.json: tick rate, request block */
#include "tllm_abi.h" /* TLLM_EXIT_* */
#include "tllm_board.h"

/* CMSDK APB UART0. */
#define UART0_BASE 0x40004000u
#define UART_DATA (*(volatile uint32_t *)(UART0_BASE + 0x00u))
#define UART_STATE (*(volatile uint32_t *)(UART0_BASE + 0x04u))
#define UART_CTRL (*(volatile uint32_t *)(UART0_BASE + 0x08u))
#define UART_BAUDDIV (*(volatile uint32_t *)(UART0_BASE + 0x10u))
#define UART_STATE_TXFULL 0x1u
#define UART_STATE_RXFULL 0x2u
#define UART_CTRL_TXEN 0x1u
#define UART_CTRL_RXEN 0x2u

/* CMSDK APB TIMER0: 32-bit down counter clocked at 25 MHz. */
#define TIMER0_BASE 0x40000000u
#define TIMER_CTRL (*(volatile uint32_t *)(TIMER0_BASE + 0x00u))
#define TIMER_VALUE (*(volatile uint32_t *)(TIMER0_BASE + 0x04u))
#define TIMER_RELOAD (*(volatile uint32_t *)(TIMER0_BASE + 0x08u))
#define TIMER_CTRL_EN 0x1u

#define PCLK_HZ 25000000u
#define BAUD 115200u

/* The request block (TLLM_REQUEST_ADDR, TLLM_REQUEST_MAX bytes): 'TLRQ',
 * uint32 total length (header included), body. */
#define REQUEST_MAGIC 0x51524C54u /* "TLRQ" read as a little-endian uint32 */

/* Semihosting. */
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

static int uart_ready;
static uint32_t timer_last;  /* last TIMER_VALUE seen */
static uint64_t timer_ticks; /* ticks elapsed up to timer_last */

static void uart_init(void)
{
    UART_BAUDDIV = PCLK_HZ / BAUD;
    UART_CTRL = UART_CTRL_TXEN | UART_CTRL_RXEN;
    /* QEMU's UART model asks its socket for input again on a DATA read, not
     * when RX is enabled: one read (the receive buffer is empty this early:
     * nothing is taken while RX is off) makes it listen from the start. */
    (void)UART_DATA;
    uart_ready = 1;
}

/* Between two polls of a device register the core spins on registers alone.
 * Under QEMU every device read takes the emulator's global lock, which the
 * thread that delivers the host's bytes needs too: polled back to back, a
 * busy host machine kept that thread from the lock for minutes. */
static void poll_pause(void)
{
    for (uint32_t i = 0; i < 256u; ++i) {
        __asm volatile("nop");
    }
}

static void uart_putc(char c)
{
    while (UART_STATE & UART_STATE_TXFULL) {
        poll_pause();
    }
    UART_DATA = (uint32_t)(unsigned char)c;
}

void tllm_board_init(void)
{
    uart_init();
    TIMER_CTRL = 0u;
    TIMER_RELOAD = 0xFFFFFFFFu;
    TIMER_VALUE = 0xFFFFFFFFu;
    timer_last = 0xFFFFFFFFu;
    timer_ticks = 0u;
    TIMER_CTRL = TIMER_CTRL_EN;
}

void tllm_board_write(const char *buf, size_t n)
{
    if (!uart_ready) {
        uart_init();
    }
    for (size_t i = 0; i < n; ++i) {
        uart_putc(buf[i]);
    }
}

/* For the fault handlers in startup.c: works before tllm_board_init(). */
void tllm_board_fault_puts(const char *s);
void tllm_board_fault_puts(const char *s)
{
    size_t n = 0;
    while (s[n] != '\0') {
        ++n;
    }
    tllm_board_write(s, n);
}

/* A broken runtime contract (boards/common/copy_sync.c): one line, then stop. */
void tllm_board_fault(const char *why)
{
    tllm_board_fault_puts("\n*** ");
    tllm_board_fault_puts(why);
    tllm_board_fault_puts("\n");
    tllm_board_exit(TLLM_EXIT_MEMMANAGE);
}

int tllm_board_can_count(void)
{
    return 1;
}

/* The 32-bit timer wraps every 2^32 ticks (about 1.7e11 instructions); the
 * 64-bit total stays right as long as this is called at least that often. */
uint64_t tllm_board_instret(void)
{
    uint32_t now = TIMER_VALUE;
    timer_ticks += (uint32_t)(timer_last - now); /* down counter, mod 2^32 */
    timer_last = now;
    return timer_ticks * TLLM_INSTR_PER_TICK;
}

/* Polled UART receive (a request sent by the host over the serial link). */
int tllm_board_read(uint8_t *buf, size_t n)
{
    if (!uart_ready) {
        uart_init();
    }
    for (size_t i = 0; i < n; ++i) {
        while (!(UART_STATE & UART_STATE_RXFULL)) {
            poll_pause();
        }
        buf[i] = (uint8_t)UART_DATA;
    }
    return 0;
}

/* One byte with a timeout counted in TIMER0 ticks (25 MHz: emulated time
 * under -icount, host time without it); the UART model holds bytes back
 * while RXFULL is set, so none are lost. */
int tllm_board_read_byte(uint8_t *c, uint32_t timeout_ms)
{
    if (!uart_ready) {
        uart_init();
    }
    const uint64_t limit = (uint64_t)timeout_ms * (PCLK_HZ / 1000u) * TLLM_INSTR_PER_TICK;
    const uint64_t start = tllm_board_instret();
    while (!(UART_STATE & UART_STATE_RXFULL)) {
        if (timeout_ms != 0u && tllm_board_instret() - start >= limit) {
            return 1;
        }
        poll_pause();
    }
    *c = (uint8_t)UART_DATA;
    return 0;
}

const uint8_t *tllm_board_request(size_t *len)
{
    const volatile uint32_t *hdr = (const volatile uint32_t *)TLLM_REQUEST_ADDR;
    uint32_t total = hdr[1];
    if (hdr[0] != REQUEST_MAGIC || total < 8u || total > TLLM_REQUEST_MAX) {
        if (len != NULL) {
            *len = 0;
        }
        return NULL;
    }
    if (len != NULL) {
        *len = (size_t)total;
    }
    return (const uint8_t *)TLLM_REQUEST_ADDR;
}

static uint32_t semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void tllm_board_exit(int code)
{
    const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code & 0xFFu};
    for (;;) {
        (void)semihost(SYS_EXIT_EXTENDED, block);
    }
}

/* ---- newlib syscalls (stdout/stderr to the UART, no heap, no files) ---- */

int _write(int fd, const char *buf, int n);
int _read(int fd, char *buf, int n);
int _close(int fd);
int _lseek(int fd, int off, int whence);
int _fstat(int fd, struct stat *st);
int _isatty(int fd);
void *_sbrk(ptrdiff_t incr);
int _getpid(void);
int _kill(int pid, int sig);
void _exit(int code) __attribute__((noreturn));

int _write(int fd, const char *buf, int n)
{
    if (fd != 1 && fd != 2) {
        errno = EBADF;
        return -1;
    }
    tllm_board_write(buf, (size_t)n);
    return n;
}

int _read(int fd, char *buf, int n)
{
    (void)fd;
    (void)buf;
    (void)n;
    return 0;
}

int _close(int fd)
{
    (void)fd;
    errno = EBADF;
    return -1;
}

int _lseek(int fd, int off, int whence)
{
    (void)fd;
    (void)off;
    (void)whence;
    errno = ESPIPE;
    return -1;
}

int _fstat(int fd, struct stat *st)
{
    (void)fd;
    st->st_mode = S_IFCHR;
    return 0;
}

int _isatty(int fd)
{
    (void)fd;
    return 1;
}

/* No heap: the generated firmware allocates statically. malloc returns NULL. */
void *_sbrk(ptrdiff_t incr)
{
    (void)incr;
    errno = ENOMEM;
    return (void *)-1;
}

int _getpid(void)
{
    return 1;
}

/* raise()/abort(): exit with 128 + signal, as a shell would report it. */
int _kill(int pid, int sig)
{
    (void)pid;
    tllm_board_exit(128 + sig);
}

void _exit(int code)
{
    tllm_board_exit(code);
}
