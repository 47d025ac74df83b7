"""The emulators' native helpers (QEMU TCG plugins, the Unicorn block counter), built with the host's gcc once per
source version (keyed by the source's hash) into the user's cache."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import UserError
from ..resources import package_file

ILIMIT_SOURCE = package_file("run/tllm_ilimit.c")


def cache_dir() -> Path:
    d = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tinyllm-gen"
    d.mkdir(parents=True, exist_ok=True)
    return d


def build_plugin(source: Path) -> Path:
    """The plugin's shared object, compiled once per source version."""
    if shutil.which("gcc") is None:
        raise UserError("gcc not found: it builds QEMU's instruction plugins; apt-get install gcc")
    src = Path(source).read_bytes()
    so = cache_dir() / f"{Path(source).stem}-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if not so.exists():
        tmp = so.with_suffix(f".{os.getpid()}.tmp")  # a concurrent build writes its own, then one rename wins
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
                        "-o", str(tmp), str(source)], check=True)
        tmp.rename(so)
    return so
