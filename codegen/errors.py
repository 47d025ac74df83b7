"""User-facing errors.

Anything the user can fix (a bad file, a model that does not fit, a bad
option) raises `UserError`; the CLI prints its message as one line and exits
with status 2.  Every other exception is a bug in tinyllm-gen and keeps its
traceback.

The helpers below are the one way frontends read a file the user named:
only a regular file is opened (a FIFO, a device or a directory would block
or mislead), its size is bounded before anything proportional to it is
allocated, and OS errors become one line naming the file."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(one_line(message))


def one_line(message: object) -> str:
    """A message as one line (newlines in OS or library messages joined)."""
    s = " ".join(str(message).split("\n")).strip()
    return s or "error"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type name."""
    s = str(e).strip().splitlines()
    return s[0][:300] if s else type(e).__name__


def check_regular_file(path: Path, what: str = "file") -> int:
    """The size of `path`, which must be a regular file (symlinks followed)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise UserError(f"{path}: cannot read {what} ({e.strerror or first_line(e)})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise UserError(f"{path}: the {what} is {kind}; pass a regular file")
    return st.st_size


def read_regular_bytes(path: Path, what: str = "file", max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, refused above `max_bytes` before reading."""
    size = check_regular_file(path, what)
    if max_bytes is not None and size > max_bytes:
        raise UserError(f"{path}: the {what} is {size:,} B, more than the {max_bytes:,} B tinyllm-gen accepts")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read {what} ({e.strerror or first_line(e)})") from None


def read_regular_text(path: Path, what: str = "file", max_bytes: int | None = None) -> str:
    """A regular file's text, which must be UTF-8."""
    data = read_regular_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: the {what} is not UTF-8 text (invalid byte at offset {e.start}); "
                        "pass a UTF-8 text file") from None


MAX_JSON_BYTES = 256 * 1024 * 1024


def read_json(path: Path, what: str = "JSON file", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parsed JSON of a regular UTF-8 file; bad JSON, too deep nesting and
    NaN/Infinity literals are refused in one line."""
    text = read_regular_text(path, what, max_bytes)
    return parse_json(text, path, what)


def parse_json(text: str, path: Path, what: str = "JSON file") -> Any:
    def no_constant(name):
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise UserError(f"{path}: the {what} is nested too deeply to be a real one") from None
    except ValueError as e:
        raise UserError(f"{path}: the {what} is not valid JSON ({first_line(e)})") from None
