"""`mlxrt chat` against `mlx_lm chat`: the whole screen byte-equal with stdin from a pipe (timings
masked), across turns sharing one KV cache, a reset and help; and driven through a real terminal
under tmux (send-keys / capture-pane)."""
import os
import re
import subprocess
import time
import uuid

import pytest
from conftest import BIN, PY

NUMBERS = re.compile(r"[0-9.]+ tok/s|peak [0-9.]+ GB")


def chat(cmd, stdin, columns):
    env = {**os.environ, "COLUMNS": str(columns), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return NUMBERS.sub("#", proc.stdout)


@pytest.mark.parametrize("columns,extra", [
    (100, []),
    (80, ["--system-prompt", "You are a pirate who answers in rhymes, always, no matter what the question is.",
          "--temp", "0.8", "--top-p", "0.9", "--seed", "5"]),
])
def test_piped_session_equals_mlx_lm(chat_model, columns, extra):
    args = ["--model", str(chat_model), "--max-tokens", "12", *extra]
    stdin = "hello\nand a second turn\nr\nh\nafter the reset\nq\n"
    want = chat([PY, "-m", "mlx_lm", "chat", *args], stdin, columns)
    got = chat([BIN, "chat", *args], stdin, columns)
    assert got == want
    assert "context cleared" in got and "bye" in got


def _pane(socket, target):
    return subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", target], capture_output=True,
                          text=True).stdout


def _wait_for(socket, target, pattern, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        screen = _pane(socket, target)
        if re.search(pattern, screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} never appeared:\n{_pane(socket, target)}")


def test_in_a_terminal(chat_model):
    # The reply the model gives to "hello" at temp 0, from mlx_lm's own (piped) run.
    piped = chat([PY, "-m", "mlx_lm", "chat", "--model", str(chat_model), "--max-tokens", "8"], "hello\nq\n", 100)
    reply = re.sub(r"\x1b\[[0-9;]*[A-Za-z]|[\x01\x02]", "", piped).split("› \n", 1)[1].split("\n", 1)[0]
    socket = f"mlxrt-chat-{uuid.uuid4().hex[:8]}"
    target = "chat"
    subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-s", target, "-x", "100", "-y", "40",
                    BIN, "chat", "--model", str(chat_model), "--max-tokens", "8"], check=True)
    # Keep the pane once chat exits: "bye" is its last line, and a loaded machine may poll after the exit.
    subprocess.run(["tmux", "-L", socket, "set-window-option", "-t", target, "remain-on-exit", "on"], check=True)
    try:
        _wait_for(socket, target, r"commands\s+q exit\s+r reset\s+h help")
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", target, "hello", "Enter"], check=True)
        screen = _wait_for(socket, target, r"8 tokens · .* tok/s · prompt .* tok/s · peak").splitlines()
        at = next(i for i, line in enumerate(screen) if line.startswith("› hello"))
        # Under the input line: the corridor's bottom rule, then the streamed reply (tabs expanded).
        assert screen[at + 1].startswith("───")
        assert reply.split() and screen[at + 2].split() == reply.split()
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", target, "r", "Enter"], check=True)
        _wait_for(socket, target, r"reset context cleared")
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", target, "q", "Enter"], check=True)
        _wait_for(socket, target, r"bye")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
