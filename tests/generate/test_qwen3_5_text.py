"""`mlxrt generate` on a tiny random qwen3_5 (gated delta nets and full attention) with Qwen3.5's
real chat template, against `mlx_lm generate` itself: the streamed text and the footer's counts are
equal with thinking on and off, greedy and sampled with a seed. Qwen3.5's own tokenizer files are not
among the project's data; Qwen3's byte-level BPE (the family's tokenizer before 3.5) stands in."""
import json

import pytest
from conftest import SHARED, _chat_fixture, mlx_lm_main, run_mlxrt
from test_generate_text import FOOTER, split_output


@pytest.fixture(scope="module")
def qwen3_5_chat_model():
    import make_fixtures

    config = {**make_fixtures.QWEN3_5_TEXT, "model_type": "qwen3_5", "hidden_size": 64, "intermediate_size": 128,
              "vocab_size": 151936, "bos_token_id": None, "eos_token_id": 151645}
    out = _chat_fixture("qwen3_5_qwen3_tokenizer", "qwen3", config)
    template = (SHARED / "data" / "chat-templates" / "Qwen3.5-4B.jinja").read_text()
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    if tokenizer_config.get("chat_template") != template:
        tokenizer_config["chat_template"] = template
        (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return out


CASES = {
    "thinking_greedy": ["--prompt", "Why is the sky blue?", "--system-prompt", "Be brief."],
    "no_thinking_greedy": ["--prompt", "Name three rivers.", "--chat-template-config", '{"enable_thinking": false}'],
    "thinking_sampled": ["--prompt", "Tell me a story.", "--temp", "0.8", "--top-p", "0.9", "--seed", "5"],
    "no_thinking_sampled": ["--prompt", "Count to five.", "--temp", "1.0", "--top-k", "40", "--seed", "9",
                            "--chat-template-config", '{"enable_thinking": false}'],
}


@pytest.mark.parametrize("case", list(CASES))
def test_text_equals_mlx_lm(qwen3_5_chat_model, case):
    args = ["--model", qwen3_5_chat_model, "--max-tokens", 40, *CASES[case]]
    want_body, want_footer = split_output(mlx_lm_main("generate", *args).stdout)
    got_body, got_footer = split_output(run_mlxrt("generate", *args).stdout)
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()


def test_thinking_switch_changes_the_prompt(qwen3_5_chat_model):
    """The template's enable_thinking reaches the prompt: the two renderings differ in length."""
    counts = []
    for extra in ([], ["--chat-template-config", '{"enable_thinking": false}']):
        _, footer = split_output(run_mlxrt("generate", "--model", qwen3_5_chat_model, "--max-tokens", 1,
                                           "--prompt", "hi", *extra).stdout)
        counts.append(FOOTER.match(footer).group(1))
    assert counts[0] != counts[1]
