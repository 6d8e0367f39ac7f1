"""`mlxrt chat` as two ring ranks (`mlxrt launch`) against `mlx_lm chat` as two ring ranks (started
as mlx.launch starts them, stdin copied to every rank, only rank 0 printing): the whole screen
byte-equal (timings masked), greedy and sampled; and mlx.launch starting mlxrt's ranks giving the
same screen. Tensor parallel and pipeline."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, PY
from ring_ports import free_port, free_port_pair

NUMBERS = re.compile(r"[0-9.]+ tok/s|peak [0-9.]+ GB")
MLX_LAUNCH = str(Path(PY).parent / "mlx.launch")
STDIN = "hello\nand a second turn\nq\n"


ENV = {**os.environ, "COLUMNS": "100", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def screen(cmd):
    proc = subprocess.run(cmd, input=STDIN, capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return NUMBERS.sub("#", proc.stdout)


def launched(*cmd):
    return [MLX_LAUNCH, "--backend", "ring", "-n", "2", "-p", str(free_port_pair()), "--", *cmd]


def ranks_screen(cmd, tmp_path):
    """`cmd` as two ring ranks started by hand with the environment mlx.launch gives each (MLX_RANK,
    MLX_HOSTFILE) and the whole of stdin, as mlx.launch copies it: what they print, rank 0's then
    rank 1's. (mlx.launch's relay of the output polls without a pause: a core busy beside the two
    ranks, twice the time of mlx-lm's run.)"""
    ports = [free_port(), free_port()]
    while ports[0] == ports[1]:
        ports[1] = free_port()
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{p}"] for p in ports]) + "\n")
    (tmp_path / "stdin").write_text(STDIN)
    procs = []
    for rank in range(2):
        with open(tmp_path / "stdin") as stdin:
            procs.append(subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env={**ENV, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)}))
    try:
        outs = []
        for p in procs:
            outs.append(p.communicate(timeout=300))
            assert p.returncode == 0, outs[-1][1]
    finally:  # a rank that failed leaves the other waiting for it
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return NUMBERS.sub("#", "".join(out for out, _ in outs))


@pytest.mark.parametrize("extra", [[], ["--temp", "0.8", "--seed", "5"]])
def test_tensor_parallel_chat_equals_mlx_lm(chat_model, extra, tmp_path):
    # Sampled, the same tokens also need the PRNG where mlx-lm's sharded_load leaves it (two model
    # constructions and a draw per sharded linear before the first sample).
    args = ["--model", str(chat_model), "--max-tokens", "12", *extra]
    want = ranks_screen([PY, "-m", "mlx_lm", "chat", *args], tmp_path)
    assert screen([BIN, "launch", "-n", "2", "--", "chat", *args]) == want
    if not extra:  # the same screen when MLX's own launcher starts the ranks
        assert screen(launched(BIN, "chat", *args)) == want
    assert want.count("12 tokens") == 2  # one screen: rank 1 prints nothing


def test_pipeline_chat_is_refused_for_a_family_without_pipelining(chat_model):
    # The chat model is a llama: mlx-lm's llama.py is no PipelineMixin, so --pipeline stops at load.
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([BIN, "launch", "-n", "2", "--", "chat", "--model", str(chat_model), "--pipeline"],
                          input="q\n", capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0 and "does not support pipelining" in proc.stderr, proc.stderr


def test_generate_reads_the_prompt_from_stdin_on_every_rank(chat_model):
    # Every rank gets the whole of stdin and its end (no rank holds another's input open). mlx.launch
    # copies the bytes but never closes the ranks' stdin, so there `--prompt -` would wait forever.
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    args = ["generate", "--model", str(chat_model), "--max-tokens", "4"]
    piped = subprocess.run([BIN, "launch", "-n", "2", "--", *args, "--prompt", "-"], input="a prompt from stdin",
                           capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 0, piped.stderr
    given = subprocess.run([BIN, "launch", "-n", "2", "--", *args, "--prompt", "a prompt from stdin"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert given.returncode == 0, given.stderr
    text = lambda out: out.split("==========\n")[1]  # noqa: E731
    assert piped.stdout.count("==========") == 2 and text(piped.stdout) == text(given.stdout)
