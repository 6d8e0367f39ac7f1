"""Seeded sampling on a real model: `mlxrt generate` and `mlxrt chat` on the converted SmolLM2 give
mlx_lm's text byte for byte (sampler chain, PRNG position after model construction, chat template,
streaming detokenizer), and chat's screen matches mlx_lm chat's with timings masked."""
import os
import re
import subprocess

import pytest
from conftest import BIN, PY, run_mlxrt, run_python

PROMPT = "Tell me a short story about a cat."


@pytest.mark.parametrize("flags", [
    ["--temp", "0.8", "--top-p", "0.9", "--seed", "4"],
    # (each of these samplers is proven on the tiny models in make test: tests/generate/test_sampling_parity.py)
    pytest.param(["--temp", "1.0", "--min-p", "0.05", "--top-k", "40", "--xtc-probability", "0.5", "--seed", "9"],
                 marks=pytest.mark.long),
])
def test_sampled_text_equals_mlx_lm(smollm2, flags):
    args = ["--model", smollm2, "--prompt", PROMPT, "--max-tokens", 32, *flags]
    want = run_python("-m", "mlx_lm", "generate", *args).stdout.split("==========\n")[1]
    got = run_mlxrt("generate", *args).stdout.split("==========\n")[1]
    assert got == want
    assert len(re.findall(r"[A-Za-z]+", got)) >= 10, got


def test_chat_session_equals_mlx_lm(smollm2):
    args = ["--model", str(smollm2), "--max-tokens", "16", "--temp", "0.7", "--seed", "1"]
    stdin = "What is a cat?\nAnd a dog?\nq\n"
    env = {**os.environ, "COLUMNS": "100", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    mask = re.compile(r"[0-9.]+ tok/s|peak [0-9.]+ GB")
    outs = []
    for cmd in ([PY, "-m", "mlx_lm", "chat"], [BIN, "chat"]):
        proc = subprocess.run([*cmd, *args], input=stdin, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        outs.append(mask.sub("#", proc.stdout))
    assert outs[1] == outs[0]
