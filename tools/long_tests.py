"""The split between `make test` and `make test-long`: cases marked `@pytest.mark.long` (sweeps over
real weights, repeats of what a shorter case already proves) are deselected unless MLXRT_TEST_LONG=1,
which `make test-long` sets. A conftest takes both hooks with
`from long_tests import pytest_configure, pytest_collection_modifyitems`."""
import os

LONG = os.environ.get("MLXRT_TEST_LONG") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "long: run by `make test-long` only (MLXRT_TEST_LONG=1)")


def pytest_collection_modifyitems(config, items):
    if LONG:
        return
    long_items = [item for item in items if item.get_closest_marker("long")]
    if long_items:
        config.hook.pytest_deselected(items=long_items)
        items[:] = [item for item in items if not item.get_closest_marker("long")]
