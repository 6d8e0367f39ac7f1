"""`mlxrt fit`: the KV-cache bytes it predicts equal the nbytes of mlx-lm's own caches after the
same run (make_prompt_cache, generate_step's prefill chunks, single steps, maybe_quantize_kv_cache),
for full-attention, sliding-window, hybrid recurrent, --max-kv-size and --kv-bits runs; and its
output and errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
NAMES = ["qwen3_bf16", "gemma3_bf16", "qwen3_5_bf16", "lfm2_bf16", "llama_bf16"]


@pytest.fixture(scope="module")
def fixtures():
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", *NAMES], check=True)
    return {name: FIXTURES / name for name in NAMES}


def mlxrt(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)


def fit_json(path, *args):
    r = mlxrt("fit", "--model", path, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def mlx_lm_kv_bytes(path, context, prompt, step, max_kv_size=None, kv_bits=None, group=64, start=5000):
    """Sum of the cache's nbytes after mlx-lm's generate_step pattern, run in a child process."""
    code = f"""
import mlx.core as mx
from pathlib import Path
from mlx_lm.utils import load_model
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.generate import maybe_quantize_kv_cache
model, _ = load_model(Path({str(path)!r}))
cache = make_prompt_cache(model, max_kv_size={max_kv_size!r})
tokens = mx.array([(7 * i) % 97 + 3 for i in range({context})])
done = 0
def run(n):
    global done
    model(tokens[done:done + n][None], cache=cache)
    maybe_quantize_kv_cache(cache, {start}, {group}, {kv_bits!r})
    mx.eval([c.state for c in cache])
    done += n
while {prompt} - done > 1:
    run(min({step}, {prompt} - done - 1))
while done < {context}:
    run(1)
print(sum(c.nbytes for c in cache))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


RUNS = [
    # name, context, prompt, step, extra flags, mlx-lm keyword arguments
    ("qwen3_bf16", 700, 600, 256, [], {}),
    ("qwen3_bf16", 700, 600, 200, [], {}),  # chunks that leave the buffer off the 256 grid
    ("gemma3_bf16", 700, 600, 256, [], {}),  # sliding-window (rotating) and global layers
    ("qwen3_5_bf16", 300, 300, 128, [], {}),  # recurrent state plus full attention
    ("lfm2_bf16", 300, 280, 128, [], {}),  # convolution state plus full attention
    ("llama_bf16", 700, 600, 256, ["--max-kv-size", 300], {"max_kv_size": 300}),
    ("qwen3_bf16", 700, 600, 256, ["--kv-bits", 4, "--kv-group-size", 32, "--quantized-kv-start", 300],
     {"kv_bits": 4, "group": 32, "start": 300}),
]


@pytest.mark.parametrize("name,context,prompt,step,flags,kwargs", RUNS,
                         ids=[f"{r[0]}-{r[1]}-{r[3]}{'-' + str(r[4][0]).strip('-') if r[4] else ''}" for r in RUNS])
def test_kv_bytes_equal_mlx_lm_cache_nbytes(fixtures, name, context, prompt, step, flags, kwargs):
    est = fit_json(fixtures[name], "--context", context, "--prompt-tokens", prompt, "--prefill-step-size", step,
                   *flags)
    want = mlx_lm_kv_bytes(fixtures[name], context, prompt, step, **kwargs)
    assert est["kv_cache"]["bytes"] == want
    assert est["kv_cache"]["peak_bytes"] >= want


def test_layer_types_and_totals(fixtures):
    gemma = fit_json(fixtures["gemma3_bf16"], "--context", 1000)
    kinds = {t["type"]: t for t in gemma["kv_cache"]["layer_types"]}
    config = json.loads((fixtures["gemma3_bf16"] / "config.json").read_text())
    assert kinds["rotating"]["max_size"] == config["sliding_window"]
    assert kinds["full_attention"]["cache"] == "KVCache"
    head = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    # keys and values, bf16: 2 x heads x head_dim x 2 bytes per token and layer
    assert kinds["full_attention"]["bytes_per_token"] == 2 * config["num_key_value_heads"] * head * 2
    assert sum(t["layers"] for t in gemma["kv_cache"]["layer_types"]) == config["num_hidden_layers"]
    assert gemma["peak_bytes"] == (gemma["weights_bytes"] + gemma["kv_cache"]["peak_bytes"]
                                   + gemma["activations"]["bytes"])
    assert gemma["required_bytes"] == gemma["peak_bytes"] + gemma["headroom_bytes"]
    assert gemma["fits"] == (gemma["required_bytes"] <= gemma["device"]["available_bytes"])
    # The weights: the safetensors data, read from the headers.
    st = fixtures["gemma3_bf16"] / "model.safetensors"
    header_len = int.from_bytes(st.read_bytes()[:8], "little")
    assert gemma["weights_bytes"] == st.stat().st_size - 8 - header_len

    hybrid = fit_json(fixtures["qwen3_5_bf16"], "--context", 1000)
    state = [t for t in hybrid["kv_cache"]["layer_types"] if t["type"] == "recurrent_state"]
    assert state and state[0]["cache"] == "ArraysCache" and state[0]["state_bytes_per_sequence"] > 0
    # The recurrent state does not grow with the context; a batch multiplies everything.
    longer = fit_json(fixtures["qwen3_5_bf16"], "--context", 1000, "--batch", 3)
    assert longer["kv_cache"]["bytes"] == 3 * hybrid["kv_cache"]["bytes"]

    quant = fit_json(fixtures["qwen3_bf16"], "--context", 8000, "--kv-bits", 4, "--kv-group-size", 32)
    full = quant["kv_cache"]["layer_types"][0]
    # 4-bit: head_dim/8 packed bytes plus a bf16 scale and bias per group of 32, for keys and values
    heads, head_dim = full["kv_heads"], full["k_head_dim"]
    assert full["quantized_bytes_per_token"] == heads * 2 * (head_dim // 2 + 2 * (head_dim // 32) * 2)
    plain = fit_json(fixtures["qwen3_bf16"], "--context", 8000)
    assert quant["kv_cache"]["bytes"] < plain["kv_cache"]["bytes"] / 2


def test_text_output_and_errors(fixtures, tmp_path):
    r = mlxrt("fit", "--model", fixtures["llama_bf16"], "--context", 4096)
    assert r.returncode == 0, r.stderr
    assert "Weights:" in r.stdout and "full_attention (KVCache, bfloat16)" in r.stdout
    assert "Fits." in r.stdout or "Does not fit." in r.stdout
    r = mlxrt("fit", "--model", fixtures["qwen3_bf16"], "--context", 100, "--kv-bits", 4)
    assert r.returncode != 0 and "--kv-group-size 64 does not divide the model's head size 32" in r.stderr
    r = mlxrt("fit", "--model", fixtures["gemma3_bf16"], "--context", 9000, "--kv-bits", 4, "--kv-group-size", 32)
    assert r.returncode != 0 and "rotating KV cache" in r.stderr
    r = mlxrt("fit", "--model", fixtures["qwen3_bf16"], "--context", 0)
    assert r.returncode != 0 and "--context must be at least 1" in r.stderr
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_family"}))
    r = mlxrt("fit", "--model", tmp_path, "--context", 10)
    assert r.returncode != 0 and "no_such_family" in r.stderr
