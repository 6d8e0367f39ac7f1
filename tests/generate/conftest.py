import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))

BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
SHARED = Path(os.environ.get("MLXRT_SHARED_DIR", ROOT.parent / "shared"))
TOKENIZERS = SHARED / "data" / "tokenizers"
PY = sys.executable


def run_mlxrt(*args, input=None, check=True):
    proc = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"mlxrt {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def run_mlx_lm(verb, *args, input=None):
    proc = subprocess.run([PY, "-m", "mlx_lm", verb, *map(str, args)], capture_output=True, text=True, input=input,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if proc.returncode != 0:
        raise AssertionError(f"mlx_lm {verb} failed:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def tiny_model():
    """A tiny fixture (token ids only, no tokenizer files)."""
    subprocess.run([PY, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES), "--only", "qwen3_bf16"],
                   check=True)
    return FIXTURES / "qwen3_bf16"


def _chat_fixture(name, tokenizer, config):
    """A tiny random llama made by mlx-lm, with a real tokenizer (and its chat template) copied in."""
    import make_fixtures

    out = FIXTURES / name
    recipe = make_fixtures.fx(config, seed=41)
    stamp = out / "fixture.json"
    import json
    if not (stamp.exists() and stamp.read_text() == json.dumps(recipe, sort_keys=True)):
        make_fixtures.build(name, recipe, out)
    for f in (TOKENIZERS / tokenizer).iterdir():
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def chat_model():
    """Qwen3's tokenizer and chat template on a tiny llama (tied embeddings keep it ~20 MB)."""
    import make_fixtures

    config = {**make_fixtures.LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    return _chat_fixture("llama_qwen3_tokenizer", "qwen3", config)
