"""Distributed runs (tensor and pipeline parallel) on CPU over MLX's ring backend, two local ranks:
mlxrt's logits byte-equal to mlx-lm's sharded model on the same group (tools/sharded_oracle.py, in
two ring ranks that tools/oracle_ranks.py keeps up), greedy tokens equal, and the bad setups stopped
with a clear error, never a hang. Every process runs under a timeout."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import pytest

import oracle
from conftest import BIN
from oracle_ranks import RANKS
from ring_ports import free_port, free_port_pair

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]
TOKEN_TEXT = ",".join(map(str, TOKENS))
TIMEOUT = 120
MLX_LAUNCH = str(Path(sys.executable).parent / "mlx.launch")


def run(cmd, timeout=TIMEOUT, **kw):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, **kw)


def mlx_lm_sharded(path, out, pipeline=False, max_tokens=0):
    """mlx-lm's sharded model on two ring ranks (tools/sharded_oracle.py's main in the ranks
    tools/oracle_ranks.py keeps up between calls); rank 0 writes `out`."""
    RANKS.run("sharded_oracle", "--model", path, "--tokens", TOKEN_TEXT, "--out", out, "--max-tokens", max_tokens,
              *(["--pipeline"] if pipeline else []), timeout=TIMEOUT)
    assert Path(out).exists()
    return mx.load(str(out))


def mlxrt_launch(*args, n=2, check=True):
    proc = run([BIN, "launch", "-n", n, "--", *args])
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def mlxrt_logits(path, out, *flags, launcher="mlxrt"):
    args = ["logits", "--model", path, "--tokens", TOKEN_TEXT, "--out", out, *flags]
    if launcher == "mlxrt":
        mlxrt_launch(*args)
    else:  # mlx.launch starts the executable itself, with the environment it gives every rank
        proc = run([MLX_LAUNCH, "--backend", "ring", "-n", "2", "-p", free_port_pair(), "--", BIN, *args])
        assert proc.returncode == 0, proc.stderr
    return mx.load(str(out))["logits"]


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and oracle.raw_bytes(a) == oracle.raw_bytes(b)


# MLX's CPU gather_mm runs float32 only: the mixture of experts is the float32 fixture.
# `make test-long` adds the ones marked long (what the others already prove for another dtype or family).
TENSOR_PARALLEL = ["qwen3_bf16", "qwen3_q4_g64", pytest.param("qwen3_fp16_untied", marks=pytest.mark.long),
                   "llama_bias", pytest.param("llama_bf16", marks=pytest.mark.long),
                   pytest.param("llama_q4_g64", marks=pytest.mark.long), pytest.param("qwen2_bf16", marks=pytest.mark.long),
                   "qwen3_moe_fp32"]
PIPELINE = ["qwen3_moe_fp32", pytest.param("qwen2_bf16", marks=pytest.mark.long)]


@pytest.mark.parametrize("name", TENSOR_PARALLEL)
def test_tensor_parallel_logits_byte_equal_to_mlx_lm(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    ref = mlx_lm_sharded(path, tmp_path / "ref.safetensors")["logits"]
    ours = mlxrt_logits(path, tmp_path / "ours.safetensors")
    assert same_bytes(ours, ref), f"{name}: tensor-parallel logits differ from mlx-lm's sharded model"


@pytest.mark.parametrize("name", PIPELINE)
def test_pipeline_logits_byte_equal_to_mlx_lm_and_to_one_process(name, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    ref = mlx_lm_sharded(path, tmp_path / "ref.safetensors", pipeline=True)["logits"]
    ours = mlxrt_logits(path, tmp_path / "ours.safetensors", "--pipeline")
    assert same_bytes(ours, ref), f"{name}: pipeline logits differ from mlx-lm's pipelined model"
    # A pipeline moves whole layers between processes and copies the hidden state bytes: the
    # arithmetic is the unsharded model's, so the logits are too.
    single = run([BIN, "logits", "--model", path, "--tokens", TOKEN_TEXT, "--out", tmp_path / "one.safetensors"])
    assert single.returncode == 0, single.stderr
    assert same_bytes(ours, mx.load(str(tmp_path / "one.safetensors"))["logits"])


def test_mlx_launch_runs_mlxrt(fixtures_dir, tmp_path):
    """mlx.launch starts mlxrt as it starts a Python script: the same ranks, the same logits."""
    path = fixtures_dir / "qwen3_bf16"
    ours = mlxrt_logits(path, tmp_path / "a.safetensors", launcher="mlx.launch")
    again = mlxrt_logits(path, tmp_path / "b.safetensors")
    assert same_bytes(ours, again)


def test_tensor_parallel_is_not_the_unsharded_arithmetic(fixtures_dir, tmp_path):
    """Tensor parallel splits the inner products of o_proj and down_proj across ranks and adds the
    halves with all_sum: (a1 + a2) + ... summed in another order than one matmul over all of K, so
    the logits are not byte-equal to one process's (mlx-lm's sharded model differs the same way; the
    test above holds mlxrt to it). Greedy tokens of these fixtures still agree."""
    path = fixtures_dir / "qwen3_fp32"
    sharded = mlxrt_logits(path, tmp_path / "tp.safetensors")
    single = run([BIN, "logits", "--model", path, "--tokens", TOKEN_TEXT, "--out", tmp_path / "one.safetensors"])
    assert single.returncode == 0, single.stderr
    one = mx.load(str(tmp_path / "one.safetensors"))["logits"]
    assert not same_bytes(sharded, one)
    assert mx.array_equal(mx.argmax(sharded, axis=-1), mx.argmax(one, axis=-1)).item()


def parse_generated(stdout):
    body = stdout.split("==========\n")[1].strip()
    return [int(t) for t in body.split()] if body and not body.startswith("No text") else []


@pytest.mark.parametrize("name,pipeline", [("qwen3_bf16", False), pytest.param("llama_bf16", False, marks=pytest.mark.long),
                                           ("qwen3_moe_fp32", True)])
def test_greedy_tokens_equal_mlx_lm(name, pipeline, fixtures_dir, tmp_path):
    path = fixtures_dir / name
    ref = mlx_lm_sharded(path, tmp_path / "ref.safetensors", pipeline=pipeline, max_tokens=10)["tokens"].tolist()
    proc = mlxrt_launch("generate", "--model", path, "--prompt-tokens", TOKEN_TEXT, "--max-tokens", 10,
                        *(["--pipeline"] if pipeline else []))
    eos = 2
    expected = ref[:ref.index(eos)] if eos in ref else ref
    assert parse_generated(proc.stdout) == expected
    # Only rank 0 prints: one generation in the output.
    assert proc.stdout.count("==========") == 2


def test_heads_not_divisible_is_a_clear_error(fixtures_dir):
    # qwen3_hd128 has one key/value head: two ranks cannot split it.
    proc = mlxrt_launch("logits", "--model", fixtures_dir / "qwen3_hd128", "--tokens", "1,2", "--out", "/dev/null",
                        check=False)
    assert proc.returncode != 0
    assert "'num_key_value_heads' is 1, which does not divide across 2 ranks" in proc.stderr


def test_unsupported_families_are_refused(fixtures_dir):
    proc = mlxrt_launch("logits", "--model", fixtures_dir / "qwen3_bf16", "--tokens", "1,2", "--out", "/dev/null",
                        "--pipeline", check=False)
    assert proc.returncode != 0 and "model_type 'qwen3' does not support pipelining" in proc.stderr
    proc = mlxrt_launch("logits", "--model", fixtures_dir / "gemma2_bf16", "--tokens", "1,2", "--out", "/dev/null",
                        check=False)
    assert proc.returncode != 0 and "model_type 'gemma2' has no tensor-parallel sharding" in proc.stderr


def spawn_ranks(args_of_rank, tmp_path):
    """Two mlxrt ranks started by hand with the ring environment mlx.launch gives (MLX_RANK,
    MLX_HOSTFILE), so that each may get its own arguments."""
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(f'[["127.0.0.1:{free_port()}"], ["127.0.0.1:{free_port()}"]]\n')
    procs = []
    for rank in range(2):
        env = {**os.environ, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)}
        procs.append(subprocess.Popen([BIN, *map(str, args_of_rank(rank))], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def test_mismatched_model_directories_are_a_clear_error(fixtures_dir, tmp_path):
    models = [fixtures_dir / "qwen3_bf16", fixtures_dir / "qwen3_fp32"]
    procs = spawn_ranks(lambda r: ["logits", "--model", models[r], "--tokens", "1,2", "--out", tmp_path / f"{r}.st"],
                        tmp_path)
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode != 0
        assert "the ranks of this distributed run load different models" in err, err


def test_a_rank_that_dies_mid_generation_stops_the_others(fixtures_dir, tmp_path):
    args = ["generate", "--model", fixtures_dir / "qwen3_bf16", "--prompt-tokens", TOKEN_TEXT,
            "--max-tokens", 100000, "--ignore-chat-template"]
    procs = spawn_ranks(lambda r: args, tmp_path)
    # Rank 0 prints the tokens as they come: wait for generation to be under way, then kill rank 1.
    first = procs[0].stdout.readline()  # "=========="
    assert first.startswith("=========="), procs[0].stderr.read() if procs[0].poll() is not None else first
    procs[0].stdout.read(16)
    procs[1].send_signal(signal.SIGKILL)
    started = time.monotonic()
    _, err = procs[0].communicate(timeout=30)
    assert procs[0].returncode != 0
    assert time.monotonic() - started < 15
    assert "peer" in err or "connection" in err, err
    procs[1].wait(timeout=10)


def test_mlxrt_launch_stops_the_run_when_a_rank_dies(fixtures_dir):
    launcher = subprocess.Popen([BIN, "launch", "-n", "2", "--", "generate", "--model", fixtures_dir / "qwen3_bf16",
                                 "--prompt-tokens", TOKEN_TEXT, "--max-tokens", "100000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert launcher.stdout.readline().startswith("==========")  # rank 0 is generating
    children = []
    for task in Path(f"/proc/{launcher.pid}/task").iterdir():
        children += (task / "children").read_text().split()
    assert len(children) == 2
    rank1 = [c for c in children if b"MLX_RANK=1\0" in Path(f"/proc/{c}/environ").read_bytes()]
    os.kill(int(rank1[0]), signal.SIGKILL)
    started = time.monotonic()
    _, err = launcher.communicate(timeout=30)
    assert launcher.returncode != 0 and time.monotonic() - started < 15
    # Rank 0 sees its peer vanish and fails too, within the same moment: the launcher names one of them.
    assert ("mlxrt launch: rank 1 was killed by signal 9; stopping the other ranks" in err
            or "mlxrt launch: rank 0 exited with code 1; stopping the other ranks" in err), err
