#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: unit tests (also under
# AddressSanitizer + UBSan, and ThreadSanitizer), integration tests with real processes on loopback,
# the decoder fuzzers for a bounded time, and the benchmark smoke.
#   FUZZ_SECONDS (default 60)   MESH_FUZZ_SECONDS (default 30)
#   HELLO_FUZZ_SECONDS (default 45)   CONTROL_FUZZ_SECONDS (default 45)
#   SKIP_INSTALL=1   SKIP_SANITIZERS=1 (ASan/UBSan and TSan)   SKIP_TSAN=1   SKIP_FUZZ=1
set -euo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then scripts/install-deps.sh; fi
ulimit -n "$(ulimit -Hn)" || true

step() { printf '\n==== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "build (RelWithDebInfo)"
BUILD_DIR=build scripts/build.sh

if [[ "${SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFLEETLINK_SANITIZE=address,undefined \
        -DFLEETLINK_BUILD_BENCH=OFF >/dev/null
  units=$(cmake --build build-asan --target help | awk '/unit_/ {print $2}' | tr '\n' ' ')
  # shellcheck disable=SC2086
  cmake --build build-asan -j"$(nproc)" --target $units
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan -L unit
fi

# ---- ThreadSanitizer (issue 15 point 7): the unit tests only -----------------------
if [[ "${SKIP_SANITIZERS:-0}" != 1 && "${SKIP_TSAN:-0}" != 1 ]]; then
  step "unit tests under ThreadSanitizer"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DFLEETLINK_SANITIZE=thread \
        -DFLEETLINK_BUILD_BENCH=OFF >/dev/null
  units=$(cmake --build build-tsan --target help | awk '/unit_/ {print $2}' | tr '\n' ' ')
  # shellcheck disable=SC2086
  cmake --build build-tsan -j"$(nproc)" --target $units
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir build-tsan -L unit
fi
# ---- end ThreadSanitizer ---------------------------------------------------------

if [[ "${SKIP_FUZZ:-0}" != 1 && -x tests/fuzz/run-fuzz.sh ]]; then
  step "fuzzing the frame decoder for ${FUZZ_SECONDS:-60}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${FUZZ_SECONDS:-60}"
  step "fuzzing the mesh note decoder for ${MESH_FUZZ_SECONDS:-30}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${MESH_FUZZ_SECONDS:-30}" fuzz_mesh_codec
fi

# ---- broker fuzzers (issue 15 point 7): the fleet core's HELLO path, the control API --
if [[ "${SKIP_FUZZ:-0}" != 1 && -x tests/fuzz/run-fuzz.sh ]]; then
  step "fuzzing the broker's fleet core (HELLO and after) for ${HELLO_FUZZ_SECONDS:-45}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${HELLO_FUZZ_SECONDS:-45}" fuzz_fleet_hello
  step "fuzzing the control API's bodies for ${CONTROL_FUZZ_SECONDS:-45}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${CONTROL_FUZZ_SECONDS:-45}" fuzz_control
fi
# ---- end broker fuzzers ----------------------------------------------------------

step "unit, integration and benchmark-smoke tests"
ctest --test-dir build --timeout 600
