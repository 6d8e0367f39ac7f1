#!/usr/bin/env bash
# Continuous batching (issue 17) on a CUDA machine without a package registry, with the bundle of
# bench/gpu/prepare.sh: installs the carried wheels (run.sh env install build), then the steps
# named in BATCH_STEPS (default "split batchgen batching"):
#   split:    bench/batch_generate_bench.py --step-timing on BATCH_MODELS (default qwen3-0.6b-bf16
#             qwen3-8b-bf16): each side's 8-row decode step split into build / dispatch / wait, and
#             its op graph counted by op, under each MLX setting of SPLIT_SETTINGS (default
#             "default one-graph"; also ops-400, and no-graphs: kernels launched one by one, no
#             CUDA graphs). With one command buffer a step ("one-graph": no commit by op
#             count or by bytes, as bench/gpu/step_timing.py's setting) MLX never waits in dispatch
#             for graphs in flight, so dispatch is the host's encoding alone and wait what the
#             device takes beyond build + dispatch: a wait near zero says the step is bound by the
#             host (fewer nodes shorten it), a large one by the device (faster kernels do);
#   batchgen: run.sh's stage batchgen (BENCH_BATCHGEN_ARGS; default here adds --step-timing);
#   batching: run.sh's stage batching (BENCH_BATCH_ARGS): the servers side by side;
#   profile:  the same batch generation as split (SPLIT_ARGS, MLX's default setting) with
#             bench/gpu/api_timer.c (kernels, cuBLASLt matmuls, graphs created, per process) and
#             bench/gpu/sampler.c (the host's call stacks) preloaded into both sides, then
#             bench/gpu/sampler_report.py on each side's main thread inside MLX's eval
#             (profile.txt): where a host-bound step's dispatch goes;
#   serverprobe: the servers side by side (bench/batch_bench.py, SERVERPROBE_ARGS; default 32
#             clients, 64 tokens, one round) with mlxrt's DEBUG log (each batched prefill step's
#             milliseconds), its attention shapes (MLXRT_ATTENTION_SHAPES: the shape each cuDNN
#             graph built after the warm-up was for) and bench/gpu/api_timer.c preloaded into
#             mlxrt's server alone: what the server's process paid in NVRTC compiles, cuDNN graph
#             builds and cuBLASLt heuristics over the run (serverprobe.txt; the logs in
#             $out/serverprobe);
#   prefill:  bench/gpu/batch_prefill_probe.py on BATCH_MODELS: mlx-lm's own batched prefill, its
#             forwards at new and repeated shapes (KVCache and BatchKVCache) and its BatchGenerator
#             with 32 prompts at once (prefill.txt).
#   availability: bench/gpu/availability_probe.cpp (whether array::is_available() tells a running
#             evaluation from a finished one on this device; availability.txt);
#   servertests: tests/server/test_batch_server.py and test_load_and_disconnect.py with this
#             binary, fixtures made here (servertests.txt);
#   joinmodes: the server's --join-prefill modes beside mlx_lm.server on BATCH_MODELS (JOIN_ARGS,
#             JOIN_PIECES; joinmodes.txt);
#   prefillsplit: mlxrt's batched prefill alone (`batch-generate --step-timing`, groups of
#             PREFILL_ROWS prompts), with and without cuDNN's attention, then with the host sampled
#             (prefillsplit.txt): whether a prefilling step's dispatch is the host's or the device's;
# Logs and tables go to $OUT (split.txt, and run.sh's batchgen.log, batching.log, summary.txt),
# the rest to $BENCH_WORK. MLX's compiled kernels are kept as bench/gpu/bundle_setup.sh keeps them.
# Usage (repository root): [B=build-gpu/bundle] [BATCH_STEPS="split batchgen batching"] bench/gpu/batch_run.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
B=${B:-build-gpu/bundle}
out=${OUT:-build-gpu/batch-out}
work=${BENCH_WORK:-/tmp/batch-work}
# shellcheck source=bench/gpu/bundle_setup.sh
source bench/gpu/bundle_setup.sh
models=${BATCH_MODELS:-qwen3-0.6b-bf16 qwen3-8b-bf16}
model_dir() {
  $PY -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '${1%-*}', '${1##*-}', Path('$work/tokenizer')))"
}
build_api_timer() { ${CC:-gcc} -O2 -shared -fPIC -o "$work/api_timer.so" bench/gpu/api_timer.c -ldl; }
setting_env() {
  case $1 in
    default) echo "" ;;
    one-graph) echo "MLX_MAX_OPS_PER_BUFFER=4000 MLX_MAX_MB_PER_BUFFER=1000000" ;;
    ops-400) echo "MLX_MAX_OPS_PER_BUFFER=400" ;;
    no-graphs) echo "MLX_USE_CUDA_GRAPHS=0" ;;
    *) echo "unknown setting $1 (default one-graph ops-400 no-graphs)" >&2; return 1 ;;
  esac
}
for step in ${BATCH_STEPS:-split batchgen batching}; do
  case $step in
    split)
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        graphs=--graphs
        for s in ${SPLIT_SETTINGS:-default one-graph}; do
          vars=$(setting_env "$s") || exit 2
          echo "== $m, MLX setting $s ($vars)" >> "$out/split.txt"
          # shellcheck disable=SC2086  # vars and SPLIT_ARGS are lists
          env $vars timeout 600 $PY bench/batch_generate_bench.py --model "$path" --mlxrt "$work/mlxrt" --step-timing \
            $graphs --log-dir "$work/split-$m-$s" ${SPLIT_ARGS:---batch 8 --gen-tokens 128} >> "$out/split.txt" 2>&1
          graphs=
        done
      done
      grep -E '^(== |\| (side|mlx_lm|mlxrt) |decode (tok|step split))' "$out/split.txt"
      echo "split $(( $(date +%s) - t0 )) s" ;;
    profile)
      build_api_timer || exit 1
      ${CC:-gcc} -O2 -shared -fPIC -o "$work/sampler.so" bench/gpu/sampler.c -ldl || exit 1
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        rm -rf "$work/profile-$m" && mkdir -p "$work/profile-$m"
        echo "== $m" >> "$out/profile.txt"
        # shellcheck disable=SC2086  # SPLIT_ARGS is a list
        API_TIMER_AT_EXIT=1 SAMPLER_OUT="$work/profile-$m/stacks" LD_PRELOAD="$work/api_timer.so:$work/sampler.so" \
          timeout 600 $PY bench/batch_generate_bench.py --model "$path" --mlxrt "$work/mlxrt" --step-timing \
          --log-dir "$work/profile-$m" ${SPLIT_ARGS:---batch 8 --gen-tokens 128} >> "$out/profile.txt" 2>&1
        for side in mlx_lm mlxrt; do
          echo "-- $side: CUDA calls over the whole process" >> "$out/profile.txt"
          grep '^api_timer' "$work/profile-$m/$side-stderr-0.txt" >> "$out/profile.txt"
        done
        # The two largest stack files are the two sides' (the bench's own process is idle).
        for f in $(ls -S "$work/profile-$m"/stacks.* | head -2); do
          $PY bench/gpu/sampler_report.py "$f" --top 50 >> "$out/profile.txt" 2>&1
        done
      done
      grep -E '^(== |-- |api_timer (cuGraph|cublasLtMatmul |cuLaunch)|\| (mlx_lm|mlxrt) |/)' "$out/profile.txt"
      echo "profile $(( $(date +%s) - t0 )) s" ;;
    serverprobe)
      build_api_timer || exit 1
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        echo "== $m" >> "$out/serverprobe.txt"
        # shellcheck disable=SC2086  # SERVERPROBE_ARGS is a list of options
        MLXRT_BIN="$work/mlxrt" timeout 600 $PY bench/batch_bench.py --model "$path" --log-dir "$out/serverprobe/$m" \
          --mlxrt-env "LD_PRELOAD=$work/api_timer.so" --mlxrt-env API_TIMER_AT_EXIT=1 --mlxrt-env API_TIMER_TRACE=1 \
          --mlxrt-env MLXRT_ATTENTION_SHAPES=1 \
          ${SERVERPROBE_ARGS:---clients 32 --gen-tokens 64 --runs 1 --mlxrt-args=--warm-up --mlxrt-args=--log-level=DEBUG} \
          >> "$out/serverprobe.txt" 2>&1
        grep -h 'api_timer' "$out/serverprobe/$m/mlxrt.log" >> "$out/serverprobe.txt"
        # The step lines and the trace lines (each new cuDNN graph, compile, module load) in time order.
        grep -h -E 'batch step:|batch:|warm-up:|api_timer trace' "$out/serverprobe/$m/mlxrt.log" \
          | sed -E 's/^api_timer trace //; s/ - (DEBUG|INFO) - / /' | sort -s -k1,2 >> "$out/serverprobe.txt"
        # Each cuDNN graph built after the warm-up, with the attention shape logged last before it
        # (MLXRT_ATTENTION_SHAPES: the calls of the forward that graph belongs to).
        echo "== $m: attention graphs built after the warm-up, each after the shape logged last" >> "$out/serverprobe.txt"
        awk '/warm-up:/ {after = 1} /^attention shapes:/ {shape = $0}
             after && /^api_timer trace .*cudnnBackendPopulateCudaGraph/ {print $4, shape}' "$out/serverprobe/$m/mlxrt.log" \
          >> "$out/serverprobe.txt"
      done
      grep -E '^(== |clients|[0-9]+ +(tok_s|ttft|errors)|api_timer)' "$out/serverprobe.txt"
      echo "serverprobe $(( $(date +%s) - t0 )) s" ;;
    batchgen|batching)
      BENCH_OUT=$out BENCH_TOKENIZER=$work/tokenizer BENCH_BATCH_MODELS=$models \
        BENCH_BATCHGEN_ARGS=${BENCH_BATCHGEN_ARGS:---batch 8 --gen-tokens 256 --step-timing} \
        bench/gpu/run.sh "$step" > "$work/$step-run.txt" 2>&1
      grep -h -E '^(== |clients|[0-9]+ +(tok_s|ttft|errors|steady|p99)|model |\| |decode tok)' "$out/$step.log" | head -40
      echo "$step $(( $(date +%s) - t0 )) s" ;;
    prefill)
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        echo "== $m" >> "$out/prefill.txt"
        timeout 300 $PY bench/gpu/batch_prefill_probe.py "$path" 2>&1 | grep -v -i tokenizer >> "$out/prefill.txt"
      done
      grep -E '^(== |forward|run [0-9]+: first)' "$out/prefill.txt"
      echo "prefill $(( $(date +%s) - t0 )) s" ;;
    prefillsplit)
      # mlxrt's batched prefill alone, in one process without HTTP: `batch-generate --step-timing`
      # (each prefilling step's build / wait / dispatch, and the start of its rows) for three groups
      # of N prompts of 64 random tokens, N in PREFILL_ROWS (default "3 32"), one group prefilled
      # after the other (the later ones on warmed shapes); under MLX's default and with cuDNN's
      # attention off; then once more with bench/gpu/sampler.c preloaded: the host's CPU time inside
      # the prefill (BatchGenerator::prompt). A dispatch the sampler barely sees is the host waiting
      # for the device (MLX's eval waits when more than 10 command buffers are in flight).
      ${CC:-gcc} -O2 -shared -fPIC -o "$work/sampler.so" bench/gpu/sampler.c -ldl || exit 1
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        for rows in ${PREFILL_ROWS:-3 32}; do
          $PY -c "import json, random, sys; random.seed($rows)
