"""Bad `mlxrt generate` input: a clear one-line error naming the flag, exit status non-zero, nothing
generated."""
import pytest
from conftest import run_mlxrt

CASES = [
    (["--temp", "-0.5"], "--temp"),
    (["--top-p", "1.5"], "--top-p"),
    (["--top-p", "-0.1"], "--top-p"),
    (["--top-k", "-1"], "--top-k"),
    (["--min-p", "2"], "--min-p"),
    (["--min-tokens-to-keep", "0"], "--min-tokens-to-keep"),
    (["--xtc-threshold", "0.7"], "--xtc-threshold"),
    (["--xtc-probability", "1.5"], "--xtc-probability"),
    (["--repetition-penalty", "-1"], "--repetition-penalty"),
    (["--repetition-context-size", "0"], "--repetition-context-size"),
    (["--logit-bias", "{bad json"], "--logit-bias"),
    (["--logit-bias", "[1, 2]"], "--logit-bias"),
    (["--logit-bias", '{"x": 1}'], "--logit-bias"),
    (["--logit-bias", '{"5": "high"}'], "--logit-bias"),
    (["--logit-bias", '{"999999": 1.0}'], "--logit-bias"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--prefill-step-size", "0"], "--prefill-step-size"),
    (["--kv-bits", "7"], "--kv-bits"),
    (["--adapter-path", "adapters"], "--adapter-path"),
    (["--draft-model", "other"], "--draft-model"),
    (["--quantize-activations"], "--quantize-activations"),
    (["--no-such-flag", "1"], "--no-such-flag"),
]


@pytest.mark.parametrize("args,flag", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_flag_is_named(tiny_model, args, flag):
    proc = run_mlxrt("generate", "--model", tiny_model, "--prompt-tokens", "1,2,3", "-m", 4, *args, check=False)
    assert proc.returncode != 0
    assert flag in proc.stderr, proc.stderr
    assert "==========" not in proc.stdout


def test_unknown_extra_eos_token(chat_model):
    proc = run_mlxrt("generate", "--model", chat_model, "--prompt", "hi", "-m", 4, "--extra-eos-token",
                     "<|no such token|>", check=False)
    assert proc.returncode == 1
    assert "--extra-eos-token" in proc.stderr and "<|no such token|>" in proc.stderr


def test_bad_template_config(chat_model):
    proc = run_mlxrt("generate", "--model", chat_model, "--prompt", "hi", "--chat-template-config", "[1]", check=False)
    assert proc.returncode == 1
    assert "--chat-template-config" in proc.stderr
