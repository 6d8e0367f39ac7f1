"""Bad input: each case gives a clear message naming the file/field and a non-zero exit."""
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "qwen3_bf16", "qwen3_q4_g64"], check=True)
    return FIXTURES


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def logits(model_dir, *extra):
    return subprocess.run([BIN, "logits", "--model", str(model_dir), "--tokens", "1,2,3",
                           "--out", str(Path(model_dir).parent / "out.safetensors"), *extra],
                          capture_output=True, text=True)


def rewrite_header(path: Path, edit):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    edit(header)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data[8 + n:])


def edit_config(d, fn):
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def weights_of(d):
    from mlx.core import load
    return load(str(d / "model.safetensors"))


def save_weights(d, w):
    import mlx.core as mx
    mx.save_safetensors(str(d / "model.safetensors"), w)


CASES = {
    "missing directory": (lambda d: shutil.rmtree(d), ["does not exist"]),
    "missing config.json": (lambda d: (d / "config.json").unlink(), ["config.json", "not found"]),
    "invalid config.json": (lambda d: (d / "config.json").write_text("{not json"), ["config.json", "invalid JSON"]),
    "missing required key": (lambda d: edit_config(d, lambda c: c.pop("hidden_size")),
                             ["config.json", "hidden_size"]),
    "wrong key type": (lambda d: edit_config(d, lambda c: c.update(num_hidden_layers="two")),
                       ["num_hidden_layers", "integer"]),
    "unsupported model_type": (lambda d: edit_config(d, lambda c: c.update(model_type="mamba")),
                               ["unsupported model_type \"mamba\"", "supported: gemma, gemma2, gemma3, gemma3_text, gemma4, gemma4_text, gemma4_unified, llama, "]),
    "remapped model_type": (lambda d: edit_config(d, lambda c: c.update(model_type="kimi_k2")),
                            ["mlx-lm remaps it to \"deepseek_v3\""]),
    "missing weight": (lambda d: (save_weights(d, {k: v for k, v in weights_of(d).items()
                                                   if k != "model.norm.weight"}),
                                  (d / "model.safetensors.index.json").unlink()),
                       ["missing parameters", "model.norm.weight"]),
    "index names a tensor its file lacks": (lambda d: save_weights(d, {k: v for k, v in weights_of(d).items()
                                                                       if k != "model.norm.weight"}),
                                            ["model.safetensors.index.json", "'model.norm.weight' is not in"]),
    "index names a missing file": (lambda d: (d / "model.safetensors").rename(d / "model-x.safetensors"),
                                   ["maps to missing file model.safetensors"]),
    "extra weight": (lambda d: save_weights(d, {**weights_of(d), "model.extra.weight": weights_of(d)["model.norm.weight"]}),
                     ["unexpected parameters", "model.extra.weight"]),
    "mis-shaped weight": (lambda d: save_weights(d, {**weights_of(d), "model.norm.weight": weights_of(d)["model.norm.weight"][:64]}),
                          ["model.norm.weight", "expected shape (128,)", "(64,)"]),
    "no weight files": (lambda d: (d / "model.safetensors").unlink(), ["no model*.safetensors"]),
    "truncated safetensors": (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-100]),
                              ["model.safetensors", "beyond the end of the file"]),
    "header length beyond file": (lambda d: (d / "model.safetensors").write_bytes(
        struct.pack("<Q", 1 << 40) + (d / "model.safetensors").read_bytes()[8:]), ["header length", "beyond the end"]),
    "unknown dtype": (lambda d: rewrite_header(d / "model.safetensors",
                                               lambda h: h["model.norm.weight"].update(dtype="Q9")),
                      ["unknown dtype 'Q9'", "model.norm.weight"]),
    "dtype size mismatch": (lambda d: rewrite_header(d / "model.safetensors",
                                                     lambda h: h["model.norm.weight"].update(dtype="F32")),
                            ["model.norm.weight", "data_offsets span"]),
}

