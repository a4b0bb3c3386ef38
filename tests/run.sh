#!/usr/bin/env bash
# The test command: install and build (Release, warnings as errors), run the
# whole CTest suite; build the CUDA backend on the CPU's execution model of
# CUDA (tests/gpu/emu, build-emu/) and run its label gpu-emu; then build with
# AddressSanitizer + UBSan (with the CUDA backend on that model too) and run
# the unit, bad-input and "sanitize" tests under it; end with the list of
# tests that were skipped, each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
# x86-64-v3: the suite's builds run the same code on every CPU (see
# CMakeLists.txt's MT_ARCH), so tests/reference's bitwise losses hold on any
ARCH=-DMT_ARCH=x86-64-v3
bash apps/scripts/setup.sh build -DMT_WERROR=ON "$ARCH"
source apps/scripts/env.sh build
JOBS=$(nproc 2>/dev/null || echo 2)
status=0
ROOT=$PWD
rm -f build/junit.xml build-emu/junit.xml build-asan/junit.xml
(cd build && ctest --output-on-failure -j "$JOBS" --output-junit "$ROOT/build/junit.xml" "$@") || status=1

echo "== the CUDA backend and NCCL on the CPU (tests/gpu/emu), label gpu-emu =="
cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_CUDA_EMU=ON "$ARCH" >/dev/null
cmake --build build-emu -j "$JOBS" --target gpu_emu_all >/dev/null
(cd build-emu && ctest --output-on-failure -j "$JOBS" -L gpu-emu \
  --output-junit "$ROOT/build-emu/junit.xml" "$@") || status=1

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
bash apps/scripts/setup.sh build-asan -DMT_WERROR=ON -DMT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DMT_CUDA_EMU=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0
# keep MPI's plugins loaded at exit so their allocations are attributed (and suppressed)
export OMPI_MCA_mca_base_component_disable_dlclose=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# the tests' inputs (corpora, token files) from the release build's tools
export MT_INPUT_BIN=$ROOT/build/bin
(cd build-asan && ctest --output-on-failure -j "$JOBS" -L 'unit|sanitize|badinput' \
  --output-junit "$ROOT/build-asan/junit.xml" "$@") || status=1

# what did not run here, and why (a test that cannot run prints "SKIP: <reason>", exits 77)
echo "== Skipped tests =="
python3 tests/scripts/list_skipped.py build/junit.xml build-emu/junit.xml build-asan/junit.xml
exit $status
