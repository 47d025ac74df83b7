# CMake toolchain file for arm-none-eabi-gcc (bare-metal Cortex-M, newlib).
#
#   cmake -S . -B build -DCMAKE_TOOLCHAIN_FILE=<this file>
#
# Set ARM_TOOLCHAIN_DIR (cache variable or environment) to use a toolchain
# that is not on PATH.  CPU flags come from the board (board.json "cflags" and
# "ldflags"); this file only picks the tools and the C library flavour.
#
# The link uses newlib-nano (--specs=nano.specs).  Give that flag only once:
# gcc refuses a second --specs=nano.specs ("attempt to rename spec").  The
# board sources provide the syscalls (_write, _sbrk, ...), so no nosys.specs.

set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
# Compiler checks build a static library: a bare-metal link needs a linker script.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

if(NOT ARM_TOOLCHAIN_DIR AND DEFINED ENV{ARM_TOOLCHAIN_DIR})
  set(ARM_TOOLCHAIN_DIR "$ENV{ARM_TOOLCHAIN_DIR}")
endif()
set(ARM_TOOLCHAIN_DIR "${ARM_TOOLCHAIN_DIR}" CACHE PATH "Directory holding arm-none-eabi-gcc (empty: search PATH)")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ARM_TOOLCHAIN_DIR)

set(_tllm_hints)
if(ARM_TOOLCHAIN_DIR)
  set(_tllm_hints HINTS "${ARM_TOOLCHAIN_DIR}" "${ARM_TOOLCHAIN_DIR}/bin")
endif()

find_program(ARM_NONE_EABI_GCC arm-none-eabi-gcc ${_tllm_hints} REQUIRED)
get_filename_component(_tllm_bin "${ARM_NONE_EABI_GCC}" DIRECTORY)
find_program(CMAKE_OBJCOPY arm-none-eabi-objcopy HINTS "${_tllm_bin}" REQUIRED)
find_program(CMAKE_OBJDUMP arm-none-eabi-objdump HINTS "${_tllm_bin}" REQUIRED)
find_program(CMAKE_SIZE arm-none-eabi-size HINTS "${_tllm_bin}" REQUIRED)
find_program(CMAKE_AR arm-none-eabi-ar HINTS "${_tllm_bin}" REQUIRED)
find_program(CMAKE_RANLIB arm-none-eabi-ranlib HINTS "${_tllm_bin}" REQUIRED)

set(CMAKE_C_COMPILER "${ARM_NONE_EABI_GCC}")
set(CMAKE_ASM_COMPILER "${ARM_NONE_EABI_GCC}")

set(CMAKE_C_FLAGS_INIT "")
set(CMAKE_EXE_LINKER_FLAGS_INIT "--specs=nano.specs")

# Never pick up host headers or libraries.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
