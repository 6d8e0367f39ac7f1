"""`generate --warm-up` (issue 14): one prompt per 256-token bucket before the prompt, where MLX's
prefill attention is padded (its CUDA backend with cuDNN's attention); elsewhere (this CPU) it says
on stderr that it skipped. Either way the answer's logprobs are the bytes of a run without it."""
import os
from pathlib import Path

from conftest import run_mlxrt


def cuda_device():
    try:
        import mlx.core as mx
        return mx.cuda.is_available()
    except (ImportError, AttributeError):
        return False


def run(model, out, *flags, env=None):
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        return run_mlxrt("generate", "--model", model, "--prompt-tokens", "1,2,3,4,5,6,7", "-m", 6,
                         "--prefill-step-size", 300, "--logprobs-file", out, *flags)
    finally:
        os.environ.clear()
        os.environ.update(old)


def warm_up_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("warm-up: ")]


def test_warm_up_reports_and_keeps_the_bytes(tiny_model, tmp_path):
    plain = run(tiny_model, tmp_path / "plain.safetensors")
    warm = run(tiny_model, tmp_path / "warm.safetensors", "--warm-up")
    assert warm_up_lines(plain) == []
    lines = warm_up_lines(warm)
    assert len(lines) == 1, warm.stderr
    if cuda_device():
        # Buckets 256 and 512 (the step, 300, rounded up) and one more: 768.
        assert lines[0].startswith("warm-up: 3 prompts of 256..768 tokens in "), lines[0]
    else:
        assert lines[0].startswith("warm-up: skipped: the prefill attention is not padded here"), lines[0]
    assert Path(tmp_path / "plain.safetensors").read_bytes() == Path(tmp_path / "warm.safetensors").read_bytes()


def test_warm_up_skips_when_padding_is_off(tiny_model, tmp_path):
    proc = run(tiny_model, tmp_path / "off.safetensors", "--warm-up", env={"MLXRT_PAD_PREFILL_ATTENTION": "0"})
    assert warm_up_lines(proc) == ["warm-up: skipped: the prefill attention is not padded here "
                                   "(it is on MLX's CUDA backend with cuDNN's attention)"]
