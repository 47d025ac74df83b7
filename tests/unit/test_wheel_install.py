"""The wheel is self-contained: built from a copy of the sources, installed
into a clean venv (no checkout on sys.path, no PYTHONPATH, run from a temp
directory), it compiles, builds and runs the bundled model for the host with
the runtime, templates, boards and CMake functions it carries, and gives the
reference's tokens; a user's CMake project finds the installed package with
find_package(TinyLLM) and generates the model at build time.  About 20 s, most of it pip installing the dependencies
(from the pip cache or the configured indexes)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.host

REPO = Path(__file__).resolve().parents[2]
# What the wheel is built from (pyproject.toml's package-dir), and nothing else of the checkout.
SOURCES = ("pyproject.toml", "README.md", "codegen", "firmware", "boards", "templates", "cmake")
# The core install's dependencies, as pyproject.toml states them (a copy here fell behind once: gguf).
DEPENDENCIES = tuple(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, **kw)


def test_wheel_installs_and_builds_the_bundled_model(tmp_path):
    if shutil.which("gcc") is None or shutil.which("cmake") is None:
        pytest.skip("needs gcc and cmake")
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    deps = _run([*pip, "setuptools>=64", "wheel", *DEPENDENCIES], tmp_path)
    if deps.returncode != 0:
        pytest.skip(f"pip cannot install the dependencies here: {deps.stderr.strip().splitlines()[-1:]}")

    wheels = tmp_path / "wheels"
    built = _run([py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, src], tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("tinyllm_gen-*.whl")
    installed = _run([*pip, "--no-deps", wheel], tmp_path)
    assert installed.returncode == 0, installed.stderr
    shutil.rmtree(src)  # nothing left to fall back on

    work = tmp_path / "work"
    work.mkdir()
    where = _run([py, "-c", "import tinyllm_gen, tinyllm_gen.resources as r; print(tinyllm_gen.__file__); "
                  "print(*(r.resource_dir(k) for k in r.KINDS), sep='\\n')"], work, check=True).stdout.split()
    assert all(Path(p).is_relative_to(env_dir) for p in where), where

    model = tmp_path / "story-260k"
    shutil.copytree(REPO / "models" / "story-260k", model)
    cli = env_dir / "bin" / "tinyllm-gen"
    out = work / "out"
    for cmd in (["compile", model, "-o", out, "--board", "host"], ["build", out]):
        proc = _run([cli, *cmd], work)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "cmake" / "TinyLLM.cmake").is_file() and (out / "runtime" / "tllm_api.h").is_file()
    args = ["--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "0.8", "--top-p", "0.9",
            "--seed", "42", "--json"]
    run = json.loads(_run([cli, "run", out, *args], work, check=True).stdout)
    ref = json.loads(subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", "reference", model, *args],
                                    capture_output=True, text=True, check=True).stdout)
    assert run["generated_ids"] == ref["generated_ids"] and len(ref["generated_ids"]) == 20

    # A user's CMake project against the installed package: find_package + tinyllm_generate_model.
    cmake_dir = where[-1]
    assert cmake_dir.endswith("cmake") and (Path(cmake_dir) / "TinyLLMConfig.cmake").is_file()
    user = tmp_path / "user"
    user.mkdir()
    shutil.copy2(REPO / "tests" / "c" / "api_generate.c", user / "main.c")
    (user / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(user C ASM)\n"
        "find_package(TinyLLM CONFIG REQUIRED)\n"
        f"tinyllm_generate_model(TARGET story MODEL \"{model}\" BOARD host)\n"
        "add_executable(user main.c)\ntarget_link_libraries(user PRIVATE story)\n")
    for cmd in (["cmake", "-S", user, "-B", user / "build", f"-DTinyLLM_DIR={cmake_dir}",
                 f"-DTINYLLM_GEN_EXECUTABLE={cli}", "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", user / "build"]):
        proc = _run(cmd, work)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    got = _run([user / "build" / "user", 20, 0.8, 0.9, 42, *run["prompt_ids"]], work, check=True).stdout.split()
    assert [int(t) for t in got] == ref["generated_ids"]
