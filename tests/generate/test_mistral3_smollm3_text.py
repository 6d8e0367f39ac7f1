"""`mlxrt generate` on tiny random Mistral 3 (mistral3: the text model under language_model.) and
SmolLM3 (llama with NoPE layers) models with their real chat templates, against `mlx_lm generate`
itself: the streamed text and the footer's counts are equal, greedy and sampled with a seed.

Their own tokenizer files are not among the project's data, so stand-ins with the same kind of
vocabulary serve: Phi-3-mini's (Llama 2's SentencePiece-style BPE, the kind Mistral's tokenizers were
before Tekken; the template's [SYSTEM_PROMPT] / [INST] markers are then plain text, tokenized alike on
both sides) for Mistral 3, and Qwen3's byte-level BPE for SmolLM3, whose ChatML template needs the
<|im_start|>, <|im_end|> and <think> tokens that Qwen3's tokenizer has."""
import json

import pytest
from conftest import SHARED, _chat_fixture, mlx_lm_main, run_mlxrt
from test_generate_text import FOOTER, split_output


def with_template(out, name):
    template = (SHARED / "data" / "chat-templates" / name).read_text()
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    if tokenizer_config.get("chat_template") != template:
        tokenizer_config["chat_template"] = template
        (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return out


@pytest.fixture(scope="module")
def mistral3_chat_model():
    import make_fixtures

    text = {**make_fixtures.MISTRAL3["text_config"], "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 32064}
    config = {**make_fixtures.MISTRAL3, "vocab_size": 32064, "text_config": text}
    return with_template(_chat_fixture("mistral3_phi3_tokenizer", "phi-3-mini", config),
                         "Mistral-Small-3.2-24B-Instruct-2506.jinja")


@pytest.fixture(scope="module")
def smollm3_chat_model():
    import make_fixtures

    config = {**make_fixtures.SMOLLM3, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 151936,
              "bos_token_id": None, "eos_token_id": 151645}
    return with_template(_chat_fixture("smollm3_qwen3_tokenizer", "qwen3", config), "HuggingFaceTB-SmolLM3-3B.jinja")


MISTRAL3_CASES = {
    # No system prompt: the template's default one, with today's date (strftime_now).
    "greedy_default_system": ["--prompt", "Why is the sky blue?"],
    "greedy_system_prompt": ["--prompt", "Name three rivers.", "--system-prompt", "Answer in French."],
    "sampled": ["--prompt", "Tell me a story.", "--temp", "0.8", "--top-p", "0.9", "--seed", "5"],
    "sampled_top_k": ["--prompt", "Count to five.", "--temp", "1.0", "--top-k", "40", "--seed", "9",
                      "--system-prompt", "Be brief."],
}

SMOLLM3_CASES = {
    "thinking_greedy": ["--prompt", "Why is the sky blue?", "--system-prompt", "Be brief."],
    "no_thinking_greedy": ["--prompt", "Name three rivers.", "--chat-template-config", '{"enable_thinking": false}'],
    "thinking_sampled": ["--prompt", "Tell me a story.", "--temp", "0.8", "--top-p", "0.9", "--seed", "5"],
    "no_thinking_sampled": ["--prompt", "Count to five.", "--temp", "1.0", "--top-k", "40", "--seed", "9",
                            "--chat-template-config", '{"enable_thinking": false}'],
}


def same_text(model, extra):
    args = ["--model", model, "--max-tokens", 32, *extra]
    want_body, want_footer = split_output(mlx_lm_main("generate", *args).stdout)
    got_body, got_footer = split_output(run_mlxrt("generate", *args).stdout)
    assert got_body == want_body
    w, g = FOOTER.match(want_footer), FOOTER.match(got_footer)
    assert w and g, got_footer
    assert g.groups() == w.groups()


@pytest.mark.parametrize("case", list(MISTRAL3_CASES))
def test_mistral3_text_equals_mlx_lm(mistral3_chat_model, case):
    same_text(mistral3_chat_model, MISTRAL3_CASES[case])


@pytest.mark.parametrize("case", list(SMOLLM3_CASES))
def test_smollm3_text_equals_mlx_lm(smollm3_chat_model, case):
    same_text(smollm3_chat_model, SMOLLM3_CASES[case])


def test_smollm3_thinking_switch_changes_the_prompt(smollm3_chat_model):
    """SmolLM3's template reads enable_thinking (its /think and /no_think system flags): the two
    renderings differ in length."""
    counts = []
    for extra in ([], ["--chat-template-config", '{"enable_thinking": false}']):
        _, footer = split_output(run_mlxrt("generate", "--model", smollm3_chat_model, "--max-tokens", 1,
                                           "--prompt", "hi", *extra).stdout)
        counts.append(FOOTER.match(footer).group(1))
    assert counts[0] != counts[1]
