"""`mlxrt generate` on a tiny random Gemma 4 (sliding and global layers, KV sharing, per-layer
inputs) with a real Gemma tokenizer and chat template (Gemma 3's: Gemma 4 keeps its 262144-token
vocabulary), against `mlx_lm generate` itself: the streamed text and the footer's counts are equal,
greedy and sampled with a seed (the seed's position after gemma4's construction draws)."""
import pytest
from conftest import _chat_fixture, mlx_lm_main, run_mlxrt
from test_generate_text import FOOTER, split_output


@pytest.fixture(scope="module")
def gemma4_chat_model():
    import make_fixtures

    config = {**make_fixtures.GEMMA4, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 16, "global_head_dim": 32, "num_hidden_layers": 4,
              "num_kv_shared_layers": 1, "hidden_size_per_layer_input": 8, "vocab_size": 262144,
              "vocab_size_per_layer_input": 262144, "bos_token_id": 2, "eos_token_id": [1, 106]}
    return _chat_fixture("gemma4_gemma3_tokenizer", "gemma3", config)


CASES = {
    "greedy_system_prompt": ["--prompt", "Write a haiku about the sea.", "--system-prompt", "You are terse."],
    "sampled": ["--prompt", "Tell me a story.", "--temp", "0.8", "--top-p", "0.9", "--seed", "5"],
    # 40 prompt tokens and more: the sliding layers' rotating caches wrap (window 6) while prefilling in chunks
    "chunked_prefill": ["--prompt", "Count the waves: " + " ".join(["one two three"] * 12), "--prefill-step-size", "7"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_text_equals_mlx_lm(gemma4_chat_model, case):
    args = ["--model", gemma4_chat_model, "--max-tokens", 32, *CASES[case]]
    want_body, want_footer = split_output(mlx_lm_main("generate", *args).stdout)
    got_body, got_footer = split_output(run_mlxrt("generate", *args).stdout)
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()
