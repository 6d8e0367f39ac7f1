"""L3 on every family: `mlxrt logits --fidelity l3` runs for every fixture the L1 parity runs (the
packed quantized matmuls, the fused RMSNorm, RoPE variants and attention meet every family's shapes),
and it is no farther from the model computed exactly than L1 is. The exact computation is the same
fixture with its floating tensors in float32, at L1: on a bfloat16 checkpoint MLX's CPU quantized
matmul sums in bfloat16, so L1 itself sits some way from it (KL up to 1.5e-2 on these random models)
and L3, which sums in float32, sits nearer; KL(P_l1 || P_l3) alone would measure L1's rounding.
Full logits for every fixture; one token at a time too for the 4- and 8-bit ones. The tiny random
models' distributions are flat, so greedy agreement is not asserted (`mlxrt fidelity` measures it
on real checkpoints)."""
import json
import re
from pathlib import Path

import mlx.core as mx
import pytest

import oracle
from conftest import fixture_names, run_mlxrt

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]
# L3 may be this much farther from float32 than L1 (float32 arithmetic in another order), never more.
SLACK = 1e-4

_FLAGS = set(re.findall(r"\w+", Path("/proc/cpuinfo").read_text())) if Path("/proc/cpuinfo").exists() else set()
pytestmark = pytest.mark.skipif(not {"avx2", "fma", "f16c"} <= _FLAGS, reason="no L3 CPU kernels on this machine")


def logits(path, out, fidelity, incremental):
    args = ["logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out, "--fidelity", fidelity]
    proc = run_mlxrt(*args, *(["--incremental"] if incremental else []), check=False)
    if proc.returncode != 0:
        return None, proc.stderr
    return mx.load(str(out))["logits"].astype(mx.float32), None


def mean_kl(p_logits, q_logits):
    """Mean KL(p || q) per position, in float64."""
    import numpy as np
    p, q = (np.array(a).astype(np.float64) for a in (p_logits, q_logits))
    log_p = p - p.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    log_q = q - q.max(-1, keepdims=True)
    log_q -= np.log(np.exp(log_q).sum(-1, keepdims=True))
    return float((np.exp(log_p) * (log_p - log_q)).sum(-1).mean())


def quantized(name):
    return re.search(r"_q[48]_", name) is not None


@pytest.mark.parametrize("name", fixture_names())
def test_l3_is_no_farther_from_float32_than_l1(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    exact_model = None
    for incremental in ((False, True) if quantized(name) else (False,)):
        l1, refusal = logits(path, tmp_path / "l1.safetensors", "l1", incremental)
        if l1 is None:
            # What L1 refuses (MLX's own CPU limits), L3 refuses with the same message.
            _, l3_refusal = logits(path, tmp_path / "l3.safetensors", "l3", incremental)
            assert l3_refusal is not None and refusal.strip().splitlines()[-1] in l3_refusal, (refusal, l3_refusal)
            continue
        l3, error = logits(path, tmp_path / "l3.safetensors", "l3", incremental)
        assert l3 is not None, f"{name}: l3 failed where l1 ran:\n{error}"
        assert l3.shape == l1.shape
        exact_model = exact_model or oracle.float32_copy(path, tmp_path / "float32")
        exact, error = logits(exact_model, tmp_path / "exact.safetensors", "l1", incremental)
        assert exact is not None, error
        l1_error, l3_error = mean_kl(exact, l1), mean_kl(exact, l3)
        mode = "incremental" if incremental else "full"
        assert l3_error == l3_error, f"{name} {mode}: KL is NaN"
        assert l3_error <= l1_error + SLACK, \
            f"{name} {mode}: KL from float32: l3 {l3_error:.3e}, l1 {l1_error:.3e} (l1 vs l3 {mean_kl(l1, l3):.3e})"


# Families whose layers take the fused L3 blocks (kernels/cpu/l3_block.h) in part or whole: llama
# (every piece), qwen3 8-bit (per-head q/k norms inside the block), smollm3 (NoPE layers keep the
# separate attention nodes), qwen2 (q/k/v biases: the attention stays separate nodes).
BLOCK_FIXTURES = ["llama_q4_g64", "qwen3_q8_g32", "smollm3_q4_g64", "qwen2_q4_g64"]


@pytest.mark.parametrize("name", BLOCK_FIXTURES)
def test_l3_blocks_give_the_bytes_of_the_separate_nodes(name, fixtures_dir, tmp_path):
    import os
    import subprocess
    from conftest import BIN
    for incremental in (False, True):
        outs = []
        for blocks in ("1", "0"):
            out = tmp_path / f"blocks{blocks}.safetensors"
            args = [BIN, "logits", "--model", fixtures_dir / name, "--tokens", ",".join(map(str, TOKENS)), "--out", out,
                    "--fidelity", "l3", *(["--incremental"] if incremental else [])]
            proc = subprocess.run(list(map(str, args)), capture_output=True, text=True,
                                  env={**os.environ, "MLXRT_L3_BLOCKS": blocks})
            assert proc.returncode == 0, proc.stderr
            outs.append(out.read_bytes())
        assert outs[0] == outs[1], f"{name} ({'incremental' if incremental else 'full'}): blocks differ"
