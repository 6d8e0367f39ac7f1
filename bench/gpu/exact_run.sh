#!/usr/bin/env bash
# Issues 19 and 14 on a CUDA machine without a package registry, with the bundle of
# bench/gpu/prepare.sh: installs the carried wheels (run.sh env install), then the steps named in
# EXACT_STEPS (default "probe tests spec"): probe: bench/gpu/exact_probe.py (which ops give a row of
# an M-row call a one-row call's bytes); tests: the --spec-exact and speculative tests with this
# binary; gputests: the --spec-exact, --mtp and --warm-up tests (generate and server);
# spec: bench/gpu/spec_bench.py (speculation on the 8B-dims model, mlxrt beside mlx-lm, and the
# 0.6B-dims model's exact check); maskbytes: the batched path's padded attention on the op
# (shape_cost.py bytes --op-mask-rows); batchtests: the batched generation and server tests and the
# warm-up tests; ttft: bench/gpu/ttft_bench.py (time to first token at new prompt
# lengths, mlxrt before/after the padded attention and --warm-up, beside mlx-lm); parity: a subset
# of tests/parity (run.sh's stage, PARITY_FIXTURES). Logs and tables go to $OUT (a few files: what
# a device call brings back), the rest to $BENCH_WORK. MLX's compiled kernels are kept in
# $MLX_PTX_CACHE_DIR; a tarball of them (PTX_TARBALL, default build-gpu/ptx-cache.tgz) is unpacked
# there first when present and written to $OUT/ptx-cache.tgz at the end, so a later call on a
# fresh machine need not compile them again.
# Usage (repository root): [B=build-gpu/bundle] [EXACT_STEPS="probe tests spec"] bench/gpu/exact_run.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
B=${B:-build-gpu/bundle}
out=${OUT:-build-gpu/exact-out}
work=${BENCH_WORK:-/tmp/exact-work}
# shellcheck source=bench/gpu/bundle_setup.sh
source bench/gpu/bundle_setup.sh
bin=$work/mlxrt  # run.sh's wrapper: this environment's libmlx and the bundle's libraries
# The fixtures' Qwen3 tokenizer where the shared data folder did not come along (the text cases,
# which need others, are left out then).
shared=$root/../shared
select=()
if [ ! -d "$shared/data/tokenizers/qwen3" ]; then
  mkdir -p "$shared/data/tokenizers/qwen3" && cp "$work/tokenizer/"* "$shared/data/tokenizers/qwen3/"
  select=(-k "not text")
fi
model_dir() {
  $PY -c "import sys; sys.path.insert(0, 'bench/gpu'); from pathlib import Path; import models
print(models.ensure_model(Path(sys.executable), Path('$work/models'), '${1%-*}', '${1##*-}', Path('$work/tokenizer')))"
}
# EXACT_MODELS: benchmark models (shape-quant) made in the background while the first steps run.
models_pid=
if [ -n "${EXACT_MODELS:-}" ]; then
  ( for m in $EXACT_MODELS; do model_dir "$m"; done ) > "$work/models.log" 2>&1 &
  models_pid=$!
