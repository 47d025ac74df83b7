"""Host tier: `tinyllm-gen run OUT --check` rebuilds the reference from OUT's
own blob and manifest and compares the firmware's tokens with it: the
bundled model agrees (exit 0), a blob that no longer matches the firmware
built from it is caught at the first differing token (exit 1), and a tree
without the blob table is refused in one line (exit 2)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from firmware_harness import need

pytestmark = pytest.mark.host

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Once upon a time"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *args], capture_output=True, text=True,
                          timeout=1800)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    need("cmake")
    d = tmp_path_factory.mktemp("run-check") / "out"
    for step in (("compile", str(ROOT / "models" / "story-260k"), "-o", str(d), "--board", "host",
                  "--kernels", "cortex-m7", "--max-seq", "64"), ("build", str(d))):
        r = cli(*step)
        assert r.returncode == 0, r.stderr
    return d


@pytest.mark.parametrize("sampling", [(), ("--temperature", "0.9", "--top-p", "0.85", "--seed", "7")])
def test_check_agrees_with_the_reference(out, sampling):
    r = cli("run", str(out), "--prompt", PROMPT, "--max-new-tokens", "12", "--check", *sampling)
    assert r.returncode == 0, r.stderr
    assert "--check: the 12 tokens are the reference's" in r.stderr


def test_check_catches_a_blob_the_firmware_was_not_built_from(out, tmp_path):
    """Swap two 4-row tiles of layer 0's wq in weights.bin (the host firmware
    keeps the blob it was linked with): the reference now computes other q
    rows, and --check names the first token that differs."""
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    m = json.loads((bad / "manifest.json").read_text())
    name, kind, offset, nbytes = next(e for e in m["blob_entries"] if e[0] == "layers.0.wq")
    assert kind == "q4x4"
    rows = m["config"]["dim"]
    tile = nbytes // (rows // 4)
    blob = bytearray((bad / "weights.bin").read_bytes())
    a, b = offset, offset + tile
    blob[a:a + tile], blob[b:b + tile] = blob[b:b + tile], blob[a:a + tile]
    (bad / "weights.bin").write_bytes(bytes(blob))
    r = cli("run", str(bad), "--prompt", PROMPT, "--max-new-tokens", "12", "--check")
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("--check: token ") and "differs: the firmware gave" in line and "the reference" in line


def test_check_refuses_a_tree_without_its_blob_table(out, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(out, old)
    m = json.loads((old / "manifest.json").read_text())
    del m["blob_entries"]
    (old / "manifest.json").write_text(json.dumps(m))
    r = cli("run", str(old), "--prompt", PROMPT, "--max-new-tokens", "4", "--check")
    assert r.returncode == 2
    assert "no blob table" in r.stderr and "recompile" in r.stderr and "Traceback" not in r.stderr
