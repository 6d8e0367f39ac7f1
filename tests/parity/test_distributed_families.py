"""Tensor parallel for the other families whose mlx-lm file defines shard(): ministral3 (llama's split),
gpt_oss (attention heads with their sinks, the experts' hidden units, the down projection's bias
divided by the group size) and qwen3_5 / qwen3_5_moe (the gated delta nets' convolution and q/k/v
projection split by segments, their z/b/a projections, dt_bias and A_log; the attention heads, with
key/value heads repeated when there are fewer than ranks; the MLP or the experts and shared expert;
an untied head split by vocabulary and gathered). Two ring ranks on the CPU: mlxrt's logits byte-equal
to mlx-lm's sharded model (tools/sharded_oracle.py, in two ring ranks that tools/oracle_ranks.py
keeps up), and greedy tokens equal. Pipeline parallel for the hybrid families (qwen3_5 and
qwen3_next are PipelineMixins): logits byte-equal to mlx-lm's pipelined model and to one process's."""
import mlx.core as mx
import pytest

from conftest import BIN
from test_distributed import (mlx_lm_sharded, mlxrt_launch, mlxrt_logits, parse_generated, run, same_bytes,
                              TOKEN_TEXT)

# MLX's CPU gather_mm runs float32 only: gpt_oss's experts are the float32 fixture (qwen3_5_moe's are
# quantized: gather_qmm).
FAMILIES = ["ministral3_q4_g64", "gpt_oss_fp32"]
# bf16 and 4-bit with an untied head; one key/value head (repeated on both ranks), a tied head and a
# full-attention layer every 4th; the MoE variant, whose experts' hidden units split into whole groups.
QWEN3_5 = ["qwen3_5_bf16", "qwen3_5_q4_g64", "qwen3_5_hd256_gqa", "qwen3_5_moe_q4_g64_tp2"]
# qwen3_5_hd256_gqa's rank 1 holds only gated delta nets (layers 0-1 of 4): no full-attention mask there,
# and the last layer's cache is an ArraysCache.
HYBRID_PIPELINE = ["qwen3_5_hd256_gqa", "qwen3_5_moe_q4_g64_tp2", "qwen3_next_fp32"]


# qwen3_5_bf16 repeats what qwen3_5_q4_g64 proves for the split (`make test-long` runs it).
@pytest.mark.parametrize("name", FAMILIES + [pytest.param(n, marks=pytest.mark.long) if n == "qwen3_5_bf16" else n
                                             for n in QWEN3_5])
def test_tensor_parallel_logits_byte_equal_to_mlx_lm(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    want = mlx_lm_sharded(path, tmp_path / "mlx_lm.safetensors")["logits"]
    got = mlxrt_logits(path, tmp_path / "mlxrt.safetensors")
    assert same_bytes(got, want), name


def test_gpt_oss_greedy_tokens_equal_mlx_lm(fixtures_dir, tmp_path):
    path = fixtures_dir / "gpt_oss_fp32"
    want = mlx_lm_sharded(path, tmp_path / "mlx_lm.safetensors", max_tokens=16)["tokens"].tolist()
    proc = mlxrt_launch("generate", "--model", path, "--prompt-tokens", TOKEN_TEXT, "--max-tokens", 16)
    got = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
    assert got == want


@pytest.mark.parametrize("name,pipeline", [pytest.param("qwen3_5_q4_g64", False, marks=pytest.mark.long),
                                           ("qwen3_5_moe_q4_g64_tp2", False), ("qwen3_5_hd256_gqa", True)])
def test_qwen3_5_greedy_tokens_equal_mlx_lm(name, pipeline, fixtures_dir, tmp_path):
    """Through the caches: each rank's part of the conv and recurrent states (tensor parallel), or a
    pipeline stage's whole layers."""
    path = fixtures_dir / name
    flags = ["--pipeline"] if pipeline else []
    want = mlx_lm_sharded(path, tmp_path / "mlx_lm.safetensors", pipeline=pipeline, max_tokens=16)["tokens"].tolist()
    proc = mlxrt_launch("generate", "--model", path, "--prompt-tokens", TOKEN_TEXT, "--max-tokens", 16, *flags)
    eos = 2
    assert parse_generated(proc.stdout) == (want[:want.index(eos)] if eos in want else want)


@pytest.mark.parametrize("name", HYBRID_PIPELINE)
def test_hybrid_pipeline_logits_byte_equal_to_mlx_lm_and_to_one_process(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    want = mlx_lm_sharded(path, tmp_path / "mlx_lm.safetensors", pipeline=True)["logits"]
    got = mlxrt_logits(path, tmp_path / "mlxrt.safetensors", "--pipeline")
    assert same_bytes(got, want), f"{name}: pipeline logits differ from mlx-lm's pipelined model"
    single = run([BIN, "logits", "--model", path, "--tokens", TOKEN_TEXT, "--out", tmp_path / "one.safetensors"])
    assert single.returncode == 0, single.stderr
    assert same_bytes(got, mx.load(str(tmp_path / "one.safetensors"))["logits"])


def test_qwen3_next_has_no_tensor_parallel(fixtures_dir):
    # qwen3_next.py defines no shard() (only qwen3_5.py does): its pipeline runs, its tensor split is refused.
    proc = mlxrt_launch("logits", "--model", fixtures_dir / "qwen3_next_fp32", "--tokens", "1,2", "--out",
                        "/dev/null", check=False)
    assert proc.returncode != 0 and "model_type 'qwen3_next' has no tensor-parallel sharding" in proc.stderr
