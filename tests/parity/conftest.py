import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
from long_tests import pytest_collection_modifyitems, pytest_configure  # noqa: E402,F401

BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))


def fixture_names():
    """Every fixture the plain model loads. A qwen3_next checkpoint in MLX's layout that keeps its
    multi-token-prediction head loads only with --mtp (mlx-lm's sanitize keeps those tensors too, and
    its load refuses them): tests/generate/test_mtp.py covers those, and test_logits_parity.py checks
    the refusal."""
    import make_fixtures
    return [name for name in make_fixtures.FIXTURES if name not in head_only_fixtures()]


def head_only_fixtures():
    import make_fixtures
    return [name for name, recipe in make_fixtures.FIXTURES.items()
            if recipe.get("mtp") and recipe["config"].get("model_type") == "qwen3_next"]


@pytest.fixture(scope="session")
def fixtures_dir():
    """Makes the fixtures not yet made: all of them, or those MLXRT_FIXTURE_NAMES lists (a run over a
    subset). tools/make_fixtures.py's ensure(), in this process (the test files import mlx-lm
    anyway): parallel pytest processes take turns on its lock, so one fixture is never written by
    two at once."""
    import make_fixtures

    only = os.environ.get("MLXRT_FIXTURE_NAMES", "").split()
    make_fixtures.ensure(FIXTURES, only or None)
    return FIXTURES


def run_mlxrt(*args, check=True):
    proc = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"mlxrt {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