QUANT_CASES = {
    "unsupported bits": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"bits": 7, "group_size": 64}})), ["bits 7", "model.layers.0.mlp.up_proj"]),
    "unsupported group size": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"bits": 4, "group_size": 48}})), ["group size 48"]),
    "unsupported mode": (lambda d: edit_config(d, lambda c: c["quantization"].update(
        {"model.layers.0.mlp.up_proj": {"mode": "fp3"}})), ["mode 'fp3'"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model(case, base, tmp_path):
    d = copy_model(base / "qwen3_bf16", tmp_path / "m")
    breaker, expected = CASES[case]
    breaker(d)
    proc = logits(d)
    assert proc.returncode != 0, proc.stdout
    assert proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("case", list(QUANT_CASES))
def test_bad_quantization(case, base, tmp_path):
    d = copy_model(base / "qwen3_q4_g64", tmp_path / "m")
    breaker, expected = QUANT_CASES[case]
    breaker(d)
    proc = logits(d)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"


@pytest.mark.parametrize("args,expected", [
    (["--tokens", "1,x"], "--tokens"),
    (["--tokens", "1,99999"], "outside the vocabulary"),
])
def test_bad_flags(args, expected, base, tmp_path):
    proc = subprocess.run([BIN, "logits", "--model", str(base / "qwen3_bf16"), "--out", str(tmp_path / "o.safetensors"),
                           *args], capture_output=True, text=True)
    assert proc.returncode != 0 and expected in proc.stderr, proc.stderr


GEMMA3_CASES = {
    "layer pattern longer than the model": (lambda c: c.update(sliding_window_pattern=6),
                                            ["config.json", "'num_hidden_layers' (4)", "'sliding_window_pattern' (6)"]),
    "zero layer pattern": (lambda c: c.update(sliding_window_pattern=0),
                           ["config.json", "'sliding_window_pattern' must be at least 1"]),
    "gemma3 without text_config": (lambda c: c.update(model_type="gemma3"), ["config.json", "'text_config'"]),
}


@pytest.mark.parametrize("case", list(GEMMA3_CASES))
def test_bad_gemma3_config(case, tmp_path):
    """Configs on which mlx-lm's gemma3_text fails inside the graph (a modulo by zero, a cache index
    out of range) are refused up front, naming the fields."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "gemma3_bf16"], check=True)
    d = copy_model(FIXTURES / "gemma3_bf16", tmp_path / "m")
    edit, expected = GEMMA3_CASES[case]
    edit_config(d, edit)
    proc = logits(d)
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"


SLIDING, FULL = "sliding_attention", "full_attention"
GEMMA4_CASES = {
    "layer_types shorter than the model": (lambda c: c.update(layer_types=[SLIDING, FULL]),
                                           ["config.json", "'layer_types' lists 2 layers", "'num_hidden_layers' is 6"]),
    "layer_types longer than the model": (lambda c: c.update(layer_types=[SLIDING, SLIDING, FULL] * 3),
                                          ["config.json", "'layer_types' lists 9 layers"]),
    "unknown layer type": (lambda c: c.update(layer_types=[SLIDING, "chunked_attention", FULL] * 2),
                           ["config.json", "'layer_types' entries", "\"chunked_attention\""]),
    "layer_types not a list": (lambda c: c.update(layer_types="sliding"), ["config.json", "'layer_types' must be a list"]),
    "every layer KV-shared": (lambda c: c.update(num_kv_shared_layers=6),
                              ["config.json", "'num_kv_shared_layers' (6)", "less than 'num_hidden_layers' (6)"]),
    "a shared layer with nothing to share": (lambda c: c.update(layer_types=[SLIDING] * 4 + [FULL, FULL]),
                                             ["config.json", "layer 4 is KV-shared", "\"full_attention\""]),
    "mixture-of-experts block": (lambda c: c.update(enable_moe_block=True, num_experts=4, top_k_experts=2),
                                 ["config.json", "'enable_moe_block'", "not supported"]),
    "wrong field type": (lambda c: c.update(global_head_dim="wide"), ["config.json", "global_head_dim"]),
    "rope_parameters not an object": (lambda c: c.update(rope_parameters=[1, 2]),
                                      ["config.json", "'rope_parameters' must be an object"]),
    "unknown rope type": (lambda c: c.update(rope_parameters={FULL: {"rope_type": "spiral"}}),
                          ["config.json", "rope_parameters.full_attention", "unsupported RoPE type 'spiral'"]),
    "gemma4 with a text_config that is not an object": (lambda c: c.update(model_type="gemma4", text_config=[1]),
                                                        ["config.json", "'text_config' must be an object"]),
    "gemma4 with a bad text model": (lambda c: c.update(model_type="gemma4", text_config={**c, "layer_types": [FULL]}),
                                     ["config.json: text_config", "'layer_types' lists 1 layers"]),
}


@pytest.mark.parametrize("case", list(GEMMA4_CASES))
def test_bad_gemma4_config(case, tmp_path):
    """Gemma 4 configs mlx-lm fails on inside the graph (an index past layer_types, a KV-shared layer
    with no layer to share from), or that it runs but mlxrt does not (the MoE block), are refused
    before any weight is read, naming the field. (gemma4_text's fields all have defaults: none is
    required.)"""
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "gemma4_bf16"], check=True)
    d = copy_model(FIXTURES / "gemma4_bf16", tmp_path / "m")
    edit, expected = GEMMA4_CASES[case]
    edit_config(d, edit)
    proc = logits(d)
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"
    assert not (tmp_path / "out.safetensors").exists()


GEMMA2_CASES = {
    "missing head_dim": ("gemma2_bf16", lambda c: c.pop("head_dim"), ["config.json", "missing required key 'head_dim'"]),
    "missing rms_norm_eps": ("gemma_bf16", lambda c: c.pop("rms_norm_eps"),
                             ["config.json", "missing required key 'rms_norm_eps'"]),
    "heads not a multiple of the KV heads": ("gemma2_bf16", lambda c: c.update(num_key_value_heads=3),
                                             ["config.json", "'num_attention_heads' (4)", "'num_key_value_heads' (3)"]),
    "null attention softcap": ("gemma2_bf16", lambda c: c.update(attn_logit_softcapping=None),
                               ["config.json", "'attn_logit_softcapping' must be a number"]),
    "wrong field type": ("gemma_bf16", lambda c: c.update(rope_theta="fast"), ["config.json", "rope_theta"]),
}


@pytest.mark.parametrize("case", list(GEMMA2_CASES))
def test_bad_gemma2_and_gemma_config(case, tmp_path):
    """gemma2.py's and gemma.py's fields without defaults are required; configs on which gemma2's
    grouped attention or its softcap fails in mlx-lm's graph are refused, naming the field."""
    fixture, edit, expected = GEMMA2_CASES[case]
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", fixture], check=True)
    d = copy_model(FIXTURES / fixture, tmp_path / "m")
    edit_config(d, edit)
    proc = logits(d)
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{case}: {text!r} not in {proc.stderr!r}"
    assert not (tmp_path / "out.safetensors").exists()


def test_gemma2_refuses_a_quantized_kv_cache(tmp_path):
    """mlx-lm's gemma2.py multiplies the quantized cache's tuples as arrays and fails; mlxrt says why."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "gemma2_bf16"], check=True)
    proc = logits(FIXTURES / "gemma2_bf16", "--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0",
                  "--chunk-size", "1")
    assert proc.returncode == 1 and "--kv-bits" in proc.stderr and "gemma2" in proc.stderr, proc.stderr
