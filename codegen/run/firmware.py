"""Run a built OUT: write the request, boot the image on its board's
runner (board.json "run": host, QEMU or Unicorn; Renode or a flashed board
on request) and parse the console protocol."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..board import Board, load_board
from ..build.out import image_path, read_manifest
from ..errors import UserError, read_json
from ..reference.sampler import SamplingOptions
from .console import run_serial
from .host import run_host
from .qemu import run_qemu, run_qemu_serial
from .renode import run_renode
from .result import RunResult
from .unicorn import run_unicorn_board
from .protocol import EXIT_CODES, REQUEST_EXIT_AFTER, FirmwareOutput, pack_request, parse_output


@dataclass(frozen=True)
class RunJob:
    """One generation for a runner: the image, its board, the weights blob
    and the request file; `uart` sends the request over the console (as to a
    real board) instead of placing it in the board's request block."""

    image: Path
    board: Board
    weights: Path
    request: Path
    uart: bool
    on_line: Callable[[str], None] | None = None  # sees each console line as it arrives
    max_instructions: int | None = None  # the emulated run's guest-instruction bound (None: unbounded)


def _run_on_host(job: RunJob, timeout_s: float) -> RunResult:
    return run_host(job.image, None if job.uart else job.request, timeout_s=timeout_s,
                    stdin_bytes=job.request.read_bytes() if job.uart else None, on_line=job.on_line)


def _run_on_qemu(job: RunJob, timeout_s: float) -> RunResult:
    if job.uart:
        return run_qemu_serial(job.image, job.board, job.weights, job.request.read_bytes(), timeout_s=timeout_s,
                               on_line=job.on_line, max_instructions=job.max_instructions)
    result = run_qemu(job.image, job.board, job.weights, job.request, timeout_s=timeout_s,
                      max_instructions=job.max_instructions)
    if job.on_line is not None:  # QEMU's memory transport: the console file is read after the run
        for line in result.output.split("\n"):
            job.on_line(line)
    return result


def _run_on_unicorn(job: RunJob, timeout_s: float) -> RunResult:
    return run_unicorn_board(job.image, job.board, job.weights, job.request,
                             job.request.read_bytes() if job.uart else b"", timeout_s=timeout_s, on_line=job.on_line,
                             max_instructions=job.max_instructions)


# board.json "run": {"emulator": NAME} picks one; a new emulator is one entry here.
RUNNERS = {"host": _run_on_host, "qemu": _run_on_qemu, "unicorn": _run_on_unicorn}


@dataclass(frozen=True)
class FirmwareRun:
    result: RunResult
    output: FirmwareOutput


def instruction_bound(out: Path, tokens: int) -> int | None:
    """The guest instructions an emulated run of `tokens` tokens may take (report.json's
    instruction_bound, emit/render.run_bound); None for a tree compiled before it was recorded."""
    doc = read_json(Path(out) / "report.json", "report.json")
    bound = doc.get("instruction_bound") if isinstance(doc, dict) else None
    if not isinstance(bound, dict):
        return None
    return int(bound["boot"]) + int(bound["per_token"]) * (tokens + 1)


def run_firmware(out: Path, prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 timeout_s: float = 600, transport: str = "memory", serial_url: str | None = None,
                 on_line=None, emulator: str = "auto", max_instructions: int | None = None) -> FirmwareRun:
    """transport "memory": the request is placed in the board's request block
    (QEMU -device loader, or argv on the host); "uart": it is sent over the
    console UART as to a real board (QEMU via a loopback socket, the host via
    stdin); serial_url: a real, already flashed board.  ``on_line(text)``
    sees each console line as it arrives (live over a UART, under Unicorn and
    on the host; after the run for QEMU with the memory transport).
    ``emulator`` "renode" runs an STM32H750 build under Renode (run/renode.py)
    instead of the board's usual runner ("auto").  An emulated run ends
    past ``max_instructions`` guest instructions (default: the tree's
    instruction bound for this request, with the request in memory; over a
    UART none, as the wait for the host's bytes is the host's time), whatever
    the host's load, and past ``timeout_s`` seconds of wall clock, the
    backstop."""
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    image = image_path(out, board)
    if not image.is_file():
        raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
    if len(prompt_ids) >= manifest["max_seq"]:  # a rolling context rolls the generation, never the prompt
        rolling = str(manifest.get("options", {}).get("context_policy", "stop")).startswith("roll")
        raise UserError(f"the prompt is {len(prompt_ids)} tokens but the firmware's context is "
                        f"{manifest['max_seq']}{' (rolling: the prompt must still fit)' if rolling else ''}: "
                        "shorten the prompt or compile with a larger --max-seq")
    if manifest.get("options", {}).get("sampler") == "greedy" and sampling.temperature > 0:
        raise UserError(f"{out} was compiled with --sampler greedy: run it with --temperature 0, or compile "
                        "with --sampler full to sample")
    if "draft" in manifest and sampling.temperature > 0 and greedy_draft(out, manifest):
        # the firmware refuses it too (TLLM_ERR_SAMPLING)
        raise UserError(f"{out} drafts with a greedy-only draft model, which drafts greedy requests only: run it "
                        "with --temperature 0, or compile it again (the draft gets the target's --sampler)")
    request = out / "build" / "request.bin"
    uart = transport == "uart" or serial_url is not None
    request.write_bytes(pack_request(prompt_ids, max_new_tokens, sampling, REQUEST_EXIT_AFTER if uart else 0))
    if max_instructions is None and not uart:
        # over a UART the firmware spins in its frame reader until the host's bytes arrive: guest instructions
        # then grow with the host's wall clock (a busy host hit the bound), so only the backstop bounds it
        max_instructions = instruction_bound(out, len(prompt_ids) + max_new_tokens)
    if emulator == "renode":
        if serial_url is not None or transport != "memory":
            raise UserError("--emulator renode takes the request in memory: drop --serial and --transport uart")
        result = run_renode(out, board, request, timeout_s=timeout_s, on_line=on_line,
                            max_instructions=max_instructions)
    elif serial_url is not None:
        result = run_serial(serial_url, request.read_bytes(), timeout_s=timeout_s, on_line=on_line)
    else:
        runner = RUNNERS[board.run.emulator]
        result = runner(RunJob(image, board, out / "weights.bin", request, uart, on_line, max_instructions),
                        timeout_s)
    parsed = parse_output(result.output)
    if result.timed_out:
        limit = result.limit or f"{timeout_s:g} s"
        raise UserError(f"firmware run stopped after {limit} without finishing: fewer --max-new-tokens, or a "
                        "longer --timeout" + (" (a firmware that hangs reaches the instruction bound)"
                                              if "instructions" in limit else ""))
    if parsed.crc_errors:
        raise UserError(f"{parsed.crc_errors} console line(s) from the firmware failed their CRC (a noisy or "
                        "mis-set serial link?); run again, or check the baud rate and the cable")
    if result.exit_code != 0:
        what = parsed.error or EXIT_CODES.get(result.exit_code, "see the console output")
        raise UserError(f"firmware exited with status {result.exit_code}: {what}")
    return FirmwareRun(result, parsed)


def greedy_draft(out: Path, manifest: dict) -> bool:
    """Whether a `--speculate draft:` tree's draft model is a greedy-only build (trees compiled before the
    draft got the target's sampler): it drafts greedy requests only."""
    draft = read_json(Path(out) / str(manifest["draft"].get("dir", "draft")) / "manifest.json", "draft manifest")
    return draft.get("options", {}).get("sampler") == "greedy"