vocab = json.load(open('$path/config.json'))['vocab_size']
reqs = [{'prompt_tokens': [random.randrange(vocab) for _ in range(64)], 'max_tokens': 4} for _ in range(3 * $rows)]
json.dump({'requests': reqs}, sys.stdout)" > "$work/prefill-$rows.json" || exit 1
          flags=(--model "$path" --requests "$work/prefill-$rows.json" --step-timing
                 --prefill-batch-size "$rows" --completion-batch-size "$rows")
          for s in default no-cudnn; do
            vars=""; [ "$s" = no-cudnn ] && vars="MLX_CUDA_USE_CUDNN_SDPA=0"
            echo "== $m, $rows prompts a group, $s" >> "$out/prefillsplit.txt"
            # shellcheck disable=SC2086  # vars is empty or one assignment
            env $vars timeout 300 "$work/mlxrt" batch-generate "${flags[@]}" 2>&1 >/dev/null \
              | grep -E 'prefilling step|decode step|sequences' >> "$out/prefillsplit.txt"
          done
          rm -f "$work/stacks-$rows".*
          echo "== $m, $rows prompts a group, default, sampled" >> "$out/prefillsplit.txt"
          SAMPLER_OUT="$work/stacks-$rows" LD_PRELOAD="$work/sampler.so" timeout 300 "$work/mlxrt" batch-generate \
            "${flags[@]}" 2>&1 >/dev/null | grep -E 'prefilling step' >> "$out/prefillsplit.txt"
          for f in $(ls -S "$work/stacks-$rows".* 2>/dev/null | head -1); do
            $PY bench/gpu/sampler_report.py "$f" --focus 'BatchGenerator::prompt\(' --top 30 >> "$out/prefillsplit.txt" 2>&1
          done
        done
      done
      grep -E '^(== |\[batch_generate\] prefilling)' "$out/prefillsplit.txt" | cut -c1-220
      echo "prefillsplit $(( $(date +%s) - t0 )) s" ;;
    availability)
      # Whether array::is_available() tells a running evaluation from a finished one here.
      if [ -x "$work/mlxrt_availability_probe" ]; then
        timeout 120 "$work/mlxrt_availability_probe" > "$out/availability.txt" 2>&1
        tail -n 12 "$out/availability.txt"
      else
        echo "availability: no mlxrt_availability_probe in the bundle"
      fi
      echo "availability $(( $(date +%s) - t0 )) s" ;;
    servertests)
      # The batched server's tests here (each --join-prefill mode against mlx_lm.server's answers,
      # disconnects in every mode), fixtures made on this device.
      shared=$root/../shared
      if [ ! -d "$shared/data/tokenizers/qwen3" ]; then
        mkdir -p "$shared/data/tokenizers/qwen3" && cp "$work/tokenizer/"* "$shared/data/tokenizers/qwen3/"
      fi
      MLXRT_BIN="$work/mlxrt" MLXRT_FIXTURES="$work/fixtures" MLXRT_SOURCE_DIR="$root" MLXRT_SHARED_DIR="$shared" \
        timeout "${SERVERTESTS_TIMEOUT:-240}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider \
        tests/server/test_batch_server.py tests/server/test_load_and_disconnect.py > "$out/servertests.txt" 2>&1
      tail -n 15 "$out/servertests.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      echo "servertests $(( $(date +%s) - t0 )) s" ;;
    joinmodes)
      # The server's --join-prefill modes side by side with mlx_lm.server on each of BATCH_MODELS:
      # between (column mlxrt) and interleaved (a repeated option: the last one counts), at 8 and
      # 32 clients with a steady round (JOIN_ARGS), and interleaved with pieces of each op count in
      # JOIN_PIECES (columns pN; default none). JOIN_DEBUG=1: the servers log at DEBUG, and
      # bench/ttft_breakdown.py splits each first token's wait into joining and in-batch parts.
      variants=(--variant 'interleaved=--join-prefill interleaved')
      debug=(); [ -n "${JOIN_DEBUG:-}" ] && debug=(--mlxrt-args=--log-level=DEBUG)
      for p in ${JOIN_PIECES:-}; do variants+=(--variant "p$p=MLXRT_STEP_PIECE_OPS=$p --join-prefill interleaved"); done
      for m in $models; do
        path=$(model_dir "$m") || exit 1
        echo "== $m" >> "$out/joinmodes.txt"
        # shellcheck disable=SC2086  # JOIN_ARGS is a list of options
        MLXRT_BIN="$work/mlxrt" timeout 900 $PY bench/batch_bench.py --model "$path" --log-dir "$work/joinmodes-$m" \
          ${JOIN_ARGS:---clients 8 32 --gen-tokens 128 --runs 1 --steady 3} --mlxrt-args=--warm-up \
          --mlxrt-args='--join-prefill between' "${debug[@]}" "${variants[@]}" \
          >> "$out/joinmodes.txt" 2>&1
        [ -n "${JOIN_DEBUG:-}" ] && $PY bench/ttft_breakdown.py "$work/joinmodes-$m"/*.log >> "$out/joinmodes.txt" 2>&1
      done
      grep -E '^(== |clients|[0-9]+ |\| )' "$out/joinmodes.txt" | head -80
      echo "joinmodes $(( $(date +%s) - t0 )) s" ;;
    *) echo "unknown step $step (split batchgen batching profile serverprobe prefill prefillsplit availability servertests joinmodes)"; exit 2 ;;
  esac
done
