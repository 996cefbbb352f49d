#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: unit tests (also under
# AddressSanitizer + UBSan, and ThreadSanitizer), the decoder and broker fuzzers for a bounded time, unit,
# integration and benchmark-smoke tests with real processes on loopback (on a
# host made to look as if fleetlink were installed and misconfigured, which the
# tests must not notice), and the .deb packages installed, upgraded and used in a
# fresh Debian root.
#   FUZZ_SECONDS (default 60)   MESH_FUZZ_SECONDS (default 30)
#   HELLO_FUZZ_SECONDS (default 45)   CONTROL_FUZZ_SECONDS (default 45)
#   SKIP_INSTALL=1   SKIP_SANITIZERS=1 (ASan/UBSan and TSan)   SKIP_TSAN=1   SKIP_FUZZ=1   SKIP_CHROOT=1
# A step skipped on request is listed in the final summary; under CI (CI=true)
# any skipped step fails the run. Runs as root (apt-get, mount namespaces,
# debootstrap and chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
export CTEST_OUTPUT_ON_FAILURE=1

current_step=setup
skipped=()
done_steps=()
started=$(date +%s)
step() {
  [[ $current_step == setup ]] || done_steps+=("$current_step ($(( $(date +%s) - step_started ))s)")
  current_step=$*
  step_started=$(date +%s)
  printf '\n==== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"
}
skip() { skipped+=("$1 ($2)"); printf '\n==== SKIPPED: %s (%s)\n' "$1" "$2"; }
on_exit() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    printf '\n==== scripts/test.sh FAILED in step: %s (exit %d)\n' "$current_step" "$status" >&2
  fi
}
trap on_exit EXIT

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then scripts/install-deps.sh; fi
ulimit -n "$(ulimit -Hn)" || true

# Every option a test needs, given explicitly: the build directory may hold a
# cache from scripts/demo.sh (benchmarks off) or from a developer's own
# configuration, and a test of a part that was not built would fail. The
# install prefix is /usr because the packages below are built from this tree.
step "build (RelWithDebInfo, tests, benchmarks and packaging on)"
BUILD_DIR=build scripts/build.sh \
  -DFLEETLINK_BUILD_TESTS=ON -DFLEETLINK_BUILD_BENCH=ON -DFLEETLINK_PACKAGING=ON \
  -DFLEETLINK_BUILD_FUZZ=OFF -DFLEETLINK_SANITIZE= -DCMAKE_INSTALL_PREFIX=/usr

if [[ "${SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFLEETLINK_SANITIZE=address,undefined \
        -DFLEETLINK_BUILD_TESTS=ON -DFLEETLINK_BUILD_BENCH=OFF -DFLEETLINK_BUILD_FUZZ=OFF >/dev/null
  units=$(cmake --build build-asan --target help | awk '/unit_/ {print $2}' | tr '\n' ' ')
  # shellcheck disable=SC2086
  cmake --build build-asan -j"$(nproc)" --target $units
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    tests/run-on-poisoned-host ctest --test-dir build-asan -L unit --no-tests=error
else
  skip "unit tests under ASan + UBSan" "SKIP_SANITIZERS=1"
fi

# ---- ThreadSanitizer (issue 15 point 7): the unit tests only -----------------------
if [[ "${SKIP_SANITIZERS:-0}" != 1 && "${SKIP_TSAN:-0}" != 1 ]]; then
  step "unit tests under ThreadSanitizer"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DFLEETLINK_SANITIZE=thread \
        -DFLEETLINK_BUILD_TESTS=ON -DFLEETLINK_BUILD_BENCH=OFF -DFLEETLINK_BUILD_FUZZ=OFF >/dev/null
  units=$(cmake --build build-tsan --target help | awk '/unit_/ {print $2}' | tr '\n' ' ')
  # shellcheck disable=SC2086
  cmake --build build-tsan -j"$(nproc)" --target $units
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
    tests/run-on-poisoned-host ctest --test-dir build-tsan -L unit --no-tests=error
else
  skip "unit tests under ThreadSanitizer" "SKIP_SANITIZERS=1 or SKIP_TSAN=1"
fi
# ---- end ThreadSanitizer ---------------------------------------------------------

if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzzing the frame decoder for ${FUZZ_SECONDS:-60}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${FUZZ_SECONDS:-60}"
  step "fuzzing the mesh note decoder for ${MESH_FUZZ_SECONDS:-30}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${MESH_FUZZ_SECONDS:-30}" fuzz_mesh_codec
else
  skip "fuzzing" "SKIP_FUZZ=1"
fi

# ---- broker fuzzers (issue 15 point 7): the fleet core's HELLO path, the control API --
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzzing the broker's fleet core (HELLO and after) for ${HELLO_FUZZ_SECONDS:-45}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${HELLO_FUZZ_SECONDS:-45}" fuzz_fleet_hello
  step "fuzzing the control API's bodies for ${CONTROL_FUZZ_SECONDS:-45}s"
  tests/fuzz/run-fuzz.sh build-fuzz "${CONTROL_FUZZ_SECONDS:-45}" fuzz_control
else
  skip "the broker fuzzers" "SKIP_FUZZ=1"
fi
# ---- end broker fuzzers ----------------------------------------------------------

# The host looks as if fleetlink were installed: /etc/fleetlink/agent.conf and
# broker.conf exist and hold a key no program accepts, /var/lib/fleetlink* exist.
# A test that reads them fails; a test that writes /etc, /var/lib or /usr fails
# the step. All of it in a mount namespace: the host itself is untouched
# (tests/run-on-poisoned-host). A skipped test fails its module
# (tests/integration/run_module.py).
step "unit, integration and benchmark-smoke tests, on a host with a poisoned /etc/fleetlink"
tests/run-on-poisoned-host ctest --test-dir build --timeout 600 --no-tests=error

if [[ "${SKIP_CHROOT:-0}" != 1 ]]; then
  # Two sets of .deb from this tree: this version, and the same packages
  # versioned just below it (VERSION~ci.previous) to upgrade from.
  step "packages in a fresh Debian root: install, run, upgrade keeping an edited config, build a plugin"
  debs=$(mktemp -d /tmp/fleetlink-ci-debs.XXXXXX)
  version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' build/CMakeCache.txt)
  [[ -n $version ]] || { echo "test.sh: no CMAKE_PROJECT_VERSION in build/CMakeCache.txt" >&2; exit 1; }
  (cd build && cpack -G DEB -B "$debs/current" >/dev/null)
  (cd build && cpack -G DEB -B "$debs/previous" -D CPACK_PACKAGE_VERSION="$version~ci.previous" \
     -D CPACK_DEBIAN_PACKAGE_VERSION="$version~ci.previous" >/dev/null)
  packaging/check-install-in-chroot --previous "$debs/previous" "$debs/current"
  rm -rf "$debs"
else
  skip "packages in a fresh Debian root" "SKIP_CHROOT=1"
fi
done_steps+=("$current_step ($(( $(date +%s) - step_started ))s)")
current_step=summary
printf '\n==== summary (%ds in all)\n' "$(( $(date +%s) - started ))"
for s in "${done_steps[@]}"; do echo "  passed: $s"; done
for s in "${skipped[@]}"; do echo "  SKIPPED: $s"; done
if [[ ${#skipped[@]} -gt 0 && "${CI:-}" == true ]]; then
  echo "scripts/test.sh: ${#skipped[@]} step(s) skipped under CI: that is a failure" >&2
  current_step="summary: skipped steps under CI"
  exit 1
fi
