"""LoRA / DoRA adapters trained by mlx_lm.lora (the fixtures' <fixture>/adapter directories): `mlxrt
logits --adapter-path` byte-equal to mlx-lm's model with load_adapters applied (unfused, as
load(adapter_path=...) applies them), full and incremental; greedy and seeded generation equal to
mlx-lm's; adapters that do not fit the model refused with the file, the tensor and the shape."""
import json
import shutil
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.tuner.utils import load_adapters

import oracle
from conftest import run_mlxrt
from sampling_oracle import sample_tokens

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]
# LoRA on every layer; DoRA on a 4-bit base (QLoRA) and on the last 2 of 3 llama layers; LoRA with keys
# (lm_head among them) on a 4-bit base; LoRA on the tied embedding (rows and head); LoRA on a mixture of
# experts (LoRASwitchLinear on the switch layers, the router adapted too).
ADAPTED = ["qwen3_bf16_lora", "qwen3_q4_g64_dora", "llama_bf16_dora", "llama_q4_g64_lora_keys",
           "qwen3_bf16_lora_embed", "qwen3_moe_fp32_lora"]


def adapted(path):
    model, config = oracle.load(path)
    load_adapters(model, str(Path(path) / "adapter"))
    model.eval()
    return model, config


def logits_of(path, *flags, tokens=TOKENS, out):
    run_mlxrt("logits", "--model", path, "--tokens", ",".join(map(str, tokens)), "--out", out, *flags)
    return mx.load(str(out))["logits"]


@pytest.mark.parametrize("name", ADAPTED)
def test_logits_byte_equal_with_adapter(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    model, _ = adapted(path)
    for mode, compute in (("full", lambda: oracle.full_logits(model, TOKENS)),
                          ("incremental", lambda: oracle.incremental_logits(model, TOKENS))):
        ref = compute()
        flags = ["--adapter-path", path / "adapter", *(["--incremental"] if mode == "incremental" else [])]
        ours = logits_of(path, *flags, out=tmp_path / f"{mode}.safetensors")
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (mode, ours.dtype, ours.shape)
        assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref), f"{name} {mode}: logits differ"
    # The adapter changes the model: the base model's logits differ from the adapted ones.
    base = logits_of(path, out=tmp_path / "base.safetensors")
    assert oracle.raw_bytes(base) != oracle.raw_bytes(ref)


@pytest.mark.parametrize("name", ["qwen3_bf16_lora", "llama_bf16_dora", "llama_q4_g64_lora_keys", "qwen3_moe_fp32_lora"])
def test_greedy_tokens_with_adapter(name, fixtures_dir):
    path = fixtures_dir / name
    model, config = adapted(path)
    want = oracle.greedy_tokens(model, config, TOKENS[:6], 16)
    proc = run_mlxrt("generate", "--model", path, "--adapter-path", path / "adapter", "--prompt-tokens",
                     ",".join(map(str, TOKENS[:6])), "-m", 16, "--temp", 0)
    body = proc.stdout.split("==========\n")[1].strip()
    assert [int(t) for t in body.split()] == want


def adapted_sample(path, prompt, max_tokens, seed):
    """mlx_lm.generate with --seed and --adapter-path: seed, build the model, wrap its layers (each LoRA
    layer draws its base layer's and lora_a's initial values), load the adapter, sample."""
    import mlx_lm.utils as lm_utils
    original = lm_utils.load_model

    def load_model_with_adapter(model_path, *args, **kwargs):
        model, config = original(model_path, *args, **kwargs)
        load_adapters(model, str(Path(path) / "adapter"))
        model.eval()
        return model, config

    import sampling_oracle
    sampling_oracle.load_model = load_model_with_adapter
    try:
        return sample_tokens(path, prompt, max_tokens, seed, {"temp": 1.0, "top_p": 1.0}, {}, {2})
    finally:
        sampling_oracle.load_model = original


@pytest.mark.parametrize("name", ["qwen3_bf16_lora", "qwen3_q4_g64_dora", "llama_q4_g64_lora_keys"])
def test_seeded_sampling_with_adapter(name, fixtures_dir):
    """The sampler's first key comes after the model's and the adapter layers' construction draws."""
    path = fixtures_dir / name
    want, _ = adapted_sample(path, TOKENS[:6], 24, 3)
    proc = run_mlxrt("generate", "--model", path, "--adapter-path", path / "adapter", "--prompt-tokens",
                     ",".join(map(str, TOKENS[:6])), "-m", 24, "--seed", 3, "--temp", 1.0)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want


# ---- adapters that do not fit ----

def copy_adapter(fixtures_dir, name, tmp_path):
    out = tmp_path / "adapter"
    shutil.copytree(fixtures_dir / name / "adapter", out)
    return out


