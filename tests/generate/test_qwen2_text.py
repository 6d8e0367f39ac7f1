"""`mlxrt generate` on a tiny random qwen2 with Qwen2.5's real tokenizer (vocab.json + merges.txt)
and chat template, against `mlx_lm generate` itself: the streamed text and the footer's counts are
equal, greedy and sampled with a seed (the seed's position after qwen2's construction draws)."""
import pytest
from conftest import _chat_fixture, mlx_lm_main, run_mlxrt
from test_generate_text import FOOTER, split_output


@pytest.fixture(scope="module")
def qwen2_chat_model():
    import make_fixtures

    config = {**make_fixtures.QWEN2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 151936, "bos_token_id": None, "eos_token_id": 151645}
    return _chat_fixture("qwen2_qwen25_tokenizer", "qwen2.5", config)


CASES = {
    "greedy_system_prompt": ["--prompt", "Write a haiku about the sea.", "--system-prompt", "You are terse."],
    "sampled": ["--prompt", "Tell me a story.", "--temp", "0.8", "--top-p", "0.9", "--seed", "5"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_text_equals_mlx_lm(qwen2_chat_model, case):
    args = ["--model", qwen2_chat_model, "--max-tokens", 32, *CASES[case]]
    want_body, want_footer = split_output(mlx_lm_main("generate", *args).stdout)
    got_body, got_footer = split_output(run_mlxrt("generate", *args).stdout)
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()
