# find_package(TinyLLM CONFIG) support: the same functions and targets as add_subdirectory,
# from a checkout's cmake/ or from the installed Python package, whose cmake/ directory
#   python -c "import tinyllm_gen.resources as r; print(r.cmake_dir())"
# prints (pass it as TinyLLM_DIR or in CMAKE_PREFIX_PATH / PATHS).
include("${CMAKE_CURRENT_LIST_DIR}/TinyLLM.cmake")
set(TinyLLM_FOUND TRUE)
