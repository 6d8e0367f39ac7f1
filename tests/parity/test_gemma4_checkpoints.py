"""Gemma 4 checkpoints as Hugging Face saves them, which mlx-lm's gemma4.py / gemma4_text.py sanitize
on load: the text model under model.language_model. (renamed to language_model.model.), towers
under model.*, key/value projections for the KV-shared layers (dropped), and the MoE block's fused
experts.gate_up_proj / experts.down_proj (split into switch layers). Logits byte-equal and seeded
sampling equal to mlx-lm's on such checkpoints."""
import json
import shutil

import mlx.core as mx
import pytest

import oracle
from conftest import run_mlxrt
from sampling_oracle import sample_tokens

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]


@pytest.fixture
def hf_named(fixtures_dir, tmp_path):
    src = fixtures_dir / "gemma4_multimodal"
    d = tmp_path / "gemma4_hf"
    shutil.copytree(src, d)
    weights = {}
    for f in sorted(d.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
        f.unlink()
    (d / "model.safetensors.index.json").unlink(missing_ok=True)
    renamed = {("model.language_model." + k[len("language_model.model."):]
                if k.startswith("language_model.model.") else k): v for k, v in weights.items()}
    # Layers 4 and 5 share layer 3's and layer 2's keys and values: their own projections go unused.
    hidden = json.loads((d / "config.json").read_text())["text_config"]["hidden_size"]
    for layer in (4, 5):
        renamed[f"model.language_model.layers.{layer}.self_attn.k_proj.weight"] = mx.ones((64, hidden), mx.bfloat16)
        renamed[f"model.language_model.layers.{layer}.self_attn.v_proj.weight"] = mx.ones((64, hidden), mx.bfloat16)
        renamed[f"model.language_model.layers.{layer}.self_attn.k_norm.weight"] = mx.ones((32,), mx.bfloat16)
    renamed["model.language_model.layers.0.self_attn.rotary_emb.inv_freq"] = mx.ones((16,), mx.float32)
    mx.save_safetensors(str(d / "model.safetensors"), renamed, metadata={"format": "mlx"})
    return d


def test_hf_names_logits_byte_equal(hf_named, tmp_path):
    model, _ = oracle.load(hf_named)
    ref = oracle.full_logits(model, TOKENS)
    out = tmp_path / "full.safetensors"
    run_mlxrt("logits", "--model", hf_named, "--tokens", ",".join(map(str, TOKENS)), "--out", out)
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)


def test_hf_names_seed_position(hf_named):
    """The unused projections build no modules in mlx-lm: they draw nothing before sampling."""
    prompt = [1, 5, 9, 200, 33, 17]
    want, _ = sample_tokens(hf_named, prompt, 24, 3, {"temp": 1.0, "top_p": 1.0}, {}, {2})
    proc = run_mlxrt("generate", "--model", hf_named, "--prompt-tokens", ",".join(map(str, prompt)), "-m", 24,
                     "--seed", 3, "--temp", 1.0)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want


def _fused_experts(src, d):
    """The MoE fixture with its experts as Hugging Face stores them: experts.gate_up_proj (gate and
    up stacked along -2) and experts.down_proj, which gemma4_text's sanitize splits and renames."""
    shutil.copytree(src, d)
    weights = {}
    for f in sorted(d.glob("model*.safetensors")):
        weights.update(mx.load(str(f)))
        f.unlink()
    (d / "model.safetensors.index.json").unlink(missing_ok=True)
    out = {}
    for k, v in weights.items():
        if ".experts.switch_glu.gate_proj." in k:
            base = k.split(".switch_glu.")[0]
            up = weights[k.replace("gate_proj", "up_proj")]
            out[base + ".gate_up_proj"] = mx.concatenate([v, up], axis=-2)
        elif ".experts.switch_glu.down_proj." in k:
            out[k.split(".switch_glu.")[0] + ".down_proj"] = v
        elif ".experts.switch_glu.up_proj." not in k:
            out[k] = v
    mx.save_safetensors(str(d / "model.safetensors"), out, metadata={"format": "mlx"})
    return d


@pytest.fixture
def hf_experts(fixtures_dir, tmp_path):
    return _fused_experts(fixtures_dir / "gemma4_moe_fp32", tmp_path / "gemma4_moe_hf")


def test_hf_experts_logits_byte_equal(hf_experts, tmp_path):
    model, _ = oracle.load(hf_experts)
    ref = oracle.full_logits(model, TOKENS)
    out = tmp_path / "full.safetensors"
    run_mlxrt("logits", "--model", hf_experts, "--tokens", ",".join(map(str, TOKENS)), "--out", out)
    assert oracle.raw_bytes(mx.load(str(out))["logits"]) == oracle.raw_bytes(ref)


def test_hf_experts_seed_position(hf_experts):
    """The fused tensors become three switch layers, which draw their initial weights in mlx-lm."""
    prompt = [1, 5, 9, 200, 33, 17]
    want, _ = sample_tokens(hf_experts, prompt, 24, 3, {"temp": 1.0, "top_p": 1.0}, {}, {2})
    proc = run_mlxrt("generate", "--model", hf_experts, "--prompt-tokens", ",".join(map(str, prompt)), "-m", 24,
                     "--seed", 3, "--temp", 1.0)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want


def test_hf_experts_odd_gate_up_is_refused(hf_experts, tmp_path):
    """A gate_up_proj that does not split in halves (mx.split fails in mlx-lm) is named."""
    weights = mx.load(str(hf_experts / "model.safetensors"))
    name = "model.layers.1.experts.gate_up_proj"
    weights[name] = weights[name][:, :-1, :]
    mx.save_safetensors(str(hf_experts / "model.safetensors"), weights, metadata={"format": "mlx"})
    proc = run_mlxrt("logits", "--model", hf_experts, "--tokens", "1,2,3", "--out", tmp_path / "x.safetensors",
                     check=False)
    assert proc.returncode == 1 and name in proc.stderr and "(16, 127, 128)" in proc.stderr, proc.stderr
