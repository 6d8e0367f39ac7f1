#!/usr/bin/env bash
# Runs every libFuzzer target of a build (BUILD/fuzz/fuzz_*) for SECONDS each under ASan+UBSan,
# starting from the seeds in tests/fuzz/seeds/<target> and a corpus kept in BUILD/fuzz/long_<target>,
# and prints per target: executions, coverage (edges), corpus size and findings.
# Usage: tools/fuzz_long.sh BUILD SECONDS [TARGET...]. Exit status 1 when any target found something
# (the reproducer is written as BUILD/fuzz/long_<target>/crash-* and named in the summary).
set -uo pipefail
build=${1:?usage: fuzz_long.sh BUILD SECONDS [TARGET...]}
seconds=${2:?usage: fuzz_long.sh BUILD SECONDS [TARGET...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd) || exit 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$build"/fuzz/fuzz_*; do [ -x "$f" ] && [ -f "$f" ] && targets+=("$(basename "$f")"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets in $build/fuzz (clang++ needed)" >&2; exit 2; }
# The fuzzers of `make test` are built at -O0 (they run seconds there); long runs want executions per
# second, so they get their own -O1 build next to it, configured like the first.
fuzz_cache="$build/fuzz/CMakeCache.txt"
[ -f "$fuzz_cache" ] || { echo "no fuzz build in $build/fuzz (clang++ needed)" >&2; exit 2; }
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$fuzz_cache"; }
long_build="$build/fuzz-long"
cmake -S "$root/tests/fuzz" -B "$long_build" -G Ninja -DCMAKE_BUILD_TYPE= -DMLXRT_FUZZ_OPT="-O1 -g" \
  -DCMAKE_CXX_COMPILER="$(cache_value CMAKE_CXX_COMPILER)" -DMLXRT_SOURCE_DIR="$(cache_value MLXRT_SOURCE_DIR)" \
  -DMLXRT_MLX_INCLUDE_DIR="$(cache_value MLXRT_MLX_INCLUDE_DIR)" \
  -DMLXRT_MLX_LIBRARY_DIR="$(cache_value MLXRT_MLX_LIBRARY_DIR)" -DMLXRT_PYTHON="$(cache_value MLXRT_PYTHON)" \
  >/dev/null || exit 2
cmake --build "$long_build" || exit 2
status=0
summary=()
for t in "${targets[@]}"; do
  bin="$long_build/$t"
  work="$build/fuzz/long_$t"
  mkdir -p "$work/corpus"
  seeds=()
  [ -d "$root/tests/fuzz/seeds/$t" ] && seeds=("$root/tests/fuzz/seeds/$t")
  log="$work/run.log"
  echo "== $t: ${seconds}s" >&2
  (cd "$work" && "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
     -artifact_prefix="$work/" "$work/corpus" "${seeds[@]}") >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(find "$work/corpus" -type f | wc -l)
  findings=$(find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
  if [ "$rc" -ne 0 ]; then status=1; fi
  summary+=("$(printf '%-26s execs %-12s cov %-7s corpus %-6s findings %s%s' "$t" "${execs:-?}" "${cov:-?}" \
    "$corpus" "$findings" "$([ "$rc" -ne 0 ] && echo " (exit $rc, see $log)")")")
done
printf '%s\n' "${summary[@]}"
exit $status
