#!/bin/bash
# Fuzz the fleetlink frame decoder for a bounded time; exit non-zero on any crash.
#   tests/fuzz/run-fuzz.sh BUILD_DIR [SECONDS]     (default 60 s)
# Configures a separate clang build of tests/fuzz in BUILD_DIR, builds fuzz_codec with
# libFuzzer + ASan + UBSan, seeds it from tests/vectors/frames.txt and runs it with
# -max_total_time. A crash leaves the input in BUILD_DIR/artifacts/.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build_dir=$1
seconds=${2:-60}
case $seconds in ''|*[!0-9]*) echo "SECONDS must be a whole number" >&2; exit 2 ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

command -v clang++ >/dev/null || { echo "run-fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }

cmake -S "$here" -B "$build_dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j2 --target fuzz_codec

corpus=$build_dir/corpus        # grows with what the fuzzer finds; seeds stay untouched
artifacts=$build_dir/artifacts
mkdir -p "$corpus" "$artifacts"
rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*

echo "run-fuzz: fuzzing the frame decoder for ${seconds}s"
set +e
"$build_dir/fuzz_codec" "$corpus" "$build_dir/seeds" \
  -max_total_time="$seconds" -max_len=20000 -timeout=10 -rss_limit_mb=1024 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 2>"$build_dir/fuzz.log"
rc=$?
set -e
tail -n 20 "$build_dir/fuzz.log"
if [ $rc -ne 0 ]; then
  echo "run-fuzz: FAILED (exit $rc); reproducer(s):" >&2
  ls -l "$artifacts" >&2
  exit 1
fi
echo "run-fuzz: no crash in ${seconds}s"
