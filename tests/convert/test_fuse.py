"""`mlxrt fuse` against mlx_lm.fuse on the same model and adapter: the output directories are
byte-identical (LoRA and DoRA on Linear layers, LoRA on an embedding and on mixture-of-experts
switch layers, adapters of quantized models re-quantized as they were, and --dequantize)."""
import json
import os
import subprocess
import sys

import pytest

from mlx_lm_side_by_side import BIN, assert_same_directory, source_copy  # noqa: E402

ADAPTED = ["qwen3_bf16_lora", "qwen3_bf16_lora_embed", "llama_bf16_dora", "qwen3_q4_g64_dora",
           "llama_q4_g64_lora_keys", "qwen3_moe_fp32_lora"]


def mlx_lm_fuse(src, dst, *extra):
    proc = subprocess.run([sys.executable, "-m", "mlx_lm", "fuse", "--model", str(src), "--adapter-path",
                           str(src / "adapter"), "--save-path", str(dst), *extra], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    return proc


def mlxrt_fuse(src, dst, *extra, check=True):
    proc = subprocess.run([BIN, "fuse", "--model", str(src), "--adapter-path", str(src / "adapter"), "--save-path",
                           str(dst), "--quiet", *extra], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.parametrize("dequantize", [False, True], ids=["as_saved", "dequantize"])
@pytest.mark.parametrize("name", ADAPTED)
def test_fuse_byte_identical(name, dequantize, tmp_path):
    src = source_copy(name, tmp_path)
    extra = ["--dequantize"] if dequantize else []
    theirs, ours = tmp_path / "mlx_lm", tmp_path / "mlxrt"
    printed = mlx_lm_fuse(src, theirs, *extra).stdout
    proc = mlxrt_fuse(src, ours, *extra)
    assert proc.stdout == printed
    assert_same_directory(src, ours, theirs)
    config = json.loads((ours / "config.json").read_text())
    assert ("quantization" in config) == ("q4" in name and not dequantize)


def test_fused_model_differs_from_the_base(tmp_path):
    """The fuse is not a copy: the adapted layers' weights change, the others do not."""
    import mlx.core as mx
    src = source_copy("qwen3_bf16_lora", tmp_path)
    mlxrt_fuse(src, tmp_path / "f")
    base, fused = mx.load(str(src / "model.safetensors")), mx.load(str(tmp_path / "f" / "model.safetensors"))
    changed = [k for k in base if not mx.array_equal(base[k], fused[k]).item()]
    assert changed and all("self_attn" in k or "mlp" in k for k in changed), changed


@pytest.mark.parametrize("args,message", [
    (["--export-gguf"], "mlx_lm.fuse --export-gguf"),
    (["--upload-repo", "me/fused"], "huggingface-cli upload me/fused"),
    (["--trust-remote-code"], "runs no Python code"),
])
def test_unsupported_options_refused(args, message, tmp_path):
    src = source_copy("qwen3_bf16_lora", tmp_path)
    proc = mlxrt_fuse(src, tmp_path / "f", *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "f").exists()


def test_adapter_of_another_model_refused(tmp_path):
    src = source_copy("qwen3_bf16_lora", tmp_path)
    other = source_copy("llama_bf16_dora", tmp_path)
    proc = subprocess.run([BIN, "fuse", "--model", str(src), "--adapter-path", str(other / "adapter"),
                           "--save-path", str(tmp_path / "f")], capture_output=True, text=True)
    assert proc.returncode != 0 and "adapter" in proc.stderr, proc.stderr
    assert not (tmp_path / "f").exists()
    missing = subprocess.run([BIN, "fuse", "--model", str(src), "--adapter-path", str(tmp_path / "none"),
                              "--save-path", str(tmp_path / "g")], capture_output=True, text=True)
    assert missing.returncode != 0 and "--adapter-path" in missing.stderr, missing.stderr


def test_full_fine_tune_fused_byte_identical(tmp_path):
    """A "full" fine-tune's adapters.safetensors holds whole tensors that replace the base ones."""
    import mlx.core as mx
    src = source_copy("qwen3_bf16_lora", tmp_path)
    config = json.loads((src / "adapter" / "adapter_config.json").read_text())
    (src / "adapter" / "adapter_config.json").write_text(json.dumps({**config, "fine_tune_type": "full"}))
    base = mx.load(str(src / "model.safetensors"))
    names = ["model.layers.1.mlp.down_proj.weight", "model.layers.0.self_attn.q_norm.weight"]
    mx.save_safetensors(str(src / "adapter" / "adapters.safetensors"),
                        {n: (base[n] * 1.5).astype(base[n].dtype) for n in names})
    theirs, ours = tmp_path / "mlx_lm", tmp_path / "mlxrt"
    mlx_lm_fuse(src, theirs)
    mlxrt_fuse(src, ours)
    assert_same_directory(src, ours, theirs)
    fused = mx.load(str(ours / "model.safetensors"))
    assert all(not mx.array_equal(fused[n], base[n]).item() for n in names)
