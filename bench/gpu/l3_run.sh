#!/usr/bin/env bash
# The L3 CUDA kernels on a CUDA machine without a package registry, with the bundle of
# bench/gpu/prepare.sh: installs the carried wheels (run.sh env install build), then the steps
# named in L3_STEPS (default "tests qmv decode"):
#   tests:  mlxrt_cuda_kernel_tests (the L3 matrix-vector product against float64, the fused
#           gated-delta kernels against the ops path), then again with MLXRT_CUDA_SELF_COMPILE=1;
#   qmv:    mlxrt_qmv_bench (the kernel against MLX's quantized_matmul on Qwen3-8B/0.6B shapes);
#   layerbench: mlxrt_layer_bench (the one-kernel decoder layer at Qwen3-0.6B/8B shapes, phase by
#           phase from its GPU timer stamps, by bits and position) once per LAYER_SETTINGS entry
#           (blocks per multiprocessor:steps of loads in flight); LAYER_BENCH_ARGS: more options);
#   layerncu: Nsight Compute's sections and stall reasons for one 8B 4-bit layer launch of
#           mlxrt_layer_bench (LAYER_NCU_BLOCKS blocks per multiprocessor, default 2);
#   ncu:    the same two shapes under Nsight Compute: each kernel's time and DRAM bytes;
#   ncu_sections: Nsight Compute's sections for one launch of the kernel (what limits it);
#   decode: bench/gpu/l3_bench.py (decode tok/s at l1, l3 and of mlx-lm, and l3's fidelity
#           against l1) on L3_MODELS (default "qwen3-0.6b-q4 qwen3-8b-q4"), made there first;
#   steptime: bench/gpu/step_timing.py (the decode step's build / dispatch / wait split at l1 and
#           l3 and mlx-lm's tok/s, under MLX's CUDA graph settings STEP_SETTINGS) on L3_MODELS;
#           STEP_ARGS: more of its options (--programs, --compare-bin LABEL=BIN);
#   startup: bench/gpu/l3_startup.py (a new process's wall time at l1, l3 and l3 self-compiled, and
#           whether l3's two routes write the same text; STARTUP_ARGS);
#   nodecost: bench/gpu/node_cost.py (MLX's host cost per graph node, by kind; NODE_COST_ARGS);
#   prefillbytes: whether L3's dense prefill (MLXRT_CUDA_L3_PREFILL_ROWS) gives MLX's bytes: the
#           DequantizedGemmCuda test at a prefill's shapes, then bench/gpu/prefill_bytes.py (l1 and
#           l3 with and without it on L3_MODELS, and its fidelity; PREFILL_BYTES_ARGS).
# The one-kernel decoder layer (kernels/cuda/decoder_layer.h, l3's default for 4-bit layers): its
# tests are in `tests` (DecoderLayer.*); `steptime` with STEP_SETTINGS="default per-node" splits its
# steps beside the per-node l3; MLXRT_CUDA_L3_LAYER=0 in front of `decode` gives the per-node tok/s.
# Logs and tables go to $OUT; MLX's compiled kernels are kept as bench/gpu/bundle_setup.sh keeps them
# (PTX_TARBALL, default build-gpu/ptx-cache.tgz, in; $OUT/ptx-cache.tgz out).
# Usage (repository root): [B=build-gpu/bundle] [L3_STEPS="tests qmv decode"] bench/gpu/l3_run.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=${B:-build-gpu/bundle}
out=${OUT:-build-gpu/l3-out}
work=${BENCH_WORK:-/tmp/l3-work}
# shellcheck source=bench/gpu/bundle_setup.sh
source bench/gpu/bundle_setup.sh
models=${L3_MODELS:-qwen3-0.6b-q4 qwen3-8b-q4}
for step in ${L3_STEPS:-tests qmv decode}; do
  case $step in
    tests)
      timeout 300 "$work/mlxrt_cuda_kernel_tests" ${KERNEL_TEST_ARGS:-} > "$out/kernel_tests.txt" 2>&1
      grep -E '^\[  (PASSED|FAILED) |Failure|error' "$out/kernel_tests.txt" | head -20
      # The same tests with the L3 kernels compiled by mlxrt and launched as precompiled kernels.
      MLXRT_CUDA_SELF_COMPILE=1 timeout 300 "$work/mlxrt_cuda_kernel_tests" ${KERNEL_TEST_ARGS:-} \
        > "$out/kernel_tests_self_compiled.txt" 2>&1
      echo "self-compiled:"
      grep -E '^\[  (PASSED|FAILED) |Failure|error|SELF_COMPILE' "$out/kernel_tests_self_compiled.txt" | head -20
      echo "tests $(( $(date +%s) - t0 )) s" ;;
    qmv)
      timeout 400 "$work/mlxrt_qmv_bench" ${QMV_ARGS:-} > "$out/qmv_bench.txt" 2>&1
      tail -n 30 "$out/qmv_bench.txt"
      echo "qmv $(( $(date +%s) - t0 )) s" ;;
    layerbench)
      # One process per setting (blocks per multiprocessor : steps of loads in flight): a setting
      # whose blocks cannot all be resident (too many registers a thread for that many blocks) stops
      # its kernel at the barrier's trap, and the CUDA context with it.
      : > "$out/layer_bench.txt"
      for setting in ${LAYER_SETTINGS:-1:2 2:2 3:2 1:3 1:4 2:4}; do  # LAYER_BENCH_ARGS="--rows 0,4,8" adds a sweep
        # shellcheck disable=SC2086  # a list of options
        timeout 300 "$work/mlxrt_layer_bench" --blocks-per-sm "${setting%%:*}" --depth "${setting##*:}" \
          ${LAYER_BENCH_ARGS:-} >> "$out/layer_bench.txt" 2>&1 || echo "setting $setting: exit $?" >> "$out/layer_bench.txt"
      done
      grep -v '^model\|multiprocessors' "$out/layer_bench.txt" | sort -s -k1,1 -k2,2n -k3,3n | tail -n 80
      echo "layerbench $(( $(date +%s) - t0 )) s" ;;
    layerncu)
      # One 8B 4-bit layer launch at position 384 under Nsight Compute: its time, DRAM bytes, and
      # where its warps stall (the barrier's polling, the products' loads, the attention's).
      ncu_bin=$(command -v ncu || find /opt/nvidia/nsight-compute -name ncu -type f 2>/dev/null | head -1)
      # The stall reasons too (cycles a warp waits between two of its instructions, by reason).
      timeout 300 "$ncu_bin" --clock-control none -k regex:decoder_layer --launch-skip 40 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section MemoryWorkloadAnalysis --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "$work/mlxrt_layer_bench" --models 8b --bits 4 --positions 384 --rounds 1 --blocks-per-sm "${LAYER_NCU_BLOCKS:-2}" \
        > "$out/layer_ncu_sections.txt" 2>&1
      grep -E 'Duration|Throughput|Achieved Occupancy|Registers|Stall|Issue|Warp Cycles' "$out/layer_ncu_sections.txt" | head -40
      grep -E 'issue_stalled' "$out/layer_ncu_sections.txt" | sort -k3 -g -r | head -12
      echo "layerncu $(( $(date +%s) - t0 )) s" ;;
    ncu)
      ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 300 "$ncu_bin" --clock-control none --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        "$work/mlxrt_qmv_bench" --quick --calls 2 --rounds 1 > "$out/qmv_ncu.csv" 2> "$out/qmv_ncu.err"
      # Per kernel (name and grid): launches, mean time, mean DRAM bytes read and their rate.
      $PY - "$out/qmv_ncu.csv" <<'PYEOF'
