"""A user's own Cortex-M7 firmware (examples/own-firmware: its own main,
startup, UART code and linker script, GCC's default float flags) that pulls
tinyllm-gen in with add_subdirectory or FetchContent, under QEMU: the same
tokens as `tinyllm-gen build` + `run` and as the numpy reference, bit for bit.
Also the user who bypasses our CMake targets (the sources compiled into their
own executable with GCC's defaults: the C's own guard keeps contraction off)
and the one who builds with -ffast-math (refused with an #error naming the fix).

The sampling options are the demo's (T 0.8, top-p 0.9, seed 42): with
contraction on (VFMA) the bundled model's tokens diverged from the
reference at token 34."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinyllm_gen.resources import firmware_dir

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "own-firmware"
TOOLCHAIN = EXAMPLE / "cortex-m7.cmake"
MODEL = REPO / "models" / "story-260k"
PROMPT = "Once upon a time"
N_NEW = 40
SAMPLING = ["--temperature", "0.8", "--top-p", "0.9", "--seed", "42"]
FUSED = re.compile(r"\sv(fma|fms|fnma|fnms)\.f(32|64)\s")
CPU = "-mcpu=cortex-m7 -mthumb -mfpu=fpv5-d16 -mfloat-abi=hard"


def _need() -> None:
    for tool in ("cmake", "ctest", "arm-none-eabi-gcc", "arm-none-eabi-objdump", "qemu-system-arm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install cmake gcc-arm-none-eabi "
                        "libnewlib-arm-none-eabi qemu-system-arm)")


def _cli(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "tinyllm_gen.cli", *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    _need()
    return tmp_path_factory.mktemp("own-firmware")


@pytest.fixture(scope="module")
def generator(root) -> Path:
    """tinyllm-gen for CMake's build-time generation: this interpreter's package."""
    shim = root / "tinyllm-gen"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tinyllm_gen.cli "$@"\n')
    shim.chmod(0o755)
    return shim


@pytest.fixture(scope="module")
def expected(root) -> dict:
    """`tinyllm-gen compile` + `build` + `run` on the same board, checked against the reference."""
    out = root / "out"
    _cli("compile", str(MODEL), "-o", str(out), "--board", "qemu-mps2-an500")
    _cli("build", str(out))
    run = json.loads(_cli("run", str(out), "--prompt", PROMPT, "--max-new-tokens", str(N_NEW), *SAMPLING, "--json"))
    ref = json.loads(_cli("reference", str(MODEL), "--prompt", PROMPT, "--max-new-tokens", str(N_NEW), *SAMPLING,
                          "--json"))
    assert run["generated_ids"] == ref["generated_ids"] and len(ref["generated_ids"]) == N_NEW
    return {"out": out, "prompt_ids": run["prompt_ids"], "generated_ids": run["generated_ids"]}


def _request_defs(expected: dict) -> list[str]:
    return [f"-DOWN_FW_PROMPT_IDS={','.join(map(str, expected['prompt_ids']))}", f"-DOWN_FW_MAX_NEW={N_NEW}",
            "-DOWN_FW_TEMPERATURE=0.8", "-DOWN_FW_TOP_P=0.9", "-DOWN_FW_SEED=42"]


def _cmake(src: Path, build: Path, *defs: str, check: bool = True) -> subprocess.CompletedProcess:
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", *defs],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    proc = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _run(elf: Path, weights: Path) -> list[int]:
    proc = subprocess.run(["qemu-system-arm", "-M", "mps2-an500", "-cpu", "cortex-m7", "-nographic", "-monitor", "none",
                           "-semihosting-config", "enable=on,target=native",
                           "-device", f"loader,file={weights},addr=0x60000000,force-raw=on", "-kernel", str(elf)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = re.findall(r"^tok (\d+) (\d+)$", proc.stdout, re.M)
    assert [int(i) for i, _ in lines] == list(range(len(lines)))
    assert f"end reason=2 n={N_NEW}" in proc.stdout
    return [int(t) for _, t in lines]


def _fused(elf: Path) -> list[str]:
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
    return [ln for ln in dis.splitlines() if FUSED.search(ln)]


def test_add_subdirectory_generating_the_model_at_build_time(root, generator, expected):
    build = root / "subdir"
    _cmake(EXAMPLE, build, f"-DTINYLLM_GEN_EXECUTABLE={generator}", "-DCMAKE_BUILD_TYPE=Release",
           *_request_defs(expected))
    elf = build / "own_firmware.elf"
    weights = Path((build / "weights_path.txt").read_text().strip())
    assert weights == build / "story.tinyllm" / "weights.bin"
    # the generated tree is the one `tinyllm-gen compile` writes: same weights, same model C
    assert weights.read_bytes() == (expected["out"] / "weights.bin").read_bytes()
    assert (build / "story.tinyllm/src/tllm_model.c").read_bytes() == (expected["out"] / "src/tllm_model.c").read_bytes()
    assert _fused(elf) == []
    assert _run(elf, weights) == expected["generated_ids"]
    # a second build is a no-op: the generator runs again only when the model changes
    again = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, check=True).stdout
    assert "tinyllm-gen: compiling" not in again


def test_fetchcontent_linking_a_compiled_out_tree(root, expected):
    # no CMAKE_BUILD_TYPE: GCC's -O0 for everything, still the same tokens
    build = root / "fetchcontent"
    _cmake(EXAMPLE, build, "-DOWN_FW_FETCHCONTENT=ON", f"-DOWN_FW_MODEL_OUT={expected['out']}",
           *_request_defs(expected))
    assert (build / "_deps").is_dir()
    elf = build / "own_firmware.elf"
    assert _fused(elf) == []
    assert _run(elf, expected["out"] / "weights.bin") == expected["generated_ids"]


PLAIN_CMAKE = """cmake_minimum_required(VERSION 3.20)
project(plain C ASM)
# A user who compiles tinyllm-gen's sources into their own target, no tinyllm targets: GCC's
# defaults (gnu17, so -ffp-contract=fast) plus whatever EXTRA_FLAGS says.
file(GLOB runtime "{out}/runtime/*.c")
list(FILTER runtime EXCLUDE REGEX "tllm_main[.]c$")
file(GLOB model "{out}/src/*.c")
add_executable(plain {example}/main.c {example}/startup.c ${{runtime}} ${{model}})
set_target_properties(plain PROPERTIES SUFFIX ".elf")
target_include_directories(plain PRIVATE {out}/runtime {out}/src)
separate_arguments(extra UNIX_COMMAND "${{EXTRA_FLAGS}}")
target_compile_options(plain PRIVATE -O2 ${{extra}})
target_compile_definitions(plain PRIVATE OWN_FW_PROMPT_IDS=${{OWN_FW_PROMPT_IDS}} OWN_FW_MAX_NEW=${{OWN_FW_MAX_NEW}}
  OWN_FW_TEMPERATURE=${{OWN_FW_TEMPERATURE}} OWN_FW_TOP_P=${{OWN_FW_TOP_P}} OWN_FW_SEED=${{OWN_FW_SEED}})
