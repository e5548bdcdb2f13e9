# Thin wrapper over CMake. `make` builds everything into build/ (the command line at build/etch).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ETCH_MODELS_DIR ?= $(abspath assets/models)
export ETCH_MODELS_DIR

.PHONY: all setup configure test test-sanitize fuzz demo bench bench-llamacpp clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

setup:
	bash scripts/setup.sh

# A configure that failed (a library missing before `make setup`) leaves CMakeCache.txt but no
# Makefile: the generated Makefile, not the cache, says the build directory is ready.
configure:
	@test -f $(BUILD)/Makefile || cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

# Every test, under ctest. Installs what is missing first.
test: setup
	$(MAKE) all CMAKE_FLAGS="-DETCH_WERROR=ON $(CMAKE_FLAGS)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The test suite again in two more builds: AddressSanitizer + UndefinedBehaviorSanitizer (with
# LeakSanitizer) over every test but test_install (it links the installed library into programs built
# without the flags); test_python runs with the sanitizer runtimes preloaded into Debian's python3,
# leak detection off (the interpreter's own memory at exit). Then ThreadSanitizer over the tests that
# run sessions on several threads. Any report fails the run. The npm peers, the Python env and the
# real models' cache are the plain build's (`make test` made them), not fetched a second time.
test-sanitize: setup
	cmake -S . -B $(BUILD)-asan -DETCH_WERROR=ON -DETCH_SANITIZE=address >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ETCH_NPM_DIR=$(abspath $(BUILD))/npm ETCH_PYENV_DIR=$(abspath $(BUILD))/pyenv \
	  ETCH_REAL_MODELS_DIR=$(abspath $(BUILD))/real-models ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -E "test_python|test_install|test_pip"
	cd $(BUILD)-asan && LD_PRELOAD="$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -R test_python
	cmake -S . -B $(BUILD)-tsan -DETCH_WERROR=ON -DETCH_SANITIZE=thread >/dev/null
	cmake --build $(BUILD)-tsan -j $(JOBS) --target test_concurrency test_window test_prefill test_untrusted
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "test_concurrency|test_window|test_prefill|test_untrusted"

# Every libFuzzer harness (fuzz/) for FUZZ_SECONDS each, under ASan and UBSan, built with clang.
FUZZ_SECONDS ?= 60
fuzz: setup
	CC=clang cmake -S . -B $(BUILD)-fuzz -DETCH_SANITIZE=fuzzer -DETCH_TESTS=OFF >/dev/null
	cmake --build $(BUILD)-fuzz -j $(JOBS)
	bash fuzz/run.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

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
