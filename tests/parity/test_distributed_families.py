"""Tensor parallel for the other families whose mlx-lm file defines shard(): ministral3 (llama's split)
and gpt_oss (attention heads with their sinks, the experts' hidden units, the down projection's bias
divided by the group size). Two ring ranks on the CPU: mlxrt's logits byte-equal to mlx-lm's sharded
model (tools/sharded_oracle.py under mlx.launch), and greedy tokens equal."""
import pytest

from test_distributed import mlx_lm_sharded, mlxrt_launch, mlxrt_logits, same_bytes, TOKEN_TEXT

# MLX's CPU gather_mm runs float32 only: gpt_oss's experts are the float32 fixture.
FAMILIES = ["ministral3_q4_g64", "gpt_oss_fp32"]


@pytest.mark.parametrize("name", FAMILIES)
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
