# tinyllm-gen's runtime and generated models as CMake targets.
#
# Pull it into your own firmware project with either of
#
#   add_subdirectory(path/to/tinyllm-gen tinyllm)          # the repository's CMakeLists.txt includes this file
#   FetchContent_Declare(tinyllm SOURCE_DIR path/to/tinyllm-gen)  FetchContent_MakeAvailable(tinyllm)
#   include(path/to/TinyLLM.cmake)                         # also inside an OUT tree: OUT/cmake/TinyLLM.cmake
#
# and then
#
#   tinyllm_add_model(TARGET story OUT out/story)          # an OUT tree from `tinyllm-gen compile`
#   tinyllm_generate_model(TARGET story MODEL models/story-260k BOARD qemu-mps2-an500
#                          [OUT dir] [OPTIONS --group-size 64 ...] [DEPENDS files...])
#                                                          # runs `tinyllm-gen compile` at build time
#   target_link_libraries(my_firmware PRIVATE story)       # your main() calls tllm_api.h
#
# Targets:
#   tinyllm::numerics  INTERFACE: the compiler flags bit-exact tokens rest on (below). Linked
#                      privately by the runtime and every model, so your own code keeps your flags;
#                      link it yourself to anything that compiles runtime or model sources.
#   tinyllm::runtime   OBJECT library: kernels, sampler and the generation engine behind tllm_api.h
#                      (firmware/). Not the console main (tllm_main.c), not board code. An object
#                      library because the engine calls into the generated model: every model's
#                      static library carries the runtime's objects, so no link order can leave the
#                      engine's calls into the model unresolved.
#   <TARGET>           STATIC library: the generated model (src/tllm_model.c, src/tllm_vocab.c;
#                      src/tllm_weights.S when the board links the weights in), the model-bound
#                      runtime files (weights check, per-channel layers) and tinyllm::runtime.
#                      Properties TINYLLM_OUT (the OUT tree) and TINYLLM_WEIGHTS (OUT/weights.bin:
#                      flash it at the board's weights address when the weights are external).
#                      A `--speculate draft:MODEL` tree also makes <TARGET>_draft (OUT/draft), linked
#                      into <TARGET> with the table tllm_config.draft takes (tllm_console_draft);
#                      property TINYLLM_DRAFT names it.
#
# CPU flags (-mcpu, -mfpu, -mfloat-abi, -mthumb) are not set here: they come from your toolchain
# file or CMAKE_C_FLAGS, and must be the same for your code, the runtime and the model (one ABI).
include_guard(GLOBAL)
if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR "tinyllm-gen's CMake functions need CMake 3.20 or newer (this is ${CMAKE_VERSION})")
endif()

