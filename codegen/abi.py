"""The contract between the generator and the C runtime, stated once.

Every constant both sides must agree on lives here: the weights blob's
header, the request frame's header, the q4x4 tile geometry, the firmware's
exit statuses and the ABI version.  The C side is generated from this file
into firmware/tllm_abi.h (checked in, so the runtime builds without Python;
tests/unit/test_abi.py fails when the two differ, and
`python -m tinyllm_gen.abi > firmware/tllm_abi.h` regenerates it).  The
runtime `_Static_assert`s its structs against these values; the generated
tllm_model.h `#error`s when its ABI version is not the runtime's."""
from __future__ import annotations

from dataclasses import dataclass

ABI_VERSION = 7  # bumped whenever tllm_model_api.h changes (its history is in git)

# The weights blob (blob.py): magic, version, then total/checksum/count/sha256.
BLOB_MAGIC = b"TLLMWTS1"
BLOB_VERSION = 1
BLOB_HEADER_BYTES = 64

# The request frame (protocol.py, tllm_request.h).
REQUEST_MAGIC = b"TLRQ"
REQUEST_VERSION = 3
REQUEST_HEADER_BYTES = 48
REQUEST_CRC_OFFSET = 36
REQUEST_EXIT_AFTER = 0x1  # flags bit 0: exit after this generation (UART requests)
# flags bit 1: continue the conversation the board holds (multi-turn KV reuse): the ids are the new turn's
# only, and the header's history fields name the history the board must hold (its token count and the CRC32
# of its ids as little-endian uint16), else the request is refused (TLLM_EXIT_HISTORY)
REQUEST_CONTINUE = 0x2
REQUEST_HISTORY_TOKENS_OFFSET = 40
REQUEST_HISTORY_CRC_OFFSET = 44

# The Cortex-M7 weight layout (quant/formats.py "q4x4"): rows per tile,
# inputs per packed block.
Q4X4_TILE = 4
Q4X4_BLOCK = 8
# Floats a 4-row tile kernel may write past the last token's last row of a
# batched output (tllm_matmat_q4x4 writes whole tiles): planned as slack.
TILE_SPILL = Q4X4_TILE - 1

# Batched prefill: tokens per weight pass at most (the assembly's registers
# hold four tokens' accumulators, tllm_kernels_m7.h).
MAX_BATCH = 4

# Speculative decoding (compile --speculate, lower/speculate.py): guesses per verification pass at most; the
# pass runs them with the last accepted token on the P-token buffers of the batched prefill, so P = k + 1 tokens.
SPECULATE_MAX_K = MAX_BATCH - 1
# The prompt-lookup draft (firmware/tllm_draft.h, reference/speculative.lookup_draft): the context's last
# LOOKUP_NGRAM_MAX tokens at most, LOOKUP_NGRAM_MIN at least, matched at their latest earlier place.
LOOKUP_NGRAM_MAX = 4
LOOKUP_NGRAM_MIN = 1

# sizeof(tllm_gen_state) at most: the generation state's planned buffer
# (tllm_model_api.h; the generated code _Static_asserts it).
GEN_STATE_BYTES = 64

# INT4 weight group sizes along a row's inputs (--group-size): the kernels'
# x16 blocks of 8 and the int8 activation groups divide each of them.
GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class ExitStatus:
    code: int
    macro: str
    meaning: str


# What the firmware's exit status means; faults sit at 249..254 so the
# runtime's own statuses stay small.
EXIT_STATUSES = (
    ExitStatus(0, "TLLM_EXIT_OK", "ok"),
    ExitStatus(3, "TLLM_EXIT_BAD_REQUEST", "bad request"),
    ExitStatus(4, "TLLM_EXIT_BAD_WEIGHTS", "weights blob mismatch"),
    ExitStatus(5, "TLLM_EXIT_CANARY", "arena or stack canary broken"),
    ExitStatus(6, "TLLM_EXIT_HISTORY", "continue refused: the board holds another history"),
    ExitStatus(7, "TLLM_EXIT_CONTEXT_FULL", "continue refused: the conversation would not fit the context"),
    ExitStatus(249, "TLLM_EXIT_UNEXPECTED_IRQ", "unexpected interrupt"),
    ExitStatus(250, "TLLM_EXIT_HARDFAULT", "HardFault"),
    ExitStatus(251, "TLLM_EXIT_MEMMANAGE", "MemManage fault (stack overflow?)"),
    ExitStatus(252, "TLLM_EXIT_BUSFAULT", "BusFault"),
    ExitStatus(253, "TLLM_EXIT_USAGEFAULT", "UsageFault"),
    ExitStatus(254, "TLLM_EXIT_NMI", "NMI"),
)
EXIT_CODES = {s.code: s.meaning for s in EXIT_STATUSES}


