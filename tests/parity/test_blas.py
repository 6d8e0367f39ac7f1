"""MLX's CPU backend on the BLAS the setup chose (tools/setup/mlx-blas.sh; OpenBLAS by default): the
choice really in place, for Python and for mlxrt, so that it cannot silently regress (pip putting
the wheel's reference BLAS back, say); and float32 logits byte-equal to mlx-lm's at each OpenBLAS
thread count.

OpenBLAS's float32 bits depend on its thread count (0.3.21: a matmul split over two threads puts
some rows through another kernel's edge case than one thread does), not on the run: mlxrt and
mlx-lm agree when they run with the same OPENBLAS_NUM_THREADS, as they do in one environment."""
import os
import re
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

import oracle
from conftest import BIN

# A few dozen tokens: the prefill's matmuls are large enough for OpenBLAS to split them over threads.
TOKENS = [(i * 37 + 11) % 500 + 1 for i in range(40)]
# float32 models: MLX hands their matmuls to BLAS (bf16 and fp16 ones it computes itself). The
# mixture of experts also takes the float32 gather_mm.
MODELS = ["qwen3_fp32", "qwen3_moe_fp32"]


def setup_choice():
    """The BLAS the setup put under this environment's MLX (its stamp's blas=), or None where it
    chose none (another backend than the CPU one, or no bundled BLAS)."""
    stamp = Path(sys.prefix) / ".mlxrt-env"
    found = re.search(r"\bblas=(\w+)", stamp.read_text()) if stamp.exists() else None
    return found.group(1) if found else None


def clean_env(**extra):
    """This process's environment without anything that picks a BLAS for one process."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OPENBLAS_NUM_THREADS")}
    env.update(extra)
    return env


def expect_blas(path, choice):
    path = os.path.realpath(path)
    if choice == "openblas":
        assert "openblas" in path, f"the setup chose OpenBLAS, but MLX runs {path} (rerun `make`)"
    else:
        assert "openblas" not in path and "/mlx_cpu.libs/libblas-" in path, path


MAPS = """import mlx.core as mx
a = mx.ones((64, 64), dtype=mx.float32)
assert (a @ a)[0, 0].item() == 64.0
print("\\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.split()[-1]})))"""


def test_python_mlx_runs_the_chosen_blas():
    choice = setup_choice()
    if choice is None:
        pytest.skip("the setup chose no BLAS for this environment's MLX")
    proc = subprocess.run([sys.executable, "-c", MAPS], capture_output=True, text=True, env=clean_env(),
                          check=True)
    mapped = proc.stdout.split()
    assert mapped, "no BLAS mapped after a float32 matmul"
    if choice == "openblas":
        assert any("openblas" in p for p in mapped) and not any("/mlx_cpu.libs/libblas-" in p for p in mapped), \
            f"the setup chose OpenBLAS, but MLX runs {mapped} (rerun `make`)"
    else:
        assert not any("openblas" in p for p in mapped), mapped


def test_mlxrt_links_the_chosen_blas():
    choice = setup_choice()
    if choice is None:
        pytest.skip("the setup chose no BLAS for this environment's MLX")
    proc = subprocess.run(["ldd", BIN], capture_output=True, text=True, env=clean_env(), check=True)
    found = re.search(r"^\s*libblas-\S+ => (\S+)", proc.stdout, re.M)
    assert found, proc.stdout
    expect_blas(found.group(1), choice)


def mlxrt_logits(path, out, threads, incremental):
    args = [BIN, "logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out]
    if incremental:
        args.append("--incremental")
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True,
                          env=clean_env(OPENBLAS_NUM_THREADS=str(threads)))
    assert proc.returncode == 0, proc.stderr
    return mx.load(str(out))["logits"]


ORACLE = """import sys
import mlx.core as mx
sys.path.insert(0, sys.argv[1])
import oracle
model, _ = oracle.load(sys.argv[2])
tokens = [int(t) for t in sys.argv[4].split(",")]
full, incremental = oracle.full_logits(model, tokens), oracle.incremental_logits(model, tokens)
mx.save_safetensors(sys.argv[3], {"full": full, "incremental": incremental})"""


def mlx_lm_logits(path, out, threads):
    """mlx-lm's full and incremental logits, in a process with OPENBLAS_NUM_THREADS=threads."""
    proc = subprocess.run([sys.executable, "-c", ORACLE, str(Path(oracle.__file__).parent), str(path), str(out),
                           ",".join(map(str, TOKENS))], capture_output=True, text=True,
                          env=clean_env(OPENBLAS_NUM_THREADS=str(threads)))
    assert proc.returncode == 0, proc.stderr
    return mx.load(str(out))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("threads", [1, 2])
def test_float32_logits_at_each_blas_thread_count(name, threads, fixtures_dir, tmp_path):
    """With OPENBLAS_NUM_THREADS=1 and =2: mlxrt's float32 logits, full and incremental, are
    mlx-lm's under the same setting, byte for byte, and the same again on a second run."""
    path = fixtures_dir / name
    ref = mlx_lm_logits(path, tmp_path / "mlx_lm.safetensors", threads)
    for mode in ("full", "incremental"):
        assert ref[mode].dtype == mx.float32
        first = mlxrt_logits(path, tmp_path / f"{mode}.safetensors", threads, mode == "incremental")
        again = mlxrt_logits(path, tmp_path / f"{mode}-again.safetensors", threads, mode == "incremental")
        assert first.shape == ref[mode].shape, (mode, first.shape)
        assert oracle.raw_bytes(first) == oracle.raw_bytes(ref[mode]), \
            f"{name} {mode}: mlxrt differs from mlx-lm with OPENBLAS_NUM_THREADS={threads}"
        assert oracle.raw_bytes(again) == oracle.raw_bytes(first), f"{name} {mode}: a second run differs"
