"""A host C program linked against generated models, built with CMake the
way a user's project builds one (cmake/TinyLLM.cmake's tinyllm_add_model),
for the tests whose driver lives in tests/c/."""
from __future__ import annotations

import subprocess
from pathlib import Path


def build_program(proj: Path, name: str, driver: Path, models: dict[str, Path], extra_sources: tuple[Path, ...] = (),
                  include_dirs: tuple[Path, ...] = (), link_options: tuple[str, ...] = ()) -> Path:
    """The executable `name` from `driver` (and extra_sources), linked with one library per OUT tree
    (library target -> OUT) and link_options; every source, the models' and the runtime's included,
    compiles warning-free (-Wall -Wextra -Werror)."""
    proj.mkdir()
    first = next(iter(models.values()))
    lines = ["cmake_minimum_required(VERSION 3.20)", f"project({name} C ASM)", "set(CMAKE_C_STANDARD 11)",
             "add_compile_options(-Wall -Wextra -Werror)", f"include({first}/cmake/TinyLLM.cmake)"]
    lines += [f"tinyllm_add_model(TARGET {target} OUT {out})" for target, out in models.items()]
    lines += [f"add_executable({name} {' '.join(map(str, (driver, *extra_sources)))})"]
    if include_dirs:
        lines.append(f"target_include_directories({name} PRIVATE {' '.join(map(str, include_dirs))})")
    if link_options:
        lines.append(f"target_link_options({name} PRIVATE {' '.join(link_options)})")
    lines += [f"target_link_libraries({name} PRIVATE {' '.join(models)} tinyllm::numerics m)"]
    (proj / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    subprocess.run(["cmake", "-S", str(proj), "-B", str(proj / "b"), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   capture_output=True)
    subprocess.run(["cmake", "--build", str(proj / "b")], check=True, capture_output=True)
    return proj / "b" / name


def write_trees(root: Path, builds: dict) -> dict[str, Path]:
    """Compile each name -> (model path, CompileOptions) into root/name; returns name -> OUT tree."""
    from tinyllm_gen.compile import compile_path, write_tree

    outs = {}
    for name, (model, opts) in builds.items():
        outs[name] = root / name
        write_tree(compile_path(model, opts).tree, outs[name])
    return outs
