/* Assembler macros shared by the Cortex-M7 kernels of both weight layouts
 * (tllm_kernels_m7.c: q4x4; tllm_kernels_gguf_m7.c: q40x4 / q41x4 / q80x4).
 * Each file pastes TLLM_M7_ASM_MACROS at the head of its first top-level
 * __asm__ (GCC emits top-level asm in source order, so the file's later
 * blocks see them) and states in its own macros only what its format adds:
 * how a weight lane is made, the float part of a block, the stack layout.
 *
 * Register conventions both files keep: r0-r3 activation words, r4-r7 int32
 * sums, r9 the lane of nibble weights, r10 the mask 0x000F000F, r12 the
 * activation stream, s0-s3 the float sums; on the stack [0] the activation
 * stream's start, [4] the output pointer, [8] tiles (matvec) or rows
 * (matmat) left. */
#ifndef TLLM_M7_ASM_H
#define TLLM_M7_ASM_H

#define TLLM_M7_ASM_MACROS                                                                           \
    "    .syntax unified\n"                                                                          \
    /* a global Thumb function: name, its section (.text.name for gc-sections) */                   \
    "    .macro TLLM_FUNC name, sect\n"                                                              \
    "    .section \\sect, \"ax\", %progbits\n"                                                       \
    "    .balign 4\n"                                                                                \
    "    .global \\name\n"                                                                           \
    "    .thumb_func\n"                                                                              \
    "    .type \\name, %function\n"                                                                  \
    "\\name:\n"                                                                                      \
    "    .endm\n"                                                                                    \
    /* the callee-saved registers back (s16-s23 too when vsave), the frame gone */                   \
    "    .macro TLLM_RETURN frame, vsave\n"                                                          \
    "    add sp, sp, #\\frame\n"                                                                     \
    "    .if \\vsave\n"                                                                              \
    "    vpop {s16-s23}\n"                                                                           \
    "    .endif\n"                                                                                   \
    "    pop {r4-r11, pc}\n"                                                                         \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_MASK\n"                                                                         \
    "    movw r10, #0x000F\n"                                                                        \
    "    movt r10, #0x000F\n"                                                                        \
    "    .endm\n"                                                                                    \
    /* acc (+)= the two int16 lane products (the first of a sum: no add) */                          \
    "    .macro TLLM_SMLAD acc, lane, x, first\n"                                                    \
    "    .if \\first\n"                                                                              \
    "    smuad \\acc, \\lane, \\x\n"                                                                 \
    "    .else\n"                                                                                    \
    "    smlad \\acc, \\lane, \\x, \\acc\n"                                                          \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* r9 = nibble lane pair j of word w: bits 4j..4j+3 and 4j+16..4j+19 */                          \
    "    .macro TLLM_NIB_LANE j, w\n"                                                                \
    "    .if \\j == 0\n"                                                                             \
    "    and r9, \\w, r10\n"                                                                         \
    "    .else\n"                                                                                    \
    "    and r9, r10, \\w, lsr #(4 * \\j)\n"                                                         \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* one row's 8 nibbles (word w) against the x16 words r0-r3 */                                   \
    "    .macro TLLM_NIB_ROW acc, w, first\n"                                                        \
    "    TLLM_NIB_LANE 0, \\w\n"                                                                     \
    "    TLLM_SMLAD \\acc, r9, r0, \\first\n"                                                        \
    "    TLLM_NIB_LANE 1, \\w\n"                                                                     \
    "    smlad \\acc, r9, r1, \\acc\n"                                                               \
    "    TLLM_NIB_LANE 2, \\w\n"                                                                     \
    "    smlad \\acc, r9, r2, \\acc\n"                                                               \
    "    TLLM_NIB_LANE 3, \\w\n"                                                                     \
    "    smlad \\acc, r9, r3, \\acc\n"                                                               \
    "    .endm\n"                                                                                    \
    /* a row (tile) starts: the activation stream from its start, float sums 0 */                    \
    "    .macro TLLM_ROW_START\n"                                                                    \
    "    ldr r12, [sp, #0]\n"                                                                        \
    "    movs r0, #0\n"                                                                              \
    "    vmov s0, s1, r0, r0\n"                                                                      \
    "    vmov s2, s3, r0, r0\n"                                                                      \
    "    .endm\n"                                                                                    \
    /* matvec: the tile's 4 floats out, then the next tile (label 1) */                              \
    "    .macro TLLM_MV_NEXT_TILE\n"                                                                 \
    "    ldr r0, [sp, #4]\n"                                                                         \
    "    vstm r0!, {s0-s3}\n"                                                                        \
    "    str r0, [sp, #4]\n"                                                                         \
    "    ldr r0, [sp, #8]\n"                                                                         \
    "    subs r0, r0, #1\n"                                                                          \
    "    str r0, [sp, #8]\n"                                                                         \
    "    bne 1b\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* The P tokens' int32 sums r4.. in s4.. (vmov), converted (vcvt). */                            \
    "    .macro TLLM_SUMS_TO_S P\n"                                                                  \
    "    vmov s4, s5, r4, r5\n"                                                                      \
    "    .if \\P == 3\n"                                                                             \
    "    vmov s6, r6\n"                                                                              \
    "    .elseif \\P == 4\n"                                                                         \
    "    vmov s6, s7, r6, r7\n"                                                                      \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_CVT_SUMS P\n"                                                                   \
    "    vcvt.f32.s32 s4, s4\n"                                                                      \
    "    vcvt.f32.s32 s5, s5\n"                                                                      \
    "    .if \\P >= 3\n"                                                                             \
    "    vcvt.f32.s32 s6, s6\n"                                                                      \
    "    .endif\n"                                                                                   \
    "    .if \\P >= 4\n"                                                                             \
    "    vcvt.f32.s32 s7, s7\n"                                                                      \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* the P tokens' words at r12 into r4.. (the sums' starts) / s8.. (scales) */                    \
    "    .macro TLLM_LDM_SUMS P\n"                                                                   \
    "    .if \\P == 2\n"                                                                             \
    "    ldm r12!, {r4, r5}\n"                                                                       \
    "    .elseif \\P == 3\n"                                                                         \
    "    ldm r12!, {r4-r6}\n"                                                                        \
    "    .else\n"                                                                                    \
    "    ldm r12!, {r4-r7}\n"                                                                        \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_LDM_SX P\n"                                                                     \
    "    .if \\P == 2\n"                                                                             \
    "    vldm r12!, {s8-s9}\n"                                                                       \
    "    .elseif \\P == 3\n"                                                                         \
    "    vldm r12!, {s8-s10}\n"                                                                      \
    "    .else\n"                                                                                    \
    "    vldm r12!, {s8-s11}\n"                                                                      \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* Matmat (one row against P tokens): the x16b words rotate through K =   \
     * 9 - P registers (r0-r3, then r6 r7 lr / r7 lr / lr), one LDM per K      \
     * words. TLLM_ROT_LDM loads the next c words into the first c of them;    \
     * TLLM_ROT_MAC is the SMLAD of rotation register xi into token p's sum. */ \
    "    .macro TLLM_ROT_LDM c, K\n"                                                                 \
    "    .if \\c == 1\n"                                                                             \
    "    ldm r12!, {r0}\n"                                                                           \
    "    .elseif \\c == 2\n"                                                                         \
    "    ldm r12!, {r0, r1}\n"                                                                       \
    "    .elseif \\c == 3\n"                                                                         \
    "    ldm r12!, {r0-r2}\n"                                                                        \
    "    .elseif \\c == 4\n"                                                                         \
    "    ldm r12!, {r0-r3}\n"                                                                        \
    "    .elseif \\c == 5 && \\K == 5\n"                                                             \
    "    ldm r12!, {r0-r3, lr}\n"                                                                    \
    "    .elseif \\c == 5 && \\K == 6\n"                                                             \
    "    ldm r12!, {r0-r3, r7}\n"                                                                    \
    "    .elseif \\c == 5\n"                                                                         \
    "    ldm r12!, {r0-r3, r6}\n"                                                                    \
    "    .elseif \\c == 6 && \\K == 6\n"                                                             \
    "    ldm r12!, {r0-r3, r7, lr}\n"                                                                \
    "    .elseif \\c == 6\n"                                                                         \
    "    ldm r12!, {r0-r3, r6, r7}\n"                                                                \
    "    .else\n"                                                                                    \
    "    ldm r12!, {r0-r3, r6, r7, lr}\n"                                                            \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_ROT_MAC p, lane, xi, K, first\n"                                                \
    "    .if \\p == 0\n"                                                                             \
    "    TLLM_ROT_MACX r4, \\lane, \\xi, \\K, \\first\n"                                             \
    "    .elseif \\p == 1\n"                                                                         \
    "    TLLM_ROT_MACX r5, \\lane, \\xi, \\K, \\first\n"                                             \
    "    .elseif \\p == 2\n"                                                                         \
    "    TLLM_ROT_MACX r6, \\lane, \\xi, \\K, \\first\n"                                             \
    "    .else\n"                                                                                    \
    "    TLLM_ROT_MACX r7, \\lane, \\xi, \\K, \\first\n"                                             \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_ROT_MACX acc, lane, xi, K, first\n"                                             \
    "    .if \\xi == 0\n"                                                                            \
    "    TLLM_SMLAD \\acc, \\lane, r0, \\first\n"                                                    \
    "    .elseif \\xi == 1\n"                                                                        \
    "    TLLM_SMLAD \\acc, \\lane, r1, \\first\n"                                                    \
    "    .elseif \\xi == 2\n"                                                                        \
    "    TLLM_SMLAD \\acc, \\lane, r2, \\first\n"                                                    \
    "    .elseif \\xi == 3\n"                                                                        \
    "    TLLM_SMLAD \\acc, \\lane, r3, \\first\n"                                                    \
    "    .elseif \\xi == 4 && \\K == 7\n"                                                            \
    "    TLLM_SMLAD \\acc, \\lane, r6, \\first\n"                                                    \
    "    .elseif (\\xi == 4 && \\K == 6) || (\\xi == 5 && \\K == 7)\n"                               \
    "    TLLM_SMLAD \\acc, \\lane, r7, \\first\n"                                                    \
    "    .else\n"                                                                                    \
    "    TLLM_SMLAD \\acc, \\lane, lr, \\first\n"                                                    \
    "    .endif\n"                                                                                   \
    "    .endm\n"                                                                                    \
    /* word n of total in a rotation: its LDM when it opens one, its SMLAD */                        \
    "    .macro TLLM_ROT_WORD n, total, P, K, lane, first\n"                                         \
    "    .if ((\\n) % \\K) == 0\n"                                                                   \
    "    .if (\\total - (\\n)) >= \\K\n"                                                             \
    "    TLLM_ROT_LDM \\K, \\K\n"                                                                    \
    "    .else\n"                                                                                    \
    "    TLLM_ROT_LDM (\\total - (\\n)), \\K\n"                                                      \
    "    .endif\n"                                                                                   \
    "    .endif\n"                                                                                   \
    "    TLLM_ROT_MAC ((\\n) % \\P), \\lane, ((\\n) % \\K), \\K, \\first\n"                          \
    "    .endm\n"                                                                                    \
    /* Matmat at P = 2, nibbles: a row pair (weight words r2, r3) against two \
     * tokens; r4 r5 row 0's sums (tokens 0, 1), r6 r7 row 1's. Lane pair j   \
     * of both rows against the tokens' words xa, xb; a quarter (8 inputs):   \
     * one LDRD of the rows' words (pre-indexed by off), two LDM of two lane  \
     * pairs' words (tokens 0, 1) into r0 r1 / r8 lr, sixteen SMLAD. */       \
    "    .macro TLLM_PAIR_LANES j, xa, xb, first\n"                                                  \
    "    TLLM_NIB_LANE \\j, r2\n"                                                                    \
    "    TLLM_SMLAD r4, r9, \\xa, \\first\n"                                                         \
    "    TLLM_SMLAD r5, r9, \\xb, \\first\n"                                                         \
    "    TLLM_NIB_LANE \\j, r3\n"                                                                    \
    "    TLLM_SMLAD r6, r9, \\xa, \\first\n"                                                         \
    "    TLLM_SMLAD r7, r9, \\xb, \\first\n"                                                         \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_PAIR_QUARTER off, first\n"                                                      \
    "    ldrd r2, r3, [r11, #\\off]!\n"                                                              \
    "    ldm r12!, {r0, r1, r8, lr}\n"                                                               \
    "    TLLM_PAIR_LANES 0, r0, r1, \\first\n"                                                       \
    "    TLLM_PAIR_LANES 1, r8, lr, 0\n"                                                             \
    "    ldm r12!, {r0, r1, r8, lr}\n"                                                               \
    "    TLLM_PAIR_LANES 2, r0, r1, 0\n"                                                             \
    "    TLLM_PAIR_LANES 3, r8, lr, 0\n"                                                             \
    "    .endm\n"                                                                                    \
    /* Matmat rows go in slot-major order (every tile's row s, then s + 1...): \
     * the row's P floats out (4 * rows apart: stack [stride]), the next row   \
     * of the slot (label 1), then the next slot (label 0, stack [slot]).      \
     * TLLM_MM2_STORE: a row pair (slots s, s + 1) of two tokens, the second   \
     * row skipped where it is the last tile's padding. */                     \
    "    .macro TLLM_MM_STORE P, stride\n"                                                           \
    "    ldr r0, [sp, #4]\n"                                                                         \
    "    ldr r1, [sp, #\\stride]\n"                                                                  \
    "    vstr s0, [r0]\n"                                                                            \
    "    add r2, r0, r1\n"                                                                           \
    "    vstr s1, [r2]\n"                                                                            \
    "    .if \\P >= 3\n"                                                                             \
    "    add r2, r2, r1\n"                                                                           \
    "    vstr s2, [r2]\n"                                                                            \
    "    .endif\n"                                                                                   \
    "    .if \\P >= 4\n"                                                                             \
    "    add r2, r2, r1\n"                                                                           \
    "    vstr s3, [r2]\n"                                                                            \
    "    .endif\n"                                                                                   \
    "    adds r0, r0, #16\n"                                                                         \
    "    str r0, [sp, #4]\n"                                                                         \
    "    ldr r0, [sp, #8]\n"                                                                         \
    "    subs r0, r0, #4\n"                                                                          \
    "    str r0, [sp, #8]\n"                                                                         \
    "    bgt 1b\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_MM2_STORE stride\n"                                                             \
    "    ldr r0, [sp, #4]\n"                                                                         \
    "    ldr r1, [sp, #\\stride]\n"                                                                  \
    "    vstr s0, [r0]\n"                                                                            \
    "    add r2, r0, r1\n"                                                                           \
    "    vstr s1, [r2]\n"                                                                            \
    "    ldr r1, [sp, #8]\n"                                                                         \
    "    cmp r1, #2\n"                                                                               \
    "    blt 6f\n"                                                                                   \
    "    vstr s2, [r0, #4]\n"                                                                        \
    "    vstr s3, [r2, #4]\n"                                                                        \
    "6:  adds r0, r0, #16\n"                                                                         \
    "    str r0, [sp, #4]\n"                                                                         \
    "    subs r1, r1, #4\n"                                                                          \
    "    str r1, [sp, #8]\n"                                                                         \
    "    bgt 1b\n"                                                                                   \
    "    .endm\n"                                                                                    \
    "    .macro TLLM_MM_NEXT_SLOT slot, step\n"                                                      \
    "    ldr r0, [sp, #\\slot]\n"                                                                    \
    "    adds r0, r0, #\\step\n"                                                                     \
    "    str r0, [sp, #\\slot]\n"                                                                    \
    "    cmp r0, #4\n"                                                                               \
    "    bne 0b\n"                                                                                   \
    "    .endm\n"

#endif
