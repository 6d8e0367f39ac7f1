import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
from long_tests import pytest_collection_modifyitems, pytest_configure  # noqa: E402,F401

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


def mlx_lm_main(verb, *args, input=None):
    """`mlx_lm VERB args` as run_mlx_lm runs it, but in this process: mlx_lm.VERB's main() (what
    `python -m mlx_lm VERB` calls) with those arguments, `input` as its stdin, its stdout and stderr
    captured. The text tests call mlx-lm's CLI many times, and a fresh interpreter for each imports
    mlx-lm and transformers again (about two seconds a call). main() seeds the PRNG itself (--seed)
    before it builds the model, as in a fresh process; what is read from the environment at import
    (huggingface_hub's cache settings) is not read again: use run_mlx_lm where a call changes it.
    The cycle collector waits until main() returns: loading a tokenizer.json allocates millions of
    objects, and each collection on the way would walk this process's heap (Gemma's, 33 MB: a
    second more a call)."""
    import gc
    import importlib
    import io
    import traceback

    main = importlib.import_module(f"mlx_lm.{verb}").main
    # Universal newlines, as run_mlx_lm's pipes are read in text mode: a "\r" a model generates
    # reads as "\n" there (and in run_mlxrt's output), so here too.
    out, err = io.StringIO(newline=None), io.StringIO(newline=None)
    argv, stdin = sys.argv, sys.stdin
    sys.argv, sys.stdin = [f"mlx_lm.{verb}", *map(str, args)], io.StringIO(input or "")
    code = 0
    gc.disable()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 1
    except Exception:
        err.write(traceback.format_exc())
        code = 1
    finally:
        sys.argv, sys.stdin = argv, stdin
        gc.enable()
    if code != 0:
        raise AssertionError(f"mlx_lm {verb} failed:\n{err.getvalue()}")
    return subprocess.CompletedProcess([f"mlx_lm.{verb}", *map(str, args)], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def fixture_lock():
    """CTest runs the test files in parallel: one process at a time makes a fixture."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(FIXTURES / ".generate-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_fixture(name):
    """One fixture of tools/make_fixtures.py (kept when already made)."""
    from fixture_dirs import fixture_dir
    return fixture_dir(name)


@pytest.fixture(scope="session")
def tiny_model():
    """A tiny fixture (token ids only, no tokenizer files)."""
    return make_fixture("qwen3_bf16")


def _chat_fixture(name, tokenizer, config):
    """A tiny random llama made by mlx-lm, with a real tokenizer (and its chat template) copied in."""
    import make_fixtures

    out = FIXTURES / name
    recipe = {**make_fixtures.fx(config, seed=41), "tokenizer": tokenizer}
    stamp = out / "chat-fixture.json"
    with fixture_lock():
        if not (stamp.exists() and stamp.read_text() == json.dumps(recipe, sort_keys=True)):
            make_fixtures.build(name, make_fixtures.fx(config, seed=41), out)
            for f in (TOKENIZERS / tokenizer).iterdir():
                shutil.copy(f, out / f.name)
            stamp.write_text(json.dumps(recipe, sort_keys=True))
    return out


@pytest.fixture(scope="session")
def chat_model():
    """Qwen3's tokenizer and chat template on a tiny llama (tied embeddings keep it ~20 MB)."""
    import make_fixtures

    config = {**make_fixtures.LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    return _chat_fixture("llama_qwen3_tokenizer", "qwen3", config)
