"""Which functions the firmware headers declare, and which of them must be in
the registry.

KERNEL_HEADERS hold the kernels: every function they declare (a prototype
or a static inline definition; tllm_math.h's helpers are not tllm_-prefixed)
needs a registry entry or a line in EXCLUDED saying why not.  Every other
header in firmware/ must be in OTHER_HEADERS with the reason it holds no
kernel, so a new header cannot slip past the check either."""
from __future__ import annotations

import re
from pathlib import Path

KERNEL_HEADERS = ("tllm_kernels.h", "tllm_kernels_m7.h", "tllm_kernels_gguf.h", "tllm_kernels_gguf_m7.h", "tllm_cmsis.h",
                  "tllm_sampler.h", "tllm_math.h", "tllm_topk.h", "tllm_draft.h", "tllm_verify.h")

OTHER_HEADERS = {
    "tllm_abi.h": "constants shared with codegen/abi.py (tests/unit/test_abi.py); no functions",
    "tllm_api.h": "the C API for a user's own main (init, generate, status text): tests/emu/test_own_firmware.py",
    "tllm_crc32.h": "CRC32 (zlib's) for request frames, console lines and the engine's history CRC, not a model "
                    "kernel: zlib.crc32 is its twin (tests/fuzz/test_frame_property.py, tests/host/"
                    "test_multiturn_host.py)",
    "tllm_board.h": "board hooks (console, clock, exit, copies), one implementation per board: the firmware tiers",
    "tllm_frame.h": "console framing and CRC lines: tests/emu/test_protocol_recovery.py, test_uart_protocol.py",
    "tllm_m7_asm.h": "assembler macros (a string) pasted into tllm_kernels_m7.c's and tllm_kernels_gguf_m7.c's "
                     "inline assembly; their kernels are registered (entries_m7.py, entries_gguf_m7.py)",
    "tllm_model_api.h": "what the generated model exports to the engine: every firmware run",
    "tllm_numerics.h": "compiler pragmas and #errors of the numerics contract; no functions",
    "tllm_request.h": "the request header parser: tests/emu/test_protocol_recovery.py",
    "tllm_stream.h": "weight streaming plumbing around the q4x4 kernels (board copies, chunk table): "
                     "tests/host/test_stream_host.py, tests/emu/test_stream_emu.py",
}

