# Thin wrapper: the build is CMake (CMakeLists.txt), the tests are ctest.
#   make demo   install missing packages, build, run the CPU demo
#   make test   install missing packages, build, run every test
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo clean gpu-build

all: build

deps:
	@bash scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)/qeffect

# A portable binary for the GPU machine: CUDA on, LMDB/SQLite/xxhash/jansson/PCRE2 static.
gpu-build: deps
	cmake -S . -B build-gpu -DQE_CUDA=ON -DQE_STATIC_DEPS=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build build-gpu -j $(JOBS)

clean:
	rm -rf $(BUILD) build-gpu
