"""Build an emitted firmware tree (OUT): `build` drives CMake (the
arm-none-eabi toolchain file for target boards, host gcc for `host`), then
records `arm-none-eabi-size` next to the plan."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..board import Board, load_board
from ..errors import UserError
from ..plan.elfsize import elf_usage
from ..plan.human import report_files
from .out import image_path, read_manifest

APT_HINT = "apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi"


@dataclass(frozen=True)
class BuildResult:
    image: Path
    board: str
    size: dict | None  # text/data/bss from arm-none-eabi-size (target boards)


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