# Everything the functions below read is a cache variable: they are called from the user's
# directories, which do not see the variables of the directory that included this file.
#
# Where things are: a checkout (or the installed package) has firmware/ and boards/ beside cmake/;
# an OUT tree has its copy of the runtime in runtime/ and its one board in board/.
get_filename_component(_tinyllm_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(EXISTS "${_tinyllm_root}/firmware/tllm_api.h")
  set(TINYLLM_RUNTIME_DIR "${_tinyllm_root}/firmware")
elseif(EXISTS "${_tinyllm_root}/runtime/tllm_api.h")
  set(TINYLLM_RUNTIME_DIR "${_tinyllm_root}/runtime")
else()
  message(FATAL_ERROR "tinyllm-gen: no runtime beside ${CMAKE_CURRENT_LIST_DIR} "
                      "(neither ../firmware nor ../runtime holds tllm_api.h)")
endif()
set(TINYLLM_RUNTIME_DIR "${TINYLLM_RUNTIME_DIR}" CACHE INTERNAL "tinyllm-gen's C runtime")
set(TINYLLM_BOARDS_DIR "${_tinyllm_root}/boards" CACHE INTERNAL "tinyllm-gen's boards (absent in an OUT tree)")

set(TINYLLM_GEN_EXECUTABLE "" CACHE FILEPATH
    "tinyllm-gen executable for tinyllm_generate_model (empty: search PATH)")

# The model's generated sources (codegen/emit/render.py writes them); tllm_weights.S only
# when the board links the weights into the image (board.json weights.storage "incbin").
set(TINYLLM_MODEL_SOURCES src/tllm_model.c src/tllm_vocab.c CACHE INTERNAL "")
# Runtime files compiled with each model: they read the generated header (tllm_weights.c:
# the blob's size and checksum) or a per-model option (tllm_cmsis.c: CMSIS-NN or its twin).
set(TINYLLM_MODEL_RUNTIME_SOURCES tllm_weights.c tllm_cmsis.c CACHE INTERNAL "")

# ---------------------------------------------------------------------------------------------
# tinyllm::numerics: what the bit-exact tokens rest on. Every flag is there for a reason:
#   C11                 runtime and generated model are C11 (_Static_assert); GNU extensions (inline
#                       asm) stay allowed: CMake's default gnu11 is fine *with* the next flag.
#   -ffp-contract=off   no fusing of a*b+c into one FMA (rounded once): the numpy reference rounds
#                       the product and the sum. GCC's default in GNU mode is "fast", which on a
#                       Cortex-M7 emits VFMA and moves the bundled model's tokens at token 34.
#                       (Where fused/chained MACs are wanted the kernels spell them out: VMLA.)
#   -fno-math-errno     sqrtf/lroundf become single instructions (VSQRT, VCVTA) instead of libm
#                       calls that set errno; the results are the same, the instruction counts the
#                       README quotes need it.
# Not here: -fno-fast-math. -ffast-math (reassociated sums, reciprocal division, no NaN) cannot
# be undone per target reliably: GCC's -fno-fast-math turns errno back on, and CMake drops
# duplicate options, so "-fno-math-errno" after it can vanish (measured: +17% instructions per
# token). A -ffast-math build stops with an #error naming the fix instead.
# The C enforces what it can by itself (firmware/tllm_numerics.h): a pragma turns contraction
# off in every runtime and model function (also where CMake's de-duplication of options or a
# later -ffp-contract=fast would undo the flag), and -ffast-math / -ffinite-math-only stop the
# build.
if(NOT TARGET tinyllm_numerics)
  add_library(tinyllm_numerics INTERFACE)
  add_library(tinyllm::numerics ALIAS tinyllm_numerics)
  target_compile_features(tinyllm_numerics INTERFACE c_std_11)
  target_compile_options(tinyllm_numerics INTERFACE
    "$<$<COMPILE_LANG_AND_ID:C,GNU,Clang,AppleClang>:-ffp-contract=off;-fno-math-errno>")
endif()

# tinyllm::runtime: the model-independent runtime, compiled once.
if(NOT TARGET tinyllm_runtime)
  add_library(tinyllm_runtime OBJECT
    "${TINYLLM_RUNTIME_DIR}/tllm_kernels.c"
    "${TINYLLM_RUNTIME_DIR}/tllm_kernels_m7.c"
    "${TINYLLM_RUNTIME_DIR}/tllm_kernels_gguf.c"
    "${TINYLLM_RUNTIME_DIR}/tllm_kernels_gguf_m7.c"
    "${TINYLLM_RUNTIME_DIR}/tllm_sampler.c"
    "${TINYLLM_RUNTIME_DIR}/tllm_engine.c")
  add_library(tinyllm::runtime ALIAS tinyllm_runtime)
  target_include_directories(tinyllm_runtime PUBLIC "${TINYLLM_RUNTIME_DIR}")
  target_link_libraries(tinyllm_runtime PRIVATE tinyllm::numerics)
endif()

# tinyllm_add_model(TARGET <name> OUT <dir> [CMSIS_NN_ROOT <path>])
# A static library from an OUT tree written by `tinyllm-gen compile`.
function(tinyllm_add_model)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;OUT;CMSIS_NN_ROOT" "")
  if(NOT ARG_TARGET OR NOT ARG_OUT)
    message(FATAL_ERROR "tinyllm_add_model: TARGET <name> and OUT <dir> are required")
  endif()
  get_filename_component(out "${ARG_OUT}" ABSOLUTE)
  if(NOT EXISTS "${out}/manifest.json" OR NOT EXISTS "${out}/src/tllm_model.c")
    message(FATAL_ERROR "tinyllm_add_model: ${out} is not an OUT tree of tinyllm-gen (no manifest.json or "
                        "src/tllm_model.c): run `tinyllm-gen compile MODEL -o ${out}` first, or use "
                        "tinyllm_generate_model to compile the model at build time")
  endif()
  # A tree from a newer generator may have sources this file does not know about.
  file(GLOB present RELATIVE "${out}" "${out}/src/*.c")
  foreach(f IN LISTS present)
    if(NOT f IN_LIST TINYLLM_MODEL_SOURCES)
      message(FATAL_ERROR "tinyllm_add_model: ${out}/${f} is not a source this TinyLLM.cmake knows "
                          "(${TINYLLM_MODEL_SOURCES}): the tree comes from another tinyllm-gen version; "
                          "include its own ${out}/cmake/TinyLLM.cmake, or recompile it with this one")
    endif()
  endforeach()
  set(linked_weights OFF)
  if(EXISTS "${out}/src/tllm_weights.S")
    set(linked_weights ON)
  endif()
  _tinyllm_model_library("${ARG_TARGET}" "${out}" ${linked_weights} "${ARG_CMSIS_NN_ROOT}")
  if(EXISTS "${out}/draft/manifest.json")  # compile --speculate draft:MODEL
    set(draft_weights OFF)
    if(EXISTS "${out}/draft/src/tllm_weights.S")
      set(draft_weights ON)
    endif()
    _tinyllm_draft_library("${ARG_TARGET}" "${out}" ${draft_weights})
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${out}/manifest.json")
endfunction()

# tinyllm_generate_model(TARGET <name> MODEL <path> [BOARD <board>] [OUT <dir>]
#                        [OPTIONS <tinyllm-gen compile options>...] [DEPENDS <files>...]
#                        [CMSIS_NN_ROOT <path>])
# Runs `tinyllm-gen compile MODEL -o OUT --board BOARD OPTIONS...` at build time (again whenever
# the model's files or DEPENDS change), then makes the same library as tinyllm_add_model.
# BOARD defaults to TINYLLM_BOARD (qemu-mps2-an500 when unset); OUT to
# ${CMAKE_CURRENT_BINARY_DIR}/<name>.tinyllm. The generator is TINYLLM_GEN_EXECUTABLE, or
# tinyllm-gen on PATH.
function(tinyllm_generate_model)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;MODEL;BOARD;OUT;CMSIS_NN_ROOT" "OPTIONS;DEPENDS")
  if(NOT ARG_TARGET OR NOT ARG_MODEL)
    message(FATAL_ERROR "tinyllm_generate_model: TARGET <name> and MODEL <path> are required")
  endif()
  set(board "${ARG_BOARD}")
  if(NOT board)
    set(board "${TINYLLM_BOARD}")
  endif()
  if(NOT board)
    set(board qemu-mps2-an500)
  endif()
  set(out "${ARG_OUT}")
  if(NOT out)
    set(out "${CMAKE_CURRENT_BINARY_DIR}/${ARG_TARGET}.tinyllm")
  endif()
  get_filename_component(out "${out}" ABSOLUTE)
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE)
  if(NOT EXISTS "${model}")
    message(FATAL_ERROR "tinyllm_generate_model: MODEL ${model} does not exist")
  endif()

  _tinyllm_generator(gen)
  _tinyllm_board_links_weights("${board}" linked_weights)

  # Rebuild when any file of the model changes (a Hugging Face folder, an ONNX export with its
  # side files, or a llama2.c checkpoint).
  if(IS_DIRECTORY "${model}")
    file(GLOB model_files CONFIGURE_DEPENDS "${model}/*.json" "${model}/*.safetensors" "${model}/*.onnx"
         "${model}/*.onnx.data" "${model}/*.bin" "${model}/*.model")
  else()
    set(model_files "${model}")
  endif()

  set(outputs "${out}/manifest.json" "${out}/weights.bin" "${out}/src/tllm_model.h")
  foreach(s IN LISTS TINYLLM_MODEL_SOURCES)
    list(APPEND outputs "${out}/${s}")
  endforeach()
  if(linked_weights)
    list(APPEND outputs "${out}/src/tllm_weights.S")
  endif()
  # --speculate draft:MODEL writes a second model into OUT/draft (known from OPTIONS, since the
  # tree does not exist yet at configure time).
  _tinyllm_options_draft("${ARG_OPTIONS}" draft_model)
  if(draft_model)
    list(APPEND outputs "${out}/draft/manifest.json" "${out}/draft/src/tllm_model.h" "${out}/draft/tllm_draft_table.c")
    foreach(s IN LISTS TINYLLM_MODEL_SOURCES)
      list(APPEND outputs "${out}/draft/${s}")
    endforeach()
    if(linked_weights)
      list(APPEND outputs "${out}/draft/weights.bin" "${out}/draft/src/tllm_weights.S")
    endif()
    get_filename_component(draft_path "${draft_model}" ABSOLUTE)
    if(IS_DIRECTORY "${draft_path}")
      file(GLOB draft_files CONFIGURE_DEPENDS "${draft_path}/*.json" "${draft_path}/*.safetensors"
           "${draft_path}/*.onnx" "${draft_path}/*.onnx.data" "${draft_path}/*.bin" "${draft_path}/*.model")
      list(APPEND model_files ${draft_files})
    elseif(EXISTS "${draft_path}")
      list(APPEND model_files "${draft_path}")
    endif()
  endif()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${gen} compile "${model}" -o "${out}" --board "${board}" ${ARG_OPTIONS}
    DEPENDS ${model_files} ${ARG_DEPENDS}
    COMMENT "tinyllm-gen: compiling ${model} for ${board} into ${out}"
    VERBATIM)
  _tinyllm_model_library("${ARG_TARGET}" "${out}" ${linked_weights} "${ARG_CMSIS_NN_ROOT}")
  if(draft_model)
    _tinyllm_draft_library("${ARG_TARGET}" "${out}" ${linked_weights})
  endif()
