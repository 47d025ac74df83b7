/* WeAct MiniSTM32H750: console on USART1, PA9 TX / PA10 RX (AF7) on the
 * header.  Values mirror board.json "uart"/"request". */
#ifndef TLLM_BOARD_CONFIG_H
#define TLLM_BOARD_CONFIG_H

#define TLLM_UART_BASE 0x40011000u       /* USART1 */
#define TLLM_UART_RCC_ENR_OFFSET 0x0F0u  /* RCC_APB2ENR */
#define TLLM_UART_RCC_ENR_BIT 4u         /* USART1EN */
#define TLLM_UART_GPIO_BASE 0x58020000u  /* GPIOA */
#define TLLM_UART_GPIO_RCC_BIT 0u        /* RCC_AHB4ENR GPIOAEN */
#define TLLM_UART_TX_PIN 9u
#define TLLM_UART_RX_PIN 10u
#define TLLM_UART_AF 7u
#define TLLM_UART_KERNEL_HZ 64000000u    /* rcc_pclk2 at reset: HSI 64 MHz, no prescaler */
#define TLLM_UART_BAUD 115200u
#define TLLM_REQUEST_ADDR 0x907FC000u    /* last 16 KiB of the 8 MB W25Q64 window */

#endif
