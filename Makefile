# tinyllm-gen: the two commands that work on a fresh Debian 12 machine.
#   make demo   bundled model -> INT4 firmware -> Cortex-M7 under QEMU -> story + memory report
#   make test   the whole test suite (unit, host gcc, QEMU tiers)
SHELL := /bin/bash
PYTHON ?= python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm cmake make gcc openocd
DEMO_OUT ?= out/demo
DEMO_MODEL ?= models/story-260k
DEMO_PROMPT ?= Once upon a time
DEMO_ARGS ?= --max-new-tokens 400 --temperature 0.8 --top-p 0.9 --seed 42

.PHONY: demo test toolchain install install-test bench clean

toolchain:
	@if ! command -v arm-none-eabi-gcc >/dev/null || ! command -v qemu-system-arm >/dev/null \
	    || ! command -v cmake >/dev/null || ! command -v openocd >/dev/null \
	    || [ ! -d /usr/lib/arm-none-eabi/newlib ]; then \
	  echo "== installing the toolchain: $(APT_PACKAGES)"; \
	  $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $(APT_PACKAGES); \
	fi

install: toolchain
	$(PYTHON) -m pip install -q -e .

# torch is pinned in the extras: any other spec pulls several GB of CUDA wheels.
install-test: toolchain
	$(PYTHON) -m pip install -q -e '.[test]'

demo: install
	tinyllm-gen inspect $(DEMO_MODEL)
	tinyllm-gen compile $(DEMO_MODEL) -o $(DEMO_OUT) --board qemu-mps2-an500
	tinyllm-gen build $(DEMO_OUT)
	tinyllm-gen run $(DEMO_OUT) --prompt "$(DEMO_PROMPT)" $(DEMO_ARGS)
	tinyllm-gen report $(DEMO_OUT)

# One worker per core (pytest-xdist), whole files per worker so a module's fixtures are built once.
test: install-test
	$(PYTHON) -m pytest -q -n auto --dist loadfile

# Exact instruction counts (QEMU + the project's TCG plugin) on a random-weight
# stories260K-shape model; CMSIS_NN_ROOT=<checkout> adds CMSIS-NN's kernels.
bench: install
	tinyllm-gen bench --shape stories260k --group-size 32 --position 10

clean:
	rm -rf out build .pytest_cache
