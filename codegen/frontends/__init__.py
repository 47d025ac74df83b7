"""Frontends: checkpoints on disk -> `ImportedModel` (a verified Graph plus
its tokenizer).  `load_model` picks the frontend from what the path is."""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .gguf import is_gguf, load_gguf
from .hf import ImportedModel, load_hf
from .llama2c import load_llama2c
from .onnx_model import find_onnx, load_onnx
from .tokenizer import Tokenizer

__all__ = ["ImportedModel", "Tokenizer", "load_gguf", "load_hf", "load_llama2c", "load_model", "load_onnx"]


def load_model(path: Path, tokenizer: Path | None = None) -> ImportedModel:
    """A directory is a Hugging Face `save_pretrained` folder, or an ONNX
    export (one *.onnx and its config.json, no safetensors); a `.onnx` file
    is that export; a `.gguf` file (or one starting with the GGUF magic) is
    a llama.cpp model (so is a directory holding one *.gguf and no
    config.json, as a llama.cpp download is); any other file is a llama2.c
    `.bin` checkpoint.  Pointing at a file inside an HF folder (config.json,
    *.safetensors) means that folder."""
    path = Path(path)
    try:  # a name the OS refuses (too long, a loop of symlinks) is the user's to fix
        onnx_file = find_onnx(path)
        is_dir, is_file, exists = path.is_dir(), path.is_file(), path.exists()
    except OSError as e:
        raise UserError(f"{str(path)[:200]}: cannot open ({e.strerror or e}); pass a Hugging Face model "
                        "directory or a llama2.c .bin checkpoint") from None
    if onnx_file is not None:
        return load_onnx(onnx_file, tokenizer)
    if is_dir:
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1 and not (path / "config.json").exists():
            return load_gguf(ggufs[0], tokenizer)
        return load_hf(path, tokenizer)
    if is_file:
        if path.name == "config.json" or path.suffix == ".safetensors":
            return load_hf(path.parent, tokenizer)
        if is_gguf(path):
            return load_gguf(path, tokenizer)
        return load_llama2c(path, tokenizer)
    if not exists:
        raise UserError(f"{path}: no such file or directory; pass a Hugging Face model directory, "
                        "a .gguf file or a llama2.c .bin checkpoint")
    raise UserError(f"{path}: neither a directory nor a regular file; pass a Hugging Face model "
                    "directory or a llama2.c .bin checkpoint")
