"""`mlxrt generate / chat / benchmark --adapter-path` against `mlx_lm generate --adapter-path` itself, on
the tiny llama with Qwen3's tokenizer and an adapter trained on it for a few steps by mlx_lm.lora's
train_model: the streamed text is byte-equal, greedy and seeded (the seed's position after the
model's and the LoRA layers' construction draws)."""
import json

import pytest
from conftest import FIXTURES, fixture_lock, mlx_lm_main, run_mlxrt


@pytest.fixture(scope="module")
def chat_adapter(chat_model):
    import make_fixtures
    from mlx_lm.utils import load_model

    spec = {"type": "lora", "num_layers": 2, "seed": 5, "keys": ["self_attn.q_proj", "self_attn.v_proj",
                                                                 "mlp.down_proj"]}
    out = FIXTURES / "llama_qwen3_tokenizer_adapter"
    stamp = out / "adapter-fixture.json"
    with fixture_lock():
        if not (stamp.exists() and stamp.read_text() == json.dumps(spec, sort_keys=True)):
            model, config = load_model(chat_model)
            make_fixtures.train_adapter(model, config, out, spec)
            stamp.write_text(json.dumps(spec, sort_keys=True))
    return out


def body(stdout):
    assert stdout.startswith("==========\n"), stdout[:200]
    return stdout[len("==========\n"):].rpartition("\n==========\n")[0]


@pytest.mark.parametrize("flags", [["--prompt", "Write a haiku about the sea."],
                                   ["--prompt", "Tell me a story.", "--temp", "0.9", "--seed", "7"]])
def test_generate_text_equal_with_adapter(chat_model, chat_adapter, flags):
    args = ["--model", chat_model, "--adapter-path", chat_adapter, "--max-tokens", "24", *flags]
    want = body(mlx_lm_main("generate", *args).stdout)
    got = body(run_mlxrt("generate", *args).stdout)
    assert got == want
    base = body(run_mlxrt("generate", "--model", chat_model, "--max-tokens", "24", *flags).stdout)
    assert base != got  # the adapter changes the text


def test_chat_and_benchmark_take_an_adapter(chat_model, chat_adapter):
    chat = run_mlxrt("chat", "--model", chat_model, "--adapter-path", chat_adapter, "--max-tokens", "8",
                     input="hello\nq\n")
    assert chat.returncode == 0
    bench = run_mlxrt("benchmark", "--model", chat_model, "--adapter-path", chat_adapter, "-p", "16", "-g", "4",
                      "-n", "1")
    assert "Timing with prompt_tokens=16, generation_tokens=4, batch_size=1." in bench.stdout, bench.stdout


def test_chat_refuses_a_bad_adapter(chat_model, tmp_path):
    proc = run_mlxrt("chat", "--model", chat_model, "--adapter-path", tmp_path, check=False)
    assert proc.returncode != 0 and "adapter_config.json" in proc.stderr, proc.stderr
