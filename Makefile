# Thin wrapper over scripts/setup.sh, CMake and ctest. Every target can be run twice.
#   make demo | build | test | bench | fuzz | sanitize | tsan | format | format-check | clean
# CI=true (set by .ci/run) turns warnings into errors.

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Sanitized binaries stop at the first UBSan report instead of printing and going on.
export UBSAN_OPTIONS ?= halt_on_error=1:print_stacktrace=1

# Every tessera_fuzzer(...) in fuzz/CMakeLists.txt, so the list cannot drift from ctest's.
FUZZ_TARGETS := $(shell sed -n 's/^tessera_fuzzer.\([A-Za-z0-9_]*\).*/\1/p' fuzz/CMakeLists.txt)
F := $(firstword $(FUZZ_TARGETS))
FUZZ_SECONDS := 20
WERROR := -DTESSERA_WERROR=$(if $(filter true,$(CI)),ON,OFF)
CONFIGURE := cmake -S . -G Ninja $(WERROR)
CTEST := ctest --output-on-failure --no-tests=error -L 'unit|model|multinode|gpu' -j2

FUZZ_CONFIGURE := CC=clang CXX=clang++ $(CONFIGURE) -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTESSERA_FUZZ=ON -DTESSERA_TESTS=OFF -DTESSERA_SANITIZE=address,undefined -DTESSERA_FUZZ_SECONDS=$(FUZZ_SECONDS)
FUZZ_BUILD := cmake --build build-fuzz --target $(FUZZ_TARGETS)
# Recursive (=), so it is looked up when a recipe runs, after deps may have installed clang.
HAVE_CLANG = $(shell command -v clang++)
NO_CLANG := clang++ not found (scripts/setup.sh installs clang and libclang-rt-14-dev)

DEMO_MODEL := models/tessera-tiny

# Every C++ source that clang-format checks (CI fails on a file it would change).
FORMAT_FILES = find src tests fuzz bench \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0

.PHONY: all deps build build-demo test fuzz demo bench sanitize tsan format format-check clean
all: build

deps:
	@bash scripts/setup.sh
	@bash tests/serve/openai_client/install.sh

build: deps
	$(CONFIGURE) -B build -DCMAKE_BUILD_TYPE=Release
	cmake --build build

# Only the tessera binary: what `make demo` runs.
build-demo: deps
	$(CONFIGURE) -B build -DCMAKE_BUILD_TYPE=Release
	cmake --build build --target tessera

test: format-check build
	bash scripts/fetch_test_material.sh || echo "make test: test material could not be fetched; the tests that need it skip"
	$(CTEST) --test-dir build
	$(if $(HAVE_CLANG),$(FUZZ_CONFIGURE),@echo "make test: fuzz tests skipped: $(NO_CLANG)")
	$(if $(HAVE_CLANG),$(FUZZ_BUILD))
	$(if $(HAVE_CLANG),ctest --test-dir build-fuzz -L fuzz --output-on-failure --no-tests=error -j2)

fuzz: deps
	$(if $(HAVE_CLANG),,@echo "make fuzz: $(NO_CLANG)" >&2; exit 1)
	$(FUZZ_CONFIGURE)
	$(FUZZ_BUILD)
	@echo "Fuzzers are in build-fuzz/bin: $(FUZZ_TARGETS). To run one for an hour (new inputs go to the first corpus dir):"
	@echo "  build-fuzz/bin/$(F) -max_total_time=3600 -rss_limit_mb=1024 build-fuzz/fuzz/$(F)_corpus fuzz/corpus/$(F)"

demo: build-demo
	@echo "demo: tessera-tiny, the project's own 9.4M-parameter model (models/tessera-tiny/README.md)"
	DEMO_MODEL=$(DEMO_MODEL) scripts/demo.sh

bench: build
	build/bin/tessera bench --config bench/shapes/llama-3.2-1b.json --random-weights --seed 1 --threads 2

sanitize: deps
	$(CONFIGURE) -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=address,undefined
	cmake --build build-asan
	$(CTEST) --test-dir build-asan

tsan: deps
	$(CONFIGURE) -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_SANITIZE=thread
	cmake --build build-tsan
	TESSERA_DIST_QUICK=1 $(CTEST) --test-dir build-tsan

format:
	$(FORMAT_FILES) | xargs -0 clang-format -i

format-check: deps
	$(FORMAT_FILES) | xargs -0 clang-format --dry-run -Werror
	@echo "format-check: every source is as clang-format writes it"

clean:
	rm -rf build build-fuzz build-asan build-tsan