target_link_options(plain PRIVATE -T{example}/mps2_an500.ld)
target_link_libraries(plain PRIVATE m)
"""


def _plain_project(root: Path, expected: dict, name: str) -> Path:
    src = root / name
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PLAIN_CMAKE.format(out=expected["out"], example=EXAMPLE))
    return src


def test_own_target_with_gcc_defaults_still_has_no_fma(root, expected):
    """No tinyllm::numerics at all: tllm_numerics.h's pragma keeps the float rules."""
    src = _plain_project(root, expected, "plain")
    _cmake(src, root / "plain-build", *_request_defs(expected))
    elf = root / "plain-build" / "plain.elf"
    assert _fused(elf) == []
    assert _run(elf, expected["out"] / "weights.bin") == expected["generated_ids"]


def test_the_guard_is_what_keeps_fma_out(root):
    """The same toolchain fuses a*b+c into VFMA without the header and not with it."""
    probe = root / "probe.c"
    for include, fused in (("", True), ('#include "tllm_numerics.h"\n', False)):
        probe.write_text(include + "float f(float a, float b, float c) { return a * b + c; }\n")
        obj = root / "probe.o"
        subprocess.run(["arm-none-eabi-gcc", *CPU.split(), "-O2", "-ffp-contract=fast", "-Wall", "-Wextra", "-Werror",
                        "-I", str(firmware_dir()), "-c", str(probe), "-o", str(obj)], check=True)
        assert bool(_fused(obj)) == fused


def test_fast_math_is_refused_naming_the_fix(root, expected):
    src = _plain_project(root, expected, "fast-math")
    proc = _cmake(src, root / "fast-math-build", "-DEXTRA_FLAGS=-ffast-math", *_request_defs(expected), check=False)
    assert proc.returncode != 0
    log = proc.stdout + proc.stderr
    assert "tinyllm-gen: compiled with -ffast-math, which breaks bit-exact tokens" in log
    assert "tinyllm::numerics: -ffp-contract=off -fno-math-errno" in log
    # and through our CMake targets the same global flag is refused the same way
    proc = _cmake(EXAMPLE, root / "fast-math-targets", "-DOWN_FW_FETCHCONTENT=ON", f"-DOWN_FW_MODEL_OUT={expected['out']}",
                  f"-DCMAKE_C_FLAGS={CPU} -ffast-math", check=False)
    assert proc.returncode != 0 and "compiled with -ffast-math" in proc.stdout + proc.stderr


def test_ctest_emu_label(root, generator):
    """The repository's own CTest emu tier: configured with the Cortex-M7 toolchain file."""
    build = root / "ctest-emu"
    _cmake(REPO, build, f"-DTINYLLM_GEN_EXECUTABLE={generator}", "-DCMAKE_BUILD_TYPE=Release")
    proc = subprocess.run(["ctest", "--test-dir", str(build), "-L", "emu", "--output-on-failure"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "emu.api_matches_reference.sampled" in proc.stdout and "100% tests passed" in proc.stdout