endfunction()

# --- internals --------------------------------------------------------------------------------

function(_tinyllm_model_library name out linked_weights cmsis_nn_root)
  set(sources)
  foreach(s IN LISTS TINYLLM_MODEL_SOURCES)
    list(APPEND sources "${out}/${s}")
  endforeach()
  foreach(s IN LISTS TINYLLM_MODEL_RUNTIME_SOURCES)
    list(APPEND sources "${TINYLLM_RUNTIME_DIR}/${s}")
  endforeach()
  if(linked_weights)
    list(APPEND sources "${out}/src/tllm_weights.S")
    # .incbin the blob by its absolute path (a relative one is tried from the build directory
    # first, where another tree's weights.bin may be); rebuild when the blob changes.
    set_source_files_properties("${out}/src/tllm_weights.S" PROPERTIES
      COMPILE_OPTIONS "-Wa,-I${out}/src"
      COMPILE_DEFINITIONS "TLLM_WEIGHTS_FILE=\"${out}/weights.bin\""
      OBJECT_DEPENDS "${out}/weights.bin")
  endif()
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC "${out}/src")
  # libm: fmaxf/lroundf/sqrtf are calls where the compiler does not inline them (-O0)
  target_link_libraries(${name} PUBLIC tinyllm::runtime PRIVATE tinyllm::numerics m)
  set_target_properties(${name} PROPERTIES TINYLLM_OUT "${out}" TINYLLM_WEIGHTS "${out}/weights.bin")
  if(cmsis_nn_root)
    _tinyllm_use_cmsis_nn(${name} "${cmsis_nn_root}")
  endif()
