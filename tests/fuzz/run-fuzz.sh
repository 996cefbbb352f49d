#!/bin/bash
# Fuzz a fleetlink decoder for a bounded time; exit non-zero on any crash.
#   tests/fuzz/run-fuzz.sh BUILD_DIR [SECONDS] [TARGET]     (default 60 s, fuzz_codec)
# TARGET: fuzz_codec (the frame decoder), fuzz_mesh_codec (the mesh note decoder),
# fuzz_fleet_hello (frames into the broker's fleet core: HELLO and what follows) or
# fuzz_control (the control API's request bodies and stream lines).
# Configures a separate clang build of tests/fuzz in BUILD_DIR, builds TARGET with
# libFuzzer + ASan + UBSan, seeds it (fuzz_codec from tests/vectors/frames.txt,
# fuzz_mesh_codec from make_mesh_corpus.py, the broker's two from make_broker_corpus.py)
# and runs it with -max_total_time (FUZZ_RUNS=N: with -runs=N instead, for the long
# runs docs/FUZZING.md quotes; one process, one core).
# A crash leaves the input in BUILD_DIR/artifacts/ (the others: BUILD_DIR/<name>/artifacts/).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS] [TARGET]" >&2
  exit 2
fi
build_dir=$1
seconds=${2:-60}
case $seconds in ''|*[!0-9]*) echo "SECONDS must be a whole number" >&2; exit 2 ;; esac
target=${3:-fuzz_codec}
case $target in
  fuzz_codec) what="the frame decoder"; out=$build_dir; seeds=$out/seeds; max_len=20000 ;;
  fuzz_mesh_codec) what="the mesh note decoder"; out=$build_dir/mesh; seeds=$out/seeds; max_len=8192 ;;
  fuzz_fleet_hello) what="the broker's fleet core (HELLO and after)"; out=$build_dir/hello
                    seeds=$build_dir/broker-seeds/hello; max_len=16384 ;;
  fuzz_control) what="the control API's bodies"; out=$build_dir/control
                seeds=$build_dir/broker-seeds/control; max_len=8192 ;;
  *) echo "TARGET must be fuzz_codec, fuzz_mesh_codec, fuzz_fleet_hello or fuzz_control" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

command -v clang++ >/dev/null || { echo "run-fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }

cmake -S "$here" -B "$build_dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j2 --target "$target"

corpus=$out/corpus        # grows with what the fuzzer finds; seeds stay untouched
artifacts=$out/artifacts
mkdir -p "$corpus" "$artifacts"
rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*

runs=${FUZZ_RUNS:-}
case $runs in *[!0-9]*) echo "FUZZ_RUNS must be a whole number" >&2; exit 2 ;; esac
if [ -n "$runs" ]; then
  limit=(-runs="$runs"); echo "run-fuzz: fuzzing $what for $runs executions"
else
  limit=(-max_total_time="$seconds"); echo "run-fuzz: fuzzing $what for ${seconds}s"
fi
set +e
"$build_dir/$target" "$corpus" "$seeds" \
  "${limit[@]}" -max_len="$max_len" -timeout=10 -rss_limit_mb=1024 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 2>"$out/fuzz.log"
rc=$?
set -e
tail -n 20 "$out/fuzz.log"
if [ $rc -ne 0 ]; then
  echo "run-fuzz: FAILED (exit $rc); reproducer(s):" >&2
  ls -l "$artifacts" >&2
  exit 1
fi
if [ -n "$runs" ]; then echo "run-fuzz: no crash in $runs executions"; else echo "run-fuzz: no crash in ${seconds}s"; fi
