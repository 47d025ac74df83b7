"""Build and run an emitted firmware tree (OUT).

`build` drives CMake (arm-none-eabi toolchain file for target boards, host
gcc for `host`), then records `arm-none-eabi-size` next to the plan.
`run_firmware` writes the request, boots the image on its board's runner
and parses the console protocol."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .errors import UserError, read_json
from .frontends.tokenizer import Tokenizer
from .protocol import EXIT_CODES, REQUEST_EXIT_AFTER, FirmwareOutput, pack_request, parse_output
from .board import Board, load_board
from .run import RunResult, run_host, run_qemu, run_qemu_serial, run_serial, run_unicorn_board
from .reference.sampler import SamplingOptions

APT_HINT = "apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi"


@dataclass(frozen=True)
class BuildResult:
    image: Path
    board: str
    size: dict | None  # text/data/bss from arm-none-eabi-size (target boards)


def read_manifest(out: Path) -> dict:
    path = Path(out) / "manifest.json"
    try:
        exists = path.exists()
    except OSError as e:  # a name too long for the OS, a symlink loop
        raise UserError(f"{str(out)[:200]}: cannot open ({e.strerror or e})") from None
    if not exists:
        raise UserError(f"{out}: no manifest.json; run `tinyllm-gen compile MODEL -o {out}` first")
    m = read_json(path, "manifest.json", 64 * 1024 * 1024)
    if not _manifest_ok(m):
        raise UserError(f"{path}: not a tinyllm-gen manifest (fields missing or of the wrong type); "
                        f"recompile with `tinyllm-gen compile MODEL -o {out}`")
    return m


def _manifest_ok(m) -> bool:
    """The fields build/run/report/flash/bench read, with their types."""
    def is_int(v, low=0):
        return isinstance(v, int) and not isinstance(v, bool) and v >= low

    if not isinstance(m, dict) or not isinstance(m.get("board"), str) or not is_int(m.get("max_seq"), 1):
        return False
    t, opts = m.get("tokenizer"), m.get("options", {})
    if not isinstance(t, dict) or t.get("kind") not in ("hf", "llama2c") or not isinstance(t.get("file"), str) \
            or not is_int(t.get("vocab_size"), 1) or not isinstance(opts, dict):
        return False
    if ".." in Path(t["file"]).parts or Path(t["file"]).is_absolute():
        return False
    return all(t.get(k) is None or is_int(t.get(k)) for k in ("bos_id", "eos_id"))


def image_path(out: Path, board: Board) -> Path:
    name = "firmware.elf" if board.is_arm else "firmware"
    return Path(out) / "build" / name


def _first_error(log: str) -> str:
    for pat in (r"region `?\w+'? overflowed by \d+ bytes", r"error: .*", r"undefined reference to .*", r"CMake Error.*"):
        m = re.search(pat, log)
        if m:
            return m.group(0).strip()
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown error"


def _need(tool: str, hint: str) -> None:
    if shutil.which(tool) is None:
        raise UserError(f"{tool} not found on PATH: {hint}")


def build(out: Path, cmsis_nn: Path | None = None, jobs: int = 2) -> BuildResult:
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    _need("cmake", "install it with `apt-get install cmake`")
    arm = board.is_arm
    _need("arm-none-eabi-gcc" if arm else "gcc", APT_HINT if arm else "install gcc")
    build_dir = out / "build"
    cfg = ["cmake", "-S", str(out), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
    if cmsis_nn is not None:
        cfg.append(f"-DCMSIS_NN_ROOT={Path(cmsis_nn).resolve()}")
    for cmd in (cfg, ["cmake", "--build", str(build_dir), "-j", str(jobs)]):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if proc.returncode != 0:
            (build_dir / "build.log").parent.mkdir(parents=True, exist_ok=True)
            (build_dir / "build.log").write_text(proc.stdout)
            raise UserError(f"build of {out} failed: {_first_error(proc.stdout)} (full log: {build_dir / 'build.log'})")
    image = image_path(out, board)
    size = arm_size(image) if arm else None
    if size is not None:
        (build_dir / "size.json").write_text(json.dumps(size, indent=2, sort_keys=True) + "\n")
        _report_with_elf(out, image, board)
    return BuildResult(image=image, board=board.name, size=size)


def _report_with_elf(out: Path, image: Path, board: Board) -> None:
    """Rewrite OUT/report.md and report.json with the ELF's sections beside
    the plan (manifest.json keeps the compile-time hashes of both)."""
    from .plan.elfsize import elf_usage
    from .plan.human import report_files

    path = out / "report.json"
    if not path.is_file():
        return
    doc = json.loads(path.read_text())
    doc.pop("elf", None)
    files = report_files(doc, elf_usage(image, board, doc))
    for name in ("report.json", "report.md"):
        (out / name).write_bytes(files[name])


def arm_size(elf: Path) -> dict:
    """text/data/bss of the image (Berkeley format), as the plan reports them."""
    proc = subprocess.run(["arm-none-eabi-size", "-B", str(elf)], capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in proc.stdout.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss, "ram_bytes": data + bss, "flash_bytes": text + data}


def load_out_tokenizer(out: Path, manifest: dict) -> Tokenizer:
    t = manifest["tokenizer"]
    path = Path(out) / t["file"]
    if t["kind"] == "hf":
        return Tokenizer.from_hf_json(path, t["bos_id"], t["eos_id"])
    return Tokenizer.from_llama2c(path, t["vocab_size"])


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


def _run_on_host(job: RunJob, timeout_s: float) -> RunResult:
    return run_host(job.image, None if job.uart else job.request, timeout_s=timeout_s,
                    stdin_bytes=job.request.read_bytes() if job.uart else None, on_line=job.on_line)


def _run_on_qemu(job: RunJob, timeout_s: float) -> RunResult:
    if job.uart:
        return run_qemu_serial(job.image, job.board, job.weights, job.request.read_bytes(), timeout_s=timeout_s,
                               on_line=job.on_line)
    result = run_qemu(job.image, job.board, job.weights, job.request, timeout_s=timeout_s)
    if job.on_line is not None:  # QEMU's memory transport: the console file is read after the run
        for line in result.output.split("\n"):
            job.on_line(line)
    return result


def _run_on_unicorn(job: RunJob, timeout_s: float) -> RunResult:
    return run_unicorn_board(job.image, job.board, job.weights, job.request,
                             job.request.read_bytes() if job.uart else b"", timeout_s=timeout_s, on_line=job.on_line)


# board.json "run": {"emulator": NAME} picks one; a new emulator is one entry here.
RUNNERS = {"host": _run_on_host, "qemu": _run_on_qemu, "unicorn": _run_on_unicorn}


@dataclass(frozen=True)
class FirmwareRun:
    result: RunResult
    output: FirmwareOutput


def run_firmware(out: Path, prompt_ids: Sequence[int], max_new_tokens: int, sampling: SamplingOptions,
                 timeout_s: float = 600, transport: str = "memory", serial_url: str | None = None,
                 on_line=None, emulator: str = "auto") -> FirmwareRun:
    """transport "memory": the request is placed in the board's request block
    (QEMU -device loader, or argv on the host); "uart": it is sent over the
    console UART as to a real board (QEMU via a loopback socket, the host via
    stdin); serial_url: a real, already flashed board.  ``on_line(text)``
    sees each console line as it arrives (live over a UART, under Unicorn and
    on the host; after the run for QEMU with the memory transport).
    ``emulator`` "renode" runs an STM32H750 build under Renode (run_renode.py)
    instead of the board's usual runner ("auto")."""
    out = Path(out)
    manifest = read_manifest(out)
    board = load_board(manifest["board"])
    image = image_path(out, board)
    if not image.is_file():
        raise UserError(f"{out}: firmware not built; run `tinyllm-gen build {out}` first")
    if len(prompt_ids) >= manifest["max_seq"]:
        raise UserError(f"the prompt is {len(prompt_ids)} tokens but the firmware's context is "
                        f"{manifest['max_seq']}: shorten the prompt or compile with a larger --max-seq")
    if manifest.get("options", {}).get("sampler") == "greedy" and sampling.temperature > 0:
        raise UserError(f"{out} was compiled with --sampler greedy: run it with --temperature 0, or compile "
                        "with --sampler full to sample")
    request = out / "build" / "request.bin"
    uart = transport == "uart" or serial_url is not None
    request.write_bytes(pack_request(prompt_ids, max_new_tokens, sampling, REQUEST_EXIT_AFTER if uart else 0))
    if emulator == "renode":
        from .run_renode import run_renode

        if serial_url is not None or transport != "memory":
            raise UserError("--emulator renode takes the request in memory: drop --serial and --transport uart")
        result = run_renode(out, board, request, timeout_s=timeout_s, on_line=on_line)
    elif serial_url is not None:
        result = run_serial(serial_url, request.read_bytes(), timeout_s=timeout_s, on_line=on_line)
    else:
        runner = RUNNERS[board.run.emulator]
        result = runner(RunJob(image, board, out / "weights.bin", request, uart, on_line), timeout_s)
    parsed = parse_output(result.output)
    if result.timed_out:
        raise UserError(f"firmware run timed out after {timeout_s:.0f} s; fewer --max-new-tokens or a longer --timeout")
    if parsed.crc_errors:
        raise UserError(f"{parsed.crc_errors} console line(s) from the firmware failed their CRC (a noisy or "
                        "mis-set serial link?); run again, or check the baud rate and the cable")
    if result.exit_code != 0:
        what = parsed.error or EXIT_CODES.get(result.exit_code, "see the console output")
        raise UserError(f"firmware exited with status {result.exit_code}: {what}")
    return FirmwareRun(result, parsed)
