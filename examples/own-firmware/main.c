/* A user's own firmware main: its UART code, its request, the model through
 * tllm_api.h. Nothing here comes from tinyllm-gen's boards or console. */
#include <stdint.h>
#include <string.h>

#include "tllm_api.h"

/* CMSDK APB UART0 of the MPS2 AN500 (the board's "HAL"). */
#define UART0_DATA (*(volatile uint32_t *)0x40004000u)
#define UART0_STATE (*(volatile uint32_t *)0x40004004u)
#define UART0_CTRL (*(volatile uint32_t *)0x40004008u)
#define UART0_BAUDDIV (*(volatile uint32_t *)0x40004010u)

static void uart_init(void) {
    UART0_BAUDDIV = 25000000u / 115200u;
    UART0_CTRL = 0x3u; /* TX and RX enable */
}

static void uart_write(const void *buf, uint32_t n) {
    const uint8_t *p = buf;
    for (uint32_t i = 0; i < n; i++) {
        while (UART0_STATE & 0x1u) { /* TX full */
        }
        UART0_DATA = p[i];
    }
}

static void uart_puts(const char *s) { uart_write(s, (uint32_t)strlen(s)); }

static void uart_putu(uint32_t v) {
    char buf[11];
    int i = 10;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    uart_puts(buf + i);
}

/* One line per token: "tok <index> <id>". */
static int on_token(const tllm_token *t, void *user) {
    (void)user;
    uart_puts("tok ");
    uart_putu(t->index);
    uart_puts(" ");
    uart_putu((uint32_t)t->id);
    uart_puts("\n");
    return 0;
}

int main(void) {
    static const uint16_t prompt[] = {OWN_FW_PROMPT_IDS};
    uart_init();
    uart_puts("own-firmware: tllm_api ");
    uart_putu(TLLM_API_VERSION);
    uart_puts(", context ");
    uart_putu(tllm_info()->max_seq);
    uart_puts("\n");

    tllm_status s = tllm_init(NULL);
    if (s != TLLM_OK) {
        uart_puts("init failed: ");
        uart_puts(tllm_status_message(s));
        uart_puts(": ");
        uart_puts(tllm_error_detail());
        uart_puts("\n");
        return 1;
    }
    const tllm_gen_request rq = {
        .prompt_ids = prompt,
        .n_prompt = sizeof prompt / sizeof prompt[0],
        .max_new_tokens = OWN_FW_MAX_NEW,
        .temperature = (float)(OWN_FW_TEMPERATURE),
        .top_p = (float)(OWN_FW_TOP_P),
        .seed = (uint64_t)(OWN_FW_SEED),
    };
    tllm_result res;
    s = tllm_generate(&rq, on_token, NULL, &res);
    if (s != TLLM_OK) {
        uart_puts("generate failed: ");
        uart_puts(tllm_status_message(s));
        uart_puts("\n");
        return 2;
    }
    uart_puts("end reason=");
    uart_putu(res.stop_reason);
    uart_puts(" n=");
    uart_putu(res.n_generated);
    uart_puts("\ntext: ");
    for (uint32_t i = 0; i < res.n_prompt + res.n_generated; i++) {
        uint32_t n;
        const uint8_t *b = tllm_token_text(res.tokens[i], &n);
        uart_write(b, n);
    }
    uart_puts("\n");
    return 0;
}