def refused(path, adapter, tmp_path):
    proc = run_mlxrt("logits", "--model", path, "--tokens", "1,2,3", "--out", tmp_path / "x.safetensors",
                     "--adapter-path", adapter, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "terminate" not in proc.stderr
    return proc.stderr


def test_adapter_of_another_base_is_refused(fixtures_dir, tmp_path):
    """A tensor of another shape (an adapter trained on a wider model) names the file, the tensor and
    the shape the model needs."""
    adapter = copy_adapter(fixtures_dir, "qwen3_bf16_lora", tmp_path)
    weights = mx.load(str(adapter / "adapters.safetensors"))
    name = "model.layers.1.self_attn.q_proj.lora_a"
    weights[name] = mx.zeros((256, 8))
    mx.save_safetensors(str(adapter / "adapters.safetensors"), weights)
    err = refused(fixtures_dir / "qwen3_bf16_lora", adapter, tmp_path)
    assert "adapters.safetensors" in err and name in err and "(256, 8)" in err and "(128, 8)" in err, err


def test_adapter_tensor_of_no_layer_is_refused(fixtures_dir, tmp_path):
    """A tensor for a layer the model lacks (a deeper base model) names the tensor."""
    adapter = copy_adapter(fixtures_dir, "qwen3_bf16_lora", tmp_path)
    weights = mx.load(str(adapter / "adapters.safetensors"))
    weights["model.layers.5.mlp.up_proj.lora_a"] = mx.zeros((128, 8))
    weights["model.layers.5.mlp.up_proj.lora_b"] = mx.zeros((8, 256))
    mx.save_safetensors(str(adapter / "adapters.safetensors"), weights)
    err = refused(fixtures_dir / "qwen3_bf16_lora", adapter, tmp_path)
    assert "model.layers.5.mlp.up_proj.lora_a" in err and "matches no layer" in err, err


def test_adapter_outside_num_layers_is_refused(fixtures_dir, tmp_path):
    """num_layers 1 adapts only the last layer: tensors of layer 1 of 3 match nothing (as mlx-lm refuses
    them: not an adapter parameter of the model)."""
    adapter = copy_adapter(fixtures_dir, "llama_bf16_dora", tmp_path)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["num_layers"] = 1
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    err = refused(fixtures_dir / "llama_bf16_dora", adapter, tmp_path)
    assert "model.layers.1." in err and "num_layers 1" in err, err


@pytest.mark.parametrize("case", ["no_config", "no_weights", "unknown_type", "alpha", "no_dir"])
def test_bad_adapter_directories(fixtures_dir, tmp_path, case):
    adapter = copy_adapter(fixtures_dir, "qwen3_bf16_lora", tmp_path)
    config = json.loads((adapter / "adapter_config.json").read_text())
    if case == "no_config":
        (adapter / "adapter_config.json").unlink()
        want = ["adapter_config.json", "missing"]
    elif case == "no_weights":
        (adapter / "adapters.safetensors").unlink()
        want = ["adapters.safetensors", "missing"]
    elif case == "unknown_type":
        config["fine_tune_type"] = "qlora"
        want = ["adapter_config.json", "fine_tune_type", "qlora"]
    elif case == "alpha":
        params = config["lora_parameters"]
        params["alpha"] = params.pop("scale")
        want = ["lora_parameters", "'scale'", "alpha"]
    else:
        shutil.rmtree(adapter)
        want = ["--adapter-path", "no such directory"]
    if adapter.exists():
        (adapter / "adapter_config.json").write_text(json.dumps(config)) if case != "no_config" else None
    err = refused(fixtures_dir / "qwen3_bf16_lora", adapter, tmp_path)
    for w in want:
        assert w in err, (w, err)


def test_full_fine_tune_adapter(fixtures_dir, tmp_path):
    """fine_tune_type 'full': mlx_lm.lora saves the trained layers' tensors, which replace the base ones
    (load_weights strict=False); logits byte-equal. A tensor of another shape is refused."""
    import make_fixtures
    from mlx_lm.utils import load_model

    path = fixtures_dir / "qwen3_bf16_lora"
    model, config = load_model(path)
    adapter = tmp_path / "full"
    make_fixtures.train_adapter(model, config, adapter, {"type": "full", "num_layers": 1, "seed": 3})
    model, _ = oracle.load(path)
    load_adapters(model, str(adapter))
    ref = oracle.full_logits(model, TOKENS)
    ours = logits_of(path, "--adapter-path", adapter, out=tmp_path / "full.safetensors")
    assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref)
    assert oracle.raw_bytes(logits_of(path, out=tmp_path / "base.safetensors")) != oracle.raw_bytes(ref)
    weights = mx.load(str(adapter / "adapters.safetensors"))
    weights["model.layers.1.mlp.up_proj.weight"] = mx.zeros((64, 128), dtype=mx.bfloat16)
    mx.save_safetensors(str(adapter / "adapters.safetensors"), weights)
    err = refused(path, adapter, tmp_path)
    assert "model.layers.1.mlp.up_proj.weight" in err and "(64, 128)" in err and "(256, 128)" in err, err


def test_switch_layer_adapter_checks(fixtures_dir, tmp_path):
    """On a mixture of experts: an expert delta of another shape names the tensor and both shapes;
    DoRA on the switch layers is refused, as mlx-lm's linear_to_lora_layers refuses it."""
    name = "model.layers.2.mlp.switch_mlp.up_proj.lora_a"
    adapter = copy_adapter(fixtures_dir, "qwen3_moe_fp32_lora", tmp_path)
    weights = mx.load(str(adapter / "adapters.safetensors"))
    weights[name] = mx.zeros((8, 8, 128))  # 8 experts where the model has 16
    mx.save_safetensors(str(adapter / "adapters.safetensors"), weights)
    err = refused(fixtures_dir / "qwen3_moe_fp32_lora", adapter, tmp_path)
    assert name in err and "(8, 8, 128)" in err and "(16, 8, 128)" in err, err

    adapter = copy_adapter(fixtures_dir, "qwen3_moe_fp32_lora", tmp_path / "dora")
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "fine_tune_type": "dora"}))
    err = refused(fixtures_dir / "qwen3_moe_fp32_lora", adapter, tmp_path)
    assert "switch_mlp" in err and "DoRA" in err, err