fi
models_made() { [ -z "$models_pid" ] || wait "$models_pid"; models_pid=; }
jobs=()
$PY -c 'import xdist' 2>/dev/null && jobs=(-n "${EXACT_JOBS:-8}")
testenv=(MLXRT_BIN="$bin" MLXRT_FIXTURES="$work/fixtures" MLXRT_SOURCE_DIR="$root" MLXRT_SHARED_DIR="$root/../shared")
for step in ${EXACT_STEPS:-probe tests spec}; do
  case $step in
    probe)
      $PY bench/gpu/exact_probe.py > "$out/exact_probe.txt" 2>&1
      grep -E 'DIFFERS|SUMMARY|Error' "$out/exact_probe.txt" | cut -c1-150
      echo "probe $(( $(date +%s) - t0 )) s" ;;
    tests)
      env "${testenv[@]}" timeout "${EXACT_TEST_TIMEOUT:-420}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider "${jobs[@]}" \
        tests/generate/test_spec_exact.py tests/generate/test_speculative_parity.py "${select[@]}" \
        > "$out/tests_generate.txt" 2>&1
      tail -n 25 "$out/tests_generate.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      env "${testenv[@]}" timeout 180 $PY -m pytest -q -rf --tb=short -p no:cacheprovider \
        tests/server/test_spec_exact_server.py > "$out/tests_server.txt" 2>&1
      tail -n 15 "$out/tests_server.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      echo "tests $(( $(date +%s) - t0 )) s" ;;
    gputests)
      env "${testenv[@]}" timeout "${EXACT_TEST_TIMEOUT:-300}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider "${jobs[@]}" \
        tests/generate/test_spec_exact.py tests/generate/test_mtp.py tests/generate/test_warm_up.py "${select[@]}" \
        > "$out/tests_generate.txt" 2>&1
      tail -n 25 "$out/tests_generate.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      env "${testenv[@]}" timeout "${EXACT_SERVER_TIMEOUT:-200}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider "${jobs[@]}" \
        tests/server/test_spec_exact_server.py tests/server/test_mtp_server.py > "$out/tests_server.txt" 2>&1
      tail -n 15 "$out/tests_server.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      echo "gputests $(( $(date +%s) - t0 )) s" ;;
    parity)
      # The fixtures' prompts stay under 256 positions, where MLX's cuDNN attention repeats its bytes.
      fx=${PARITY_FIXTURES:-qwen3_bf16 qwen3_fp16_untied qwen3_q4_g64 qwen3_mha_hd64 qwen3_hd128 llama_bf16 \
llama_gqa4_hd48 mistral_bf16 llama_swa gemma3_bf16 qwen2_bf16 qwen3_5_bf16 gpt_oss_bf16}
      # shellcheck disable=SC2086  # fx is a list of names
      $PY tools/make_fixtures.py --out "$work/fixtures" --only $fx > "$work/fixtures.log" 2>&1 || tail -5 "$work/fixtures.log"
      # The cases of these fixtures only (the files are parametrized over every fixture).
      pfiles=(tests/parity/test_logits_parity.py tests/parity/test_kv_cache_parity.py tests/parity/test_prompt_cache.py)
      env "${testenv[@]}" $PY -m pytest -q --collect-only -p no:cacheprovider "${pfiles[@]}" 2>/dev/null \
        | grep -E "\[($(echo $fx | tr ' ' '|'))[]-]" > "$work/parity_cases.txt"
      echo "parity: $(wc -l < "$work/parity_cases.txt") cases"
      env "${testenv[@]}" MLXRT_FIXTURE_NAMES="$fx" timeout "${PARITY_TIMEOUT:-300}" $PY -m pytest -q -rf --tb=short \
        -p no:cacheprovider "${jobs[@]}" $(cat "$work/parity_cases.txt") > "$out/parity.log" 2>&1
      grep -E '^FAILED|passed|failed' "$out/parity.log" | tail -8 | cut -c1-220
      echo "parity $(( $(date +%s) - t0 )) s" ;;
    maskbytes)
      # The batched path's padded attention (a widened mask array) against the plain one, on the op.
      # MASKBYTES_ARGS: other cases (docs/cuda-prefill-shapes.md has those of each mode).
      # shellcheck disable=SC2086  # a list of options
      $PY bench/gpu/shape_cost.py bytes ${MASKBYTES_ARGS:---op-heads 16 8 --op-mask-rows 1 3} > "$out/maskbytes.txt" 2>&1
      grep -E '^op |Error' "$out/maskbytes.txt" | cut -c1-200
      echo "maskbytes $(( $(date +%s) - t0 )) s" ;;
    batchtests)
      # The batched paths against mlx-lm's BatchGenerator and mlx_lm.server (prefill padded on CUDA).
      env "${testenv[@]}" timeout "${EXACT_TEST_TIMEOUT:-300}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider "${jobs[@]}" \
        tests/generate/test_batch_generate.py tests/generate/test_warm_up.py "${select[@]}" > "$out/tests_batch.txt" 2>&1
      tail -n 25 "$out/tests_batch.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      env "${testenv[@]}" timeout "${EXACT_SERVER_TIMEOUT:-200}" $PY -m pytest -q -rf --tb=short -p no:cacheprovider \
        tests/server/test_batch_server.py tests/server/test_warm_up_server.py > "$out/tests_batch_server.txt" 2>&1
      tail -n 15 "$out/tests_batch_server.txt" | grep -E 'FAILED|ERROR|passed|failed' | cut -c1-220
      echo "batchtests $(( $(date +%s) - t0 )) s" ;;
    ttft)
      models_made
      # TTFT_UNSEEDED=1: requests without a seed (the server's batched path).
      ttft_flags=(); [ -n "${TTFT_UNSEEDED:-}" ] && ttft_flags=(--unseeded)
      for m in ${TTFT_MODELS:-qwen3-0.6b-q4 qwen3-8b-q4}; do
        $PY bench/gpu/ttft_bench.py --bin "$bin" --model "$(model_dir "$m")" --out "$work/ttft" "${ttft_flags[@]}" \
          ${TTFT_ARGS:-} >> "$out/ttft.txt" 2>&1
      done
      grep -v '^\[transformers\]' "$out/ttft.txt" | tail -n 30
      echo "ttft $(( $(date +%s) - t0 )) s" ;;
    spec_diag)
      # What a speculative step costs MLX's CUDA backend, mlxrt beside mlx-lm on one pair: cuDNN
      # graph builds (finalizes), cuBLASLt heuristics, compiles, counted by api_timer.so per process.
      models_made
      ${CC:-gcc} -O2 -shared -fPIC -o "$work/api_timer.so" bench/gpu/api_timer.c -ldl || exit 1
      dmain=$(model_dir "${DIAG_MAIN:-qwen3-0.6b-bf16}"); ddraft=$(model_dir "${DIAG_DRAFT:-qwen3-0.6b-q4}")
      ids=$($PY -c "import random; random.seed(1); print(','.join(str(random.randrange(150000)) for _ in range(128)))")
      for sw in default MLX_CUDA_USE_CUDNN_SDPA=0; do
        envs=(API_TIMER_AT_EXIT=1 LD_PRELOAD="$work/api_timer.so"); [ "$sw" != default ] && envs+=("$sw")
        for d in none draft; do
          flags=(); [ $d = draft ] && flags=(--draft-model "$ddraft")
          env "${envs[@]}" "$bin" generate --model "$dmain" --prompt-tokens "$ids" -m 64 "${flags[@]}" 2>&1 \
            | grep -E "^Generation:|api_timer (cudnnBackendFinalize|cublasLt|nvrtc)" | sed "s|^|mlxrt $sw $d: |" >> "$out/spec_diag.txt"
          env "${envs[@]}" $PY -c "
