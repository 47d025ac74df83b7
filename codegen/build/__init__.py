"""Building an emitted OUT: the CMake driver (cmake.py) and what a compiled
OUT holds for the later stages (out.py)."""
