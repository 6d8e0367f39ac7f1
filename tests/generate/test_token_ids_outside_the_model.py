"""A tokenizer with ids the model's embedding table lacks: the prompt is refused naming the id,
instead of MLX's unchecked gather reading past the table (and the run exiting 0)."""
import json
import shutil

import mlx.core as mx

from conftest import run_mlxrt


def test_prompt_ids_past_the_embedding_table_are_refused(chat_model, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(chat_model, d)
    rows = 256  # Qwen3's tokenizer has ~151k ids: most words land past this table
    weights = mx.load(str(d / "model.safetensors"))
    weights["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"][:rows]
    mx.save_safetensors(str(d / "model.safetensors"), weights)
    (d / "model.safetensors.index.json").unlink(missing_ok=True)
    config = json.loads((d / "config.json").read_text())
    config["vocab_size"] = rows
    config["eos_token_id"] = 0
    (d / "config.json").write_text(json.dumps(config))
    proc = run_mlxrt("generate", "--model", d, "--prompt", "hello there", "--max-tokens", "2",
                     "--ignore-chat-template", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: token id "), proc.stderr
    assert "outside the model's embedding table of 256 rows" in proc.stderr
