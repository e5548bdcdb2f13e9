# Thin wrapper over CMake. `make` builds everything into build/ (the command line at build/etch).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ETCH_MODELS_DIR ?= $(abspath ../shared/models)
export ETCH_MODELS_DIR

.PHONY: all setup configure test demo bench bench-llamacpp clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

setup:
	bash scripts/setup.sh

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

# Every test, under ctest. Installs what is missing first.
test: setup
	$(MAKE) all CMAKE_FLAGS="-DETCH_WERROR=ON $(CMAKE_FLAGS)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The main job: build, export stories260K, generate a story with stats.
demo: setup all
	bash scripts/demo.sh

# Time to first token with batched and sequential prefill, prompt and decode rates (figures, not a test).
bench: setup all
	bash bench/prefill.sh

# etch beside llama.cpp on the Qwen3-0.6B preset (F16): about 8 minutes. Figures, not a test.
bench-llamacpp: setup all
	bash bench/vs_llamacpp.sh

clean:
	rm -rf $(BUILD)