import csv, collections, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if start is None:
    sys.exit("no ncu table")
per = collections.defaultdict(dict)
for r in csv.DictReader(lines[start:]):
    v = float(r["Metric Value"].replace(",", ""))
    unit = r["Metric Unit"]
    v *= {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3}.get(unit, 1)
    per[(r["ID"], r["Kernel Name"][:70], r["Grid Size"])][r["Metric Name"]] = v
agg = collections.defaultdict(list)
for (i, name, grid), m in per.items():
    agg[(name, grid)].append(m)
for (name, grid), ms in agg.items():
    t = sum(m.get("gpu__time_duration.sum", 0) for m in ms) / len(ms)
    b = sum(m.get("dram__bytes_read.sum", 0) for m in ms) / len(ms)
    if t > 2e-6:
        print(f"{name:<70} {grid:>16} n={len(ms):<3} {t * 1e6:9.2f} us {b / 1e6:9.2f} MB {b / t / 1e9 if t else 0:7.0f} GB/s")
PYEOF
      echo "ncu $(( $(date +%s) - t0 )) s" ;;
    ncu_sections)
      # What limits the kernel: speed of light, occupancy, warp stalls, on the 8B gate/up shape.
      ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 200 "$ncu_bin" --clock-control none -k regex:affine_qmv --launch-skip 0 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section MemoryWorkloadAnalysis "$work/mlxrt_qmv_bench" --quick --calls 1 --rounds 1 > "$out/qmv_ncu_sections.txt" 2>&1
      grep -E 'Duration|Throughput|Achieved Occupancy|Registers|Stall|Issue|Warp Cycles' "$out/qmv_ncu_sections.txt" | head -30
      echo "ncu_sections $(( $(date +%s) - t0 )) s" ;;
    decode)
      # shellcheck disable=SC2086  # models is a list of names
      timeout 900 $PY bench/gpu/l3_bench.py --bin "$work/mlxrt" --work "$work/models" --tokenizer "$work/tokenizer" \
        --out "$out" --models $models ${L3_BENCH_ARGS:-} > "$out/decode.txt" 2>&1
      tail -n 8 "$out/decode.txt"
      echo "decode $(( $(date +%s) - t0 )) s" ;;
    steptime)
      # shellcheck disable=SC2086  # models and settings are lists of names
      timeout 900 $PY bench/gpu/step_timing.py --bin "$work/mlxrt" --work "$work/models" --tokenizer "$work/tokenizer" \
        --out "$out" --models $models --settings ${STEP_SETTINGS:-default graphs-off ops-400} --rounds ${STEP_ROUNDS:-1} ${STEP_ARGS:-} > "$out/steptime.txt" 2>&1
      tail -n 24 "$out/steptime.txt"
      echo "steptime $(( $(date +%s) - t0 )) s" ;;
    startup)
      # A new process's wall time at l1, l3 and l3 self-compiled (MLXRT_CUDA_SELF_COMPILE=1).
      # shellcheck disable=SC2086  # models is a list of names
      timeout 900 $PY bench/gpu/l3_startup.py --bin "$work/mlxrt" --work "$work/models" --tokenizer "$work/tokenizer" \
        --out "$out" --models $models ${STARTUP_ARGS:-} > "$out/startup.txt" 2>&1
      tail -n 10 "$out/startup.txt"
      echo "startup $(( $(date +%s) - t0 )) s" ;;
    nodecost)
      # shellcheck disable=SC2086  # a list of options
      timeout 300 $PY bench/gpu/node_cost.py ${NODE_COST_ARGS:-} > "$out/node_cost.txt" 2>&1
      cat "$out/node_cost.txt"
      echo "nodecost $(( $(date +%s) - t0 )) s" ;;
    prefillbytes)
      timeout 300 "$work/mlxrt_cuda_kernel_tests" --gtest_filter='DequantizedGemmCuda.*' > "$out/dequantized_gemm.txt" 2>&1
      grep -E ' differ,|^\[  (PASSED|FAILED) ' "$out/dequantized_gemm.txt" | head -45
      # shellcheck disable=SC2086  # models is a list of names
      timeout 900 $PY bench/gpu/prefill_bytes.py --bin "$work/mlxrt" --work "$work/models" --tokenizer "$work/tokenizer" \
        --out "$out" --models $models ${PREFILL_BYTES_ARGS:-} > "$out/prefill_bytes.txt" 2>&1
      grep -v '^\[transformers\]' "$out/prefill_bytes.txt" | tail -n 30
      echo "prefillbytes $(( $(date +%s) - t0 )) s" ;;
    *) echo "unknown step $step (tests qmv layerbench layerncu ncu ncu_sections decode steptime startup nodecost prefillbytes)"; exit 2 ;;
  esac
done