def _le32(magic: bytes) -> str:
    return f"0x{int.from_bytes(magic[:4], 'little'):08X}u"


def abi_header() -> str:
    """firmware/tllm_abi.h, exactly."""
    lines = [
        "/* Generated from codegen/abi.py by `python -m tinyllm_gen.abi` -- do not edit.",
        " * The constants the generator and the runtime must agree on; the runtime",
        " * _Static_asserts its structs against them. */",
        "#ifndef TLLM_ABI_H",
        "#define TLLM_ABI_H",
        "",
        f"#define TLLM_ABI_VERSION {ABI_VERSION}",
        "",
        "/* weights blob (codegen/blob.py) */",
        f'#define TLLM_BLOB_MAGIC "{BLOB_MAGIC.decode()}"',
        f"#define TLLM_BLOB_MAGIC_BYTES {len(BLOB_MAGIC)}u",
        f"#define TLLM_BLOB_VERSION {BLOB_VERSION}u",
        f"#define TLLM_BLOB_HEADER_BYTES {BLOB_HEADER_BYTES}u",
        "",
        "/* request frame (codegen/protocol.py) */",
        f"#define TLLM_REQUEST_MAGIC {_le32(REQUEST_MAGIC)} /* \"{REQUEST_MAGIC.decode()}\" read little-endian */",
        f"#define TLLM_REQUEST_VERSION {REQUEST_VERSION}u",
        f"#define TLLM_REQUEST_HEADER_BYTES {REQUEST_HEADER_BYTES}u",
        f"#define TLLM_REQUEST_CRC_OFFSET {REQUEST_CRC_OFFSET}u",
        f"#define TLLM_REQUEST_EXIT_AFTER 0x{REQUEST_EXIT_AFTER:X}u",
        f"#define TLLM_REQUEST_CONTINUE 0x{REQUEST_CONTINUE:X}u /* the new turn of the conversation the board holds */",
        f"#define TLLM_REQUEST_HISTORY_TOKENS_OFFSET {REQUEST_HISTORY_TOKENS_OFFSET}u",
        f"#define TLLM_REQUEST_HISTORY_CRC_OFFSET {REQUEST_HISTORY_CRC_OFFSET}u",
        "",
        "/* q4x4 weight layout (codegen/quant/formats.py) */",
        f"#define TLLM_Q4X4_TILE {Q4X4_TILE}u",
        f"#define TLLM_Q4X4_BLOCK {Q4X4_BLOCK}u",
        f"#define TLLM_TILE_SPILL {TILE_SPILL} /* floats a 4-row tile kernel may write past a batch's last row */",
        "",
        "/* INT4 weight group sizes (--group-size) */",
        "#define TLLM_GROUP_SIZE_OK(g) (" + " || ".join(f"(g) == {g}" for g in GROUP_SIZES) + ")",
        "",
        "/* batched prefill: tokens per weight pass at most (codegen/lower/prefill.py) */",
        f"#define TLLM_MAX_BATCH {MAX_BATCH}",
        "",
        "/* speculative decoding: guesses per verification pass at most; the prompt-lookup draft's n-grams */",
        f"#define TLLM_SPECULATE_MAX_K {SPECULATE_MAX_K}",
        f"#define TLLM_LOOKUP_NGRAM_MAX {LOOKUP_NGRAM_MAX}",
        f"#define TLLM_LOOKUP_NGRAM_MIN {LOOKUP_NGRAM_MIN}",
        "",
        "/* the generation state's planned buffer: sizeof(tllm_gen_state) at most (tllm_model_api.h) */",
        f"#define TLLM_GEN_STATE_BYTES {GEN_STATE_BYTES}u",
        "",
        "/* exit statuses */",
    ]
    width = max(len(s.macro) for s in EXIT_STATUSES)
    lines += [f"#define {s.macro.ljust(width)} {s.code} /* {s.meaning} */" for s in EXIT_STATUSES]
    lines += ["", "#endif", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(abi_header(), end="")
