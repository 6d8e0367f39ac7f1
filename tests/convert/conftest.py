import os
import sys
from pathlib import Path

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
from long_tests import pytest_collection_modifyitems, pytest_configure  # noqa: E402,F401
