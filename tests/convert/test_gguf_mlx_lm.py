"""The converted SmolLM2 checkpoint is a standard MLX model directory: mlx-lm loads it (strict
weight matching) and its greedy answer to a chat prompt is sensible English."""

import json
import shutil
import re

import pytest
from gguf import GGUFReader

from gguf_support import convert, smollm2_gguf


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = convert(smollm2_gguf(), tmp_path_factory.mktemp("smollm2") / "model")
    yield out
    shutil.rmtree(out)  # 115 MB


def test_config_comes_from_the_gguf_metadata(converted):
    config = json.loads((converted / "config.json").read_text())
    fields = GGUFReader(str(smollm2_gguf())).fields
    meta = lambda key: fields[key].contents()  # noqa: E731
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == meta("llama.embedding_length") == 576
    assert config["num_hidden_layers"] == meta("llama.block_count")
    assert config["intermediate_size"] == meta("llama.feed_forward_length")
    assert config["num_attention_heads"] == meta("llama.attention.head_count")
    assert config["num_key_value_heads"] == meta("llama.attention.head_count_kv")
    assert config["max_position_embeddings"] == meta("llama.context_length")
    assert config["vocab_size"] == len(fields["tokenizer.ggml.tokens"].data) == 49152
    assert config["rope_theta"] == meta("llama.rope.freq_base")
    # stored as float32 in the GGUF; written as the shortest decimal that reads back the same
    assert config["rms_norm_eps"] == 1e-05
    assert config["tie_word_embeddings"] is True  # the file has no output.weight
    assert config["bos_token_id"] == 1 and config["eos_token_id"] == 2
    generation = json.loads((converted / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2


def test_mlx_lm_loads_and_answers_a_chat_prompt(converted):
    from mlx_lm import generate, load

    model, tokenizer = load(str(converted))
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    text = generate(model, tokenizer, prompt, max_tokens=40)
    print(f"mlx-lm greedy answer: {text!r}")
    words = re.findall(r"[A-Za-z]+", text)
    assert len(words) >= 3, text
    assert sum(ch.isascii() for ch in text) >= 0.9 * len(text), text
    assert "Paris" in text, text
