"""L1 on the default model: the converted SmolLM2-135M-Instruct gives `mlxrt logits` byte-equal to
mlx-lm's (one forward, and one token at a time through the KV cache), and `mlxrt generate` streams
the same greedy 128-token text as `mlx_lm generate` for chat prompts (template applied)."""
import re

import mlx.core as mx
import pytest

import oracle
from conftest import run_mlxrt, run_python

FOOTER = re.compile(r"Prompt: (\d+) tokens, [0-9.]+ tokens-per-sec\n"
                    r"Generation: (\d+) tokens, [0-9.]+ tokens-per-sec\n"
                    r"Peak memory: [0-9.]+ GB\n$")

# The longer answers run in `make test-long`.
PROMPTS = [
    "What is the capital of France?",
    pytest.param("Write a short poem about the sea.", marks=pytest.mark.long),
    pytest.param("List three uses of a paperclip, one per line.", marks=pytest.mark.long),
]


def test_logits_byte_equal(smollm2, tmp_path):
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    tokens = load_tokenizer(smollm2).encode("The converted model reads: 12 apples, naïve café, and 3.14 \u2014 ok?")
    assert len(tokens) > 12
    model, _ = oracle.load(smollm2)
    for mode, ref in (("full", oracle.full_logits(model, tokens)),
                      ("incremental", oracle.incremental_logits(model, tokens))):
        out = tmp_path / f"{mode}.safetensors"
        run_mlxrt("logits", "--model", smollm2, "--tokens", ",".join(map(str, tokens)), "--out", out,
                  *(["--incremental"] if mode == "incremental" else []))
        ours = mx.load(str(out))["logits"]
        assert ours.dtype == ref.dtype == mx.float32 and ours.shape == ref.shape, (mode, ours.dtype, ours.shape)
        assert oracle.raw_bytes(ours) == oracle.raw_bytes(ref), f"{mode}: logits differ"


def split_output(stdout):
    assert stdout.startswith("==========\n"), stdout[:200]
    body, sep, footer = stdout[len("==========\n"):].rpartition("\n==========\n")
    assert sep, stdout
    return body, footer


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_text_equals_mlx_lm(smollm2, prompt):
    args = ["--model", smollm2, "--max-tokens", 128, "--prompt", prompt]
    want = run_python("-m", "mlx_lm", "generate", *args).stdout
    got = run_mlxrt("generate", *args).stdout
    want_body, want_footer = split_output(want)
    got_body, got_footer = split_output(got)
    print(f"{prompt!r} -> {got_body!r}")
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()
    assert len(re.findall(r"[A-Za-z]+", got_body)) >= 5, got_body  # real text, not noise
