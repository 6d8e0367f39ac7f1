"""Fixture directories for the tests: each named fixture of tools/make_fixtures.py is checked (and
made when missing) once per test process, in the process, instead of starting the fixture tool per
test case."""
import functools
import os
from pathlib import Path

import make_fixtures

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[1]))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))


@functools.cache
def fixture_dir(name):
    """DIR/NAME of the fixture `name`, made first when missing or stale."""
    make_fixtures.ensure(FIXTURES, [name])
    return FIXTURES / name