endfunction()

# The draft model of a `--speculate draft:MODEL` tree (OUT/draft, symbols prefixed tllm_draft_):
# a library <name>_draft linked into <name>, which also gets the table the engine drafts with
# (OUT/draft/tllm_draft_table.c: `extern const tllm_draft_model tllm_console_draft;`, given to
# tllm_init as tllm_config.draft). Its weights: on a board that links them in, its own
# draft/src/tllm_weights.S; elsewhere after the target's in OUT/weights.bin, one file to flash.
function(_tinyllm_draft_library name out linked_weights)
  _tinyllm_model_library("${name}_draft" "${out}/draft" ${linked_weights} "")
  target_sources(${name} PRIVATE "${out}/draft/tllm_draft_table.c")
  target_link_libraries(${name} PUBLIC ${name}_draft)
  set_target_properties(${name} PROPERTIES TINYLLM_DRAFT ${name}_draft)
endfunction()

# The draft model named by `--speculate draft:MODEL[:k]` (or --speculate=draft:...) in a list of
# compile options, empty when there is none. MODEL may itself hold a ':' (a Windows drive):
# only a trailing :<digits> is k.
function(_tinyllm_options_draft options out_var)
  set(value "")
  set(next_is_value OFF)
  foreach(o IN LISTS options)
    if(next_is_value)
      set(value "${o}")
      set(next_is_value OFF)
    elseif(o STREQUAL "--speculate")
      set(next_is_value ON)
    elseif(o MATCHES "^--speculate=(.*)$")
      set(value "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(model "")
  if(value MATCHES "^draft:(.+)$")
    set(model "${CMAKE_MATCH_1}")
    if(model MATCHES "^(.+):[0-9]+$")
      set(model "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out_var} "${model}" PARENT_SCOPE)
endfunction()

# --quant per-channel models call CMSIS-NN when given a checkout; otherwise tinyllm-gen's own
# bit-identical C twin of its arithmetic runs (tllm_cmsis.c).
function(_tinyllm_use_cmsis_nn name root)
  if(NOT EXISTS "${root}/Include/arm_nnfunctions.h")
    message(FATAL_ERROR "CMSIS_NN_ROOT=${root} is not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)")
  endif()
  set(cmsis_sources
    "${root}/Source/ConvolutionFunctions/arm_convolve_1x1_s4.c"
    "${root}/Source/NNSupportFunctions/arm_nn_mat_mult_nt_t_s4.c")
  target_sources(${name} PRIVATE ${cmsis_sources})
  # CMSIS-NN is the user's code: its warnings are not ours to fail on.
  set_source_files_properties(${cmsis_sources} PROPERTIES COMPILE_OPTIONS "-Wno-error")
  target_include_directories(${name} PRIVATE "${root}/Include")
  target_compile_definitions(${name} PRIVATE TLLM_USE_CMSIS_NN=1)
  message(STATUS "tinyllm-gen: ${name}'s per-channel layers use CMSIS-NN from ${root}")
endfunction()

function(_tinyllm_generator out_var)
  if(NOT TINYLLM_GEN_EXECUTABLE)
    find_program(_tinyllm_gen_found tinyllm-gen)
    if(NOT _tinyllm_gen_found)
      message(FATAL_ERROR "tinyllm_generate_model: tinyllm-gen not found on PATH: `pip install tinyllm-gen` "
                          "(or `pip install -e <checkout>`), or pass -DTINYLLM_GEN_EXECUTABLE=/path/to/tinyllm-gen")
    endif()
    set(TINYLLM_GEN_EXECUTABLE "${_tinyllm_gen_found}" CACHE FILEPATH
        "tinyllm-gen executable for tinyllm_generate_model (empty: search PATH)" FORCE)
  endif()
  set(${out_var} "${TINYLLM_GEN_EXECUTABLE}" PARENT_SCOPE)
endfunction()

# Whether a board links the weights into the image (host) or expects them at an address
# (QEMU PSRAM, QSPI flash): board.json's weights.storage.
function(_tinyllm_board_links_weights board out_var)
  set(json "${TINYLLM_BOARDS_DIR}/${board}/board.json")
  if(NOT EXISTS "${json}")
    message(FATAL_ERROR "tinyllm_generate_model: unknown BOARD ${board} (no ${json})")
  endif()
  file(READ "${json}" doc)
  string(JSON storage GET "${doc}" weights storage)
  if(storage STREQUAL "incbin")
    set(${out_var} ON PARENT_SCOPE)
  else()
    set(${out_var} OFF PARENT_SCOPE)
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${json}")
endfunction()
