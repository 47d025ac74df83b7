"""A compiled OUT tree as the later stages read it: its manifest (checked
field by field), its tokenizer and where its built image lives."""
from __future__ import annotations

from pathlib import Path

from ..board import Board
from ..errors import UserError, read_json
from ..frontends.tokenizer import Tokenizer


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


def load_out_tokenizer(out: Path, manifest: dict) -> Tokenizer:
    t = manifest["tokenizer"]
    path = Path(out) / t["file"]
    if t["kind"] == "hf":
        return Tokenizer.from_hf_json(path, t["bos_id"], t["eos_id"])
    return Tokenizer.from_llama2c(path, t["vocab_size"])
