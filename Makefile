# SPDX-License-Identifier: Apache-2.0
# The two entry points from the README: `make demo` and `make test`. Both install what they
MAKEFLAGS += --no-print-directory
# need first (`make deps`: Debian's packages and fio's headers), then build with CMake.
# Building alone (`make`, `make build`, cmake) never installs or downloads anything.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= $(shell nproc)

PREFIX ?= /usr/local

.PHONY: all deps build demo test release-tests test-asan asan-build asan-tests test-tsan tsan-build tsan-tests \
  interop fuzz fuzz-build fuzz-smoke fuzz-smoke-run install package clean

all: build

deps:
	@bash scripts/install-deps.sh

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: deps
	@$(MAKE) build
	@bash scripts/demo.sh $(BUILD)

# Binaries, libnvtcp (shared and static), headers, CMake package, nvtcp.pc, fio engine, and the
# nvtcp-target service with its configuration (in /etc/nvtcp when PREFIX is /usr).
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The Debian packages, in $(BUILD): nvtcp, libnvtcp0 and libnvtcp-dev, each _<version>_<arch>.deb.
package: build
	@cd $(BUILD) && cpack -G DEB

# The Release tests, then the same under ASan + UBSan, the threaded ones under TSan and every
# fuzzer briefly; the sanitizer and fuzzer trees build at idle priority while the passes before
# them run (scripts/make-test.sh says why, and prints where the time went).
test: deps
	@MAKE="$(MAKE)" bash scripts/make-test.sh

# BENCH_TESTS=exclude or only: the passes without or with only the tests labelled bench, which
# measure (make-test.sh runs them apart, with the background builds paused); empty: all.
BENCH_LABEL = $(if $(filter only,$(BENCH_TESTS)),-L bench,$(if $(filter exclude,$(BENCH_TESTS)),-LE bench,))
release-tests:
	@bash scripts/ctest-with-skips.sh $(BUILD) --output-on-failure -j $(JOBS) --timeout 300 $(BENCH_LABEL)

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer. Two labels run in the
# Release pass only: the interop tests, which mostly time a VM or a capture, and the layering
# tests, which compile headers and run nothing a sanitizer could watch.
test-asan: asan-build
	@$(MAKE) asan-tests

asan-build:
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNVTCP_SANITIZE=ON -DNVTCP_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

ASAN_LABELS = $(if $(filter only,$(BENCH_TESTS)),-L bench,-LE 'interop|layering$(if $(filter exclude,$(BENCH_TESTS)),|bench)')
asan-tests:
	@bash scripts/ctest-with-skips.sh $(ASAN_BUILD) --output-on-failure -j $(JOBS) --timeout 300 $(ASAN_LABELS)

# The multi-threaded paths under ThreadSanitizer: every test labelled `threaded`. That is every
# suite of the integration binary (target reactors and host threads side by side: several target
# reactors, the host's admin thread, reconnects, SQ-poll and zero-copy modes, the engine, a RAM
# namespace written and read from two reactors at once, the durability hooks and the power-loss
# device that the test thread cuts, Abort and asynchronous events crossing from one reactor to
# another, reservations shared by hosts on several reactors, ...) and the suites of each unit
# test file that starts threads; then the CLI's target --cores 2 against perf --cores 2 -P 2.
# The label is given where the tests are declared (CMakeLists.txt: to the whole integration
# binary, and to a unit test file found to start a thread), so a new suite runs here without
# anyone adding it to a list; `ctest -N -L threaded` in any build shows the set. Only nvtcp and
# the two test binaries that carry the label are built (-O1): a label on another binary needs it
# added to the build line below. TSan's shadow memory sits at fixed addresses, which some
# kernels' mmap randomization (vm.mmap_rnd_bits > 28) collides with: setarch -R turns address
# randomization off for these processes only, leaving the sysctl alone.
TSAN_RUN := $(shell setarch $$(uname -m) -R true 2>/dev/null && echo setarch $$(uname -m) -R)
TSAN_ENV := TSAN_OPTIONS="second_deadlock_stack=1 $(TSAN_OPTIONS)"
test-tsan: tsan-build
	@$(MAKE) tsan-tests

tsan-build:
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DNVTCP_SANITIZE=thread -DNVTCP_BENCH=OFF \
	  -DNVTCP_FIO=OFF >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target nvtcp nvtcp_unit_tests nvtcp_integration_tests

tsan-tests:
	@$(TSAN_ENV) $(TSAN_RUN) bash scripts/ctest-with-skips.sh $(TSAN_BUILD) --output-on-failure -j $(JOBS) \
	  --timeout 300 -L threaded
	@$(TSAN_ENV) $(TSAN_RUN) bash tests/tsan/cli_multicore.sh $(TSAN_BUILD)/nvtcp

# libFuzzer targets (clang, ASan + UBSan) on everything that parses bytes from the network
# or text from users. fuzz-smoke runs each briefly from the seed corpus (part of make test);
# fuzz runs each for FUZZ_SECONDS and keeps what it finds in build-fuzz/corpus-*.
FUZZ_BUILD ?= build-fuzz
FUZZERS := pdu_receiver parsers target_connection host_connection controller_state engine_queue engine_controller auth tls rpc metrics_http
FUZZ_SECONDS ?= 600
# Each fuzzer's smoke run, JOBS of them at a time (each is one process on one core): its seed
# corpus replayed (every input that once crashed a parser is in it), then fresh inputs for the
# rest of the time. `make fuzz` is the long search.
FUZZ_SMOKE_SECONDS ?= 6
# -O1 with line tables, as OSS-Fuzz builds its fuzzers: a quarter less compile time than -O2 -g.
fuzz-build:
	@CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DNVTCP_FUZZ=ON \
	  -DNVTCP_TESTS=OFF -DNVTCP_BENCH=OFF -DNVTCP_FIO=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZERS))

fuzz-smoke: fuzz-build
	@$(MAKE) fuzz-smoke-run

fuzz-smoke-run:
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SMOKE_SECONDS=$(FUZZ_SMOKE_SECONDS) bash scripts/fuzz-smoke.sh $(JOBS) $(FUZZERS)

fuzz: fuzz-build
	@for f in $(FUZZERS); do mkdir -p $(FUZZ_BUILD)/corpus-$$f; \
	  $(FUZZ_BUILD)/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    $(FUZZ_BUILD)/corpus-$$f tests/fuzz/corpus/$$f || exit 1; done

# Every interoperability test (tshark, Linux kernel host and target in QEMU).
interop: build
	@cd $(BUILD) && ctest --output-on-failure -L interop

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