import sys; import mlx.core as mx; from mlx_lm import load, stream_generate
m, t = load('$dmain'); kw = {} if '$d' == 'none' else {'draft_model': load('$ddraft')[0], 'num_draft_tokens': 3}
ids = [int(x) for x in '$ids'.split(',')]
for r in stream_generate(m, t, ids, max_tokens=64, **kw): pass
print(f'Generation: {r.generation_tokens} tokens, {r.generation_tps:.3f} tokens-per-sec')" 2>&1 \
            | grep -E "^Generation:|api_timer (cudnnBackendFinalize|cublasLt|nvrtc)" | sed "s|^|mlx-lm $sw $d: |" >> "$out/spec_diag.txt"
        done
      done
      cat "$out/spec_diag.txt"
      echo "spec_diag $(( $(date +%s) - t0 )) s" ;;
    spec)
      models_made
      # shellcheck disable=SC2086  # SPEC_ARGS is a list of options
      $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" --out "$work/spec" \
        ${SPEC_ARGS:---main qwen3-8b-bf16 --drafts qwen3-8b-q4 qwen3-0.6b-bf16} > "$out/spec.txt" 2>&1
      tail -n 12 "$out/spec.txt"
      echo "spec $(( $(date +%s) - t0 )) s" ;;
    spec_small)
      $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" --out "$work/spec" \
        --main qwen3-0.6b-bf16 --drafts qwen3-0.6b-q4 --prompt 300 --gen 128 --runs 1 --skip-mlx-lm --exact-check \
        > "$out/spec_small.txt" 2>&1
      tail -n 8 "$out/spec_small.txt"
      echo "spec_small $(( $(date +%s) - t0 )) s" ;;
    determinism)
      # Is MLX's CUDA run-to-run variation past 256 keys cuDNN's attention, or the CUDA graphs? The
      # prefill twice in one process (shape_cost.py's control) and two one-token decodes against
      # --spec-exact with a draft, under each switch.
      for sw in default MLX_USE_CUDA_GRAPHS=0 MLX_CUDA_USE_CUDNN_SDPA=0; do
        envs=(); [ "$sw" != default ] && envs=("$sw")
        echo "== $sw" >> "$out/determinism.txt"
        env "${envs[@]}" $PY bench/gpu/shape_cost.py bytes "$(model_dir qwen3-0.6b-bf16)" \
          --lengths 64 256 501 778 1501 2>&1 | grep -E 'plain again|end to end' >> "$out/determinism.txt"
        env "${envs[@]}" $PY bench/gpu/spec_bench.py --bin "$bin" --work "$work/models" --tokenizer "$work/tokenizer" \
          --out "$work/spec-$sw" --main qwen3-0.6b-bf16 --drafts qwen3-0.6b-q4 --prompt 300 --gen 64 \
          --exact-only --exact-check 2>&1 | grep '^bytes' >> "$out/determinism.txt"
      done
      grep -E '^==|end to end|^bytes' "$out/determinism.txt"
      echo "determinism $(( $(date +%s) - t0 )) s" ;;
    *) echo "unknown step $step (probe tests gputests maskbytes batchtests spec spec_diag spec_small determinism ttft parity)"; exit 2 ;;
  esac
done
