"""`mlxrt generate` with a text prompt against `mlx_lm generate` itself, on a tiny random llama with
a real tokenizer and chat template (Qwen3's): the streamed text is byte-equal, the footer has the
same shape and counts. Greedy, and sampled with a seed (which checks where the PRNG stands after
model construction)."""
import re

import pytest
from conftest import mlx_lm_main, run_mlxrt

FOOTER = re.compile(r"Prompt: (\d+) tokens, [0-9.]+ tokens-per-sec\n"
                    r"Generation: (\d+) tokens, [0-9.]+ tokens-per-sec\n"
                    r"Peak memory: [0-9.]+ GB\n$")


def split_output(stdout):
    assert stdout.startswith("==========\n"), stdout[:200]
    body, sep, footer = stdout[len("==========\n"):].rpartition("\n==========\n")
    assert sep, stdout
    return body, footer


CASES = {
    "system_prompt": ["--prompt", "Write a haiku about the sea.", "--system-prompt", "You are terse."],
    "raw_escapes": ["--prompt", "Once upon a time\\nline two\\tend", "--ignore-chat-template"],
    "prefill_response": ["--prompt", "Name a color.", "--prefill-response", "The color is"],
    "template_config": ["--prompt", "hi", "--chat-template-config", '{"enable_thinking": false}'],
    "sampled_xtc": ["--prompt", "Tell me a story.", "--temp", "0.9", "--top-p", "0.95", "--xtc-probability", "0.7",
                    "--xtc-threshold", "0.01", "--seed", "11"],
    "kv_cache_flags": ["--prompt", "Tell me about caches.", "--max-kv-size", "24", "--temp", "0.7", "--seed", "2"],
    "extra_eos": ["--prompt", "Say something.", "--extra-eos-token", "<|endoftext|>", "the"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_text_equals_mlx_lm(chat_model, case):
    args = ["--model", chat_model, "--max-tokens", 32, *CASES[case]]
    want = mlx_lm_main("generate", *args).stdout
    got = run_mlxrt("generate", *args).stdout
    want_body, want_footer = split_output(want)
    got_body, got_footer = split_output(got)
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()


def test_prompt_from_stdin(chat_model):
    args = ["--model", chat_model, "--max-tokens", 20, "--prompt", "-"]
    text = "A prompt read from standard input.\nSecond line."
    assert split_output(run_mlxrt("generate", *args, input=text).stdout)[0] == \
        split_output(mlx_lm_main("generate", *args, input=text).stdout)[0]


def test_not_verbose_prints_only_the_text(chat_model):
    args = ["--model", chat_model, "--max-tokens", 12, "--prompt", "hi", "--verbose", "F"]
    assert run_mlxrt("generate", *args).stdout == mlx_lm_main("generate", *args).stdout


def test_prompt_cache_file_from_mlx_lm(chat_model, tmp_path):
    """A cache saved by mlx_lm cache_prompt; the prompt is the chat-rendered suffix after it."""
    cache = tmp_path / "prompt.safetensors"
    mlx_lm_main("cache_prompt", "--model", chat_model, "--prompt-cache-file", cache,
               "--prompt", "You are a helpful assistant. Remember: the sky is green.")
    args = ["--model", chat_model, "--prompt-cache-file", cache, "--prompt", "What color is the sky?", "-m", 16]
    want_body, want_footer = split_output(mlx_lm_main("generate", *args).stdout)
    got_body, got_footer = split_output(run_mlxrt("generate", *args).stdout)
    assert got_body == want_body
    assert FOOTER.match(got_footer).groups() == FOOTER.match(want_footer).groups()
