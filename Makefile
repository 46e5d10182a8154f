# The two entry points from the README: `make demo` and `make test`. Both install what they
MAKEFLAGS += --no-print-directory
# need from Debian's packages first, then build with CMake.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test test-asan interop clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300
	@$(MAKE) --no-print-directory test-asan

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer (the interop tests,
# which mostly time a VM or a capture, run in the Release pass only).
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNVTCP_SANITIZE=ON -DNVTCP_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 -LE interop

# Every interoperability test (tshark, Linux kernel host and target in QEMU).
interop: build
	@cd $(BUILD) && ctest --output-on-failure -L interop

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
