"""The top-level CMake project's C tests: `ctest -L host` in a build of the
repository (tests/c: the bundled model generated at build time for the host,
driven through tllm_api.h, against the numpy reference; every status code)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.host

REPO = Path(__file__).resolve().parents[2]


def test_ctest_host_label(tmp_path):
    for tool in ("cmake", "ctest", "gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    shim = tmp_path / "tinyllm-gen"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinyllm_gen.cli "$@"\n')
    shim.chmod(0o755)
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), f"-DTINYLLM_GEN_EXECUTABLE={shim}"], check=True,
                   capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True)
    proc = subprocess.run(["ctest", "--test-dir", str(build), "-L", "host", "--output-on-failure"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "100% tests passed" in proc.stdout
    names = set(re.findall(r"Test\s+#\d+: (\S+)", proc.stdout))
    assert {"host.api_matches_reference.greedy", "host.api_matches_reference.sampled", "host.api_errors"} <= names

