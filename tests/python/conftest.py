import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
# The package as the build leaves it (build/python/mlxrt); an installed mlxrt is used otherwise.
PACKAGE_DIR = Path(os.environ.get("MLXRT_PYTHON_PACKAGE_DIR", ROOT / "build" / "python"))
if (PACKAGE_DIR / "mlxrt").is_dir():
    sys.path.insert(0, str(PACKAGE_DIR))
from long_tests import pytest_collection_modifyitems, pytest_configure  # noqa: E402,F401

FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
SHARED = Path(os.environ.get("MLXRT_SHARED_DIR", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def chat_model():
    """Qwen3's tokenizer and chat template on a tiny random llama: the fixture tests/generate uses
    (same name and recipe, so it is made once)."""
    import fcntl

    import make_fixtures

    config = {**make_fixtures.LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    name, tokenizer = "llama_qwen3_tokenizer", "qwen3"
    out = FIXTURES / name
    recipe = {**make_fixtures.fx(config, seed=41), "tokenizer": tokenizer}
    stamp = out / "chat-fixture.json"
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(FIXTURES / ".generate-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (stamp.exists() and stamp.read_text() == json.dumps(recipe, sort_keys=True)):
                make_fixtures.build(name, make_fixtures.fx(config, seed=41), out)
                for f in (SHARED / "data" / "tokenizers" / tokenizer).iterdir():
                    shutil.copy(f, out / f.name)
                stamp.write_text(json.dumps(recipe, sort_keys=True))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out
