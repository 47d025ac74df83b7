"""Where tinyllm-gen's non-Python files live: one resolver for every
resource path.

In a checkout (and an editable install) the C runtime, the boards and the
templates sit at the top of the repository, beside `codegen/`, where an
embedded engineer looks for them.  A wheel maps them into the package
(`tinyllm_gen/firmware`, ...; see pyproject.toml's package-dir), so the
installed tree is self-contained.  Nothing else in the package computes a
path from `__file__`."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
KINDS = ("templates", "firmware", "boards", "cmake")


@lru_cache(maxsize=None)
def resource_dir(kind: str) -> Path:
    """The directory holding one kind of resource: templates, firmware, boards or cmake."""
    if kind not in KINDS:
        raise ValueError(f"unknown resource kind {kind!r}: one of {', '.join(KINDS)}")
    for candidate in (PACKAGE_DIR / kind, PACKAGE_DIR.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tinyllm-gen's {kind}/ is missing beside {PACKAGE_DIR}: reinstall the package")


def templates_dir() -> Path:
    return resource_dir("templates")


def firmware_dir() -> Path:
    return resource_dir("firmware")


def boards_dir() -> Path:
    return resource_dir("boards")


def cmake_dir() -> Path:
    """The CMake functions (TinyLLM.cmake) a user's project and every OUT tree include."""
    return resource_dir("cmake")


def package_file(relative: str) -> Path:
    """A data file that ships inside the Python package itself (bench C sources, calibration text)."""
    return PACKAGE_DIR / relative
