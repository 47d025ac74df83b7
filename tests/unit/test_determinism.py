"""Compiling the same model twice gives byte-identical output trees."""
import re
from pathlib import Path

from tinyllm_gen.compile import CompileOptions, compile_path, write_tree

from tinymodels import make_hf_model


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_compile_twice_is_byte_identical(tmp_path):
    model = make_hf_model(tmp_path / "m", context=64, seed=5)
    for board in ("qemu-mps2-an500", "host"):
        a, b = tmp_path / f"a-{board}", tmp_path / f"b-{board}"
        write_tree(compile_path(model, CompileOptions(board=board)).tree, a)
        write_tree(compile_path(model, CompileOptions(board=board)).tree, b)
        ta, tb = tree(a), tree(b)
        assert ta == tb
        assert "manifest.json" in ta and "src/tllm_model.c" in ta
        for name, data in ta.items():
            if name.endswith((".c", ".h", ".txt", ".json")):
                # a date or a time, not any "2025" (sha256 hex digests contain those by chance)
                assert not re.search(rb"20[0-9][0-9]-[01][0-9]-[0-3][0-9]|[0-2][0-9]:[0-5][0-9]:[0-5][0-9]", data), \
                    f"{name} looks time-stamped"
