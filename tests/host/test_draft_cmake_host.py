"""A user's own CMake project over a `--speculate draft:MODEL` tree
(cmake/TinyLLM.cmake): tinyllm_generate_model with the option in OPTIONS
makes the target's library with the draft's library and table linked in
(through tinyllm_add_model's own draft handling, which the tree's own
CMakeLists also uses: tests/host/test_speculate_draft_tree_host.py); a main
of the user's own (tests/c/api_generate.c with API_GENERATE_DRAFT) hands the table to
tllm_init and decodes plain decoding's tokens in the reference's passes."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bounds import BACKSTOP_S
from drafts import draft_reference, target_and_student
from tinyllm_gen.frontends import load_model

pytestmark = pytest.mark.host
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "c" / "api_generate.c"  # built with API_GENERATE_DRAFT: the draft table to tllm_init
PROMPT = "Once upon a time there was a little cat. The"
SEQ, K, MAX_NEW = 64, 3, 30


def user_project(root: Path, target: Path, draft: Path) -> Path:
    """A project that includes TinyLLM.cmake and builds the driver against the generated library."""
    proj = root / "user"
    proj.mkdir()
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(user_firmware C ASM)\n"
        f'include("{REPO}/cmake/TinyLLM.cmake")\n'
        f'tinyllm_generate_model(TARGET generated MODEL "{target}" BOARD host\n'
        f'                       OPTIONS --max-seq {SEQ} --speculate "draft:{draft}:{K}")\n'
        f'add_executable(app "{DRIVER}")\n'
        "target_compile_definitions(app PRIVATE API_GENERATE_DRAFT=1)\n"
        "target_link_libraries(app PRIVATE generated m)\n")
    return proj


def test_tinyllm_generate_model_links_the_draft_and_decodes_as_the_reference(tmp_path):
    for tool in ("cmake", "gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    target, draft = target_and_student(tmp_path)
    shim = tmp_path / "tinyllm-gen"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinyllm_gen.cli "$@"\n')
    shim.chmod(0o755)
    build = tmp_path / "build"
    proj = user_project(tmp_path, target, draft)
    subprocess.run(["cmake", "-S", str(proj), "-B", str(build), f"-DTINYLLM_GEN_EXECUTABLE={shim}"], check=True,
                   capture_output=True, timeout=BACKSTOP_S)
    done = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True,
                          timeout=BACKSTOP_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    generated = build / "generated.tinyllm"
    assert (generated / "draft" / "tllm_draft_table.c").is_file()  # the option made a draft tree at build time
    ids = load_model(target).tokenizer.encode(PROMPT)
    spec, plain = draft_reference(target, draft, ids, MAX_NEW, SEQ, K)
    assert spec.generated_ids == plain.generated_ids and spec.accepted > 0
    out = subprocess.run([str(build / "app"), str(MAX_NEW), "0", "1", "0", *map(str, ids)], capture_output=True,
                         text=True, timeout=BACKSTOP_S)  # greedy: temperature 0, top-p 1, seed 0
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [int(t) for t in lines[0].split()] == plain.generated_ids
    assert lines[1] == f"passes {len(spec.pass_tokens)}" and len(spec.pass_tokens) < MAX_NEW  # the draft drafted
