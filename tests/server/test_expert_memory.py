"""`mlxrt server --expert-memory`: a mixture-of-experts model served with its experts streamed
answers as the fully resident server does, and the log carries the expert-cache line per request."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, SOURCE, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import kv_oracle  # noqa: E402

MODEL = "qwen3_moe_q4_g64"


@pytest.fixture(scope="module")
def moe_with_tokenizer(tmp_path_factory):
    subprocess.run([sys.executable, str(SOURCE / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", MODEL], check=True)
    return kv_oracle.model_with_tokenizer(FIXTURES / MODEL, tmp_path_factory.mktemp("moe") / "m")


def completion(running):
    status, body = running.post_json("/v1/completions", {"prompt": "the model cache prompt", "max_tokens": 12,
                                                         "temperature": 0.0})
    assert status == 200, body
    return body["choices"][0]["text"]


def test_streamed_server_answers_as_resident(moe_with_tokenizer, tmp_path_factory):
    resident = start_mlxrt(moe_with_tokenizer, tmp_path_factory)
    try:
        expected = completion(resident)
    finally:
        stop(resident)
    streamed = start_mlxrt(moe_with_tokenizer, tmp_path_factory, extra=("--expert-memory", "0.0001"))
    try:
        assert completion(streamed) == expected
        assert completion(streamed) == expected
    finally:
        stop(streamed)
    log = Path(streamed.log).read_text()
    assert log.count("Expert cache: hit rate") == 2, log[-2000:]
    assert "Expert cache" not in Path(resident.log).read_text()