# Functions of a kernel header with no registry entry, and why.
EXCLUDED: dict[str, str] = {
    "tllm_model_draft": "runs the draft model through its table's function pointers (tllm_draft_model), which "
                        "spec.py's argument types cannot carry; its twin reference/draft.DraftModel.propose is "
                        "compared token by token and pass by pass in tests/host/test_draft_engine_host.py",
    "tllm_draft_model_shift": "moves the draft's cache through its own roll->shift (the KV shift kernels, "
                              "registered) and copies ids, no arithmetic: its steps through a rolling context "
                              "are the reference's in tests/host/test_draft_engine_host.py",
    "tllm_draft_model_problem": "reads the target's and the draft's info tables and bounds-checks the id "
                                "tables, no arithmetic: tests/host/test_draft_engine_host.py has a draft refused "
                                "by it, tests/host/test_speculate_draft_tree_host.py a pruned draft accepted",
    "tllm_draft_id": "one table lookup (NULL: the id itself), no arithmetic: a vocabulary-pruned draft tree's "
                     "tokens and passes equal the reference's in tests/host/test_speculate_draft_tree_host.py",
    "tllm_draft_model_samples": "reads the target's and the draft's info tables, no arithmetic: "
                                "tests/host/test_draft_engine_host.py has a greedy-only draft refused by it",
    "tllm_draft_model_token": "calls the draft's table (its argmax, top-K set, sampler scratch), then tllm_dist_full "
                              "/ tllm_dist_topk / tllm_dist_draw / tllm_dist_at, which are registered "
                              "(entries_draft.py); compared pass by pass in tests/host/test_draft_engine_host.py",
    "tllm_model_draft_q": "steps the draft model through its table's function pointers, then tllm_dist_full / "
                          "tllm_dist_topk (registered, entries_draft.py); its result decides every residual draw "
                          "of tests/host/test_draft_engine_host.py's sampled cases",
    "tllm_draft_model_arm": "calls the draft's guard-word function through its table, no arithmetic: "
                            "tests/host/test_speculate_draft_tree_host.py fails (canary broken) without it",
    "tllm_draft_model_intact": "calls the draft's guard-word check through its table, no arithmetic: its result "
                               "is the console's region \"draft\" in tests/host/test_speculate_draft_tree_host.py",
    "tllm_topk_gguf": "takes the block matvec as a function pointer (tllm_gguf_matvec_fn), which spec.py's argument "
                      "types cannot carry; its whole body runs through tllm_topk_q40 / q41 / q80, which are "
                      "registered (entries_topk.py)",
    "tllm_verify_gguf": "takes the block kernels' batched matmul as a function pointer (tllm_gguf_matmat_fn), which "
                        "spec.py's argument types cannot carry; its whole body runs through tllm_argmax_batch_q40 / "
                        "q41 / q80 and tllm_topk_batch_q40 / q41 / q80, which are registered (entries_verify.py)",
    "tllm_verify_argmax_chunks": "a per-token loop over argmax_chunk (entries_math.py), run inside every "
                                 "tllm_argmax_batch_* case (entries_verify.py)",
    "tllm_verify_topk_chunks": "a per-token loop over tllm_topk_push (entries_topk.py), run inside every "
                               "tllm_topk_batch_* case (entries_verify.py)",
    "tllm_verify_chunks": "tllm_verify_argmax_chunks or tllm_verify_topk_chunks by whether a race is given: run "
                          "inside every tllm_argmax_batch_* and tllm_topk_batch_* case (entries_verify.py)",
    "tllm_verify_q4": "the q4 chunk loop behind tllm_argmax_batch_q4 and tllm_topk_batch_q4, which are registered "
                      "(entries_verify.py)",
    "tllm_verify_q4x4": "the q4x4 chunk loop behind tllm_argmax_batch_q4x4 and tllm_topk_batch_q4x4, which are "
                        "registered (entries_verify.py)",
    "tllm_verify_ggufx4": "tllm_verify_gguf's loop for the tiled GGUF layouts, its batched matmul and tile size "
                          "function pointers (tllm_ggufx4_matmat_fn, tllm_ggufx4_tile_bytes_fn); registered through "
                          "tllm_argmax_batch_q40x4 / q41x4 / q80x4 and tllm_topk_batch_q40x4 / q41x4 / q80x4 "
                          "(entries_verify.py)",
    "tllm_argmax_batch_ggufx4": "tllm_verify_ggufx4 for a race, the same function pointers; registered as above",
    "tllm_topk_batch_ggufx4": "tllm_verify_ggufx4 for the sets, the same function pointers; registered as above",
    "tllm_topk_ggufx4": "the same loop for the tiled GGUF layouts, its matvec a function pointer "
                        "(tllm_ggufx4_matvec_fn); registered through tllm_topk_q40x4 / q41x4 / q80x4 (entries_topk.py)",
}

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*\($")


def declared_functions(text: str) -> list[str]:
    """Names of the functions a C header declares or defines at file scope,
    in order: prototypes and (static inline) definitions; typedefs,
    structs, enums, _Static_asserts and macros are not functions."""
    text = _ATTRIBUTE.sub(" ", _COMMENT.sub(" ", text))
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    names, chunk, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "{" and re.search(r'extern\s+"C"\s*$', chunk):  # C++ linkage block: its body is file scope
            chunk = ""
        elif c in ";{":
            head = chunk.strip().lstrip("}").strip()
            is_function = "(" in head and not re.match(r"(typedef|_Static_assert|static_assert)\b", head)
            if c == "{":  # a function body, or a struct / enum / initializer: skip to its closing brace
                depth = 1
                while depth and i + 1 < len(text):
                    i += 1
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                if not is_function:
                    i += 1
                    continue  # `typedef struct {...} name;`: the rest up to `;` is dropped below
            if is_function:
                m = _NAME_BEFORE_PAREN.search(head[: head.index("(") + 1])
                if m:
                    names.append(m.group(1))
            chunk = ""
        else:
            chunk += c
        i += 1
    return names


def kernel_functions(firmware: Path) -> dict[str, str]:
    """Every function of the kernel headers -> its header."""
    out = {}
    for h in KERNEL_HEADERS:
        for name in declared_functions((firmware / h).read_text()):
            out.setdefault(name, h)
    return out


def unclassified_headers(firmware: Path) -> list[str]:
    return sorted(p.name for p in firmware.glob("*.h") if p.name not in KERNEL_HEADERS and p.name not in OTHER_HEADERS)


def registry_problems(firmware: Path, registry) -> list[str]:
    """Everything the completeness check refuses, one line each."""
    declared = kernel_functions(firmware)
    names = [k.name for k in registry]
    problems = [f"firmware/{h}: not in headers.KERNEL_HEADERS nor OTHER_HEADERS (say which, and why)"
                for h in unclassified_headers(firmware)]
    problems += [f"{fn} ({h}) has no registry entry: add one (kernel_registry/__init__.py says how) or a reason in "
                 f"headers.EXCLUDED" for fn, h in declared.items() if fn not in names and fn not in EXCLUDED]
    for k in registry:
        if k.name not in declared:
            problems.append(f"registry entry {k.name}: no kernel header declares it")
        elif declared[k.name] != k.header:
            problems.append(f"registry entry {k.name}: says {k.header}, declared in {declared[k.name]}")
        if not k.cases:
            problems.append(f"registry entry {k.name}: no case")
        labels = [c.label for c in k.cases]
        if len(set(labels)) != len(labels):
            problems.append(f"registry entry {k.name}: case labels repeat")
        if k.name in EXCLUDED:
            problems.append(f"{k.name} is both registered and excluded")
    problems += [f"headers.EXCLUDED names {fn}, which no kernel header declares" for fn in EXCLUDED if fn not in declared]
    return problems
