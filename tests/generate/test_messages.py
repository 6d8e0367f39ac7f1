"""Messages that say what to do: the too-long-prompt warning mlx-lm prints (transformers', from the
tokenizer, before prefill), unknown verbs, perplexity given a dataset id, and Ctrl-C in chat."""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time

import pytest
from conftest import BIN, PY

WARNING = re.compile(r"\[transformers\] Token indices sequence length is longer than the specified maximum "
                     r"sequence length for this model \((\d+) > (\d+)\)\. Running this sequence through the model "
                     r"will result in indexing errors\n")
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def short_context_model(chat_model, tmp_path_factory):
    """The chat fixture with tokenizer_config.json's model_max_length cut to 12 tokens."""
    out = tmp_path_factory.mktemp("short") / "m"
    shutil.copytree(chat_model, out)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = 12
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def merged(cmd, input=None):
    """stdout and stderr through one pipe, so the order of the warning and the text shows."""
    proc = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=OFFLINE, timeout=300)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_long_prompt_warns_as_mlx_lm_before_prefill(short_context_model):
    args = ["generate", "--model", short_context_model, "--max-tokens", 4, "--prompt",
            "a prompt that is surely longer than twelve tokens once the chat template wraps it"]
    want = merged([PY, "-m", "mlx_lm", *map(str, args)])
    got = merged([BIN, *map(str, args)])
    w, g = WARNING.match(want), WARNING.match(got)
    assert w, want
    assert g, got  # the first line, before the ========== that opens the generated text
    assert g.group(0) == w.group(0)
    assert got[g.end():].startswith("==========\n")


def test_long_prompt_warning_once_per_chat(short_context_model):
    args = ["chat", "--model", short_context_model, "--max-tokens", 3]
    stdin = "the first question, long enough to pass twelve tokens\nand a second long question too\nq\n"
    want = subprocess.run([PY, "-m", "mlx_lm", *map(str, args)], input=stdin, capture_output=True, text=True,
                          env=OFFLINE, timeout=300)
    got = subprocess.run([BIN, *map(str, args)], input=stdin, capture_output=True, text=True, env=OFFLINE,
                         timeout=300)
    assert got.returncode == 0, got.stderr
    assert len(WARNING.findall(want.stderr)) == 1
    assert WARNING.findall(got.stderr) == WARNING.findall(want.stderr)


def test_prompt_within_the_limit_gives_no_warning(chat_model):
    proc = subprocess.run([BIN, "generate", "--model", str(chat_model), "--max-tokens", "2", "--prompt", "hi"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Token indices" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("verb", ["lora", "evaluate", "upload"])
def test_mlx_lm_verbs_not_provided_are_named(verb):
    proc = subprocess.run([BIN, verb, "--model", "x"], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert f"'{verb}' is an mlx-lm command that mlxrt does not provide (run it with mlx-lm: mlx_lm.{verb})" in proc.stderr
    assert "mlxrt commands: batch-generate, benchmark, cache_prompt, chat, convert, " in proc.stderr
    assert "manage" in proc.stderr.split("mlxrt commands:")[1].split("\n")[0]
    not_provided = proc.stderr.split("mlx-lm commands not provided: ")[1].split("\n")[0].split(", ")
    assert verb in not_provided and "generate" not in not_provided and "manage" not in not_provided


def test_unknown_verb_lists_the_verbs():
    proc = subprocess.run([BIN, "genrate", "--model", "x"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unknown command 'genrate'\nmlxrt commands: "), proc.stderr
    assert " generate, " in proc.stderr and "mlxrt COMMAND --help" in proc.stderr
    # A known verb and the global flags still parse as before.
    assert subprocess.run([BIN, "--version"], capture_output=True, text=True).returncode == 0
    assert subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True).returncode == 0


def test_perplexity_with_a_dataset_id_explains_the_local_formats(chat_model):
    start = time.time()
    proc = subprocess.run([BIN, "perplexity", "--model", str(chat_model)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    for text in ["--data-path allenai/tulu-3-sft-mixture: this looks like a Hugging Face dataset id",
                 "(mlx_lm.perplexity's default)", "mlxrt reads local data only",
                 "--data-path FILE.jsonl with one {\"text\": \"...\"} object per line",
                 "--data-path DIR holding train.jsonl", "--text-file FILE",
                 "datasets.load_dataset('allenai/tulu-3-sft-mixture', split='train').to_json('train.jsonl')"]:
        assert text in proc.stderr, (text, proc.stderr)
    assert "Loading model" not in proc.stdout  # refused before the model is read
    assert time.time() - start < 30
    other = subprocess.run([BIN, "perplexity", "--model", str(chat_model), "--data-path", "org/some-set"],
                           capture_output=True, text=True)
    assert "--data-path org/some-set: this looks like a Hugging Face dataset id" in other.stderr
    assert "mlx_lm.perplexity's default" not in other.stderr


class Chat:
    """mlxrt chat on pipes, read as it writes."""

    def __init__(self, model):
        self.proc = subprocess.Popen([BIN, "chat", "--model", str(model), "--max-tokens", "1000000"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "COLUMNS": "80"})
        self.out = b""

    def read_until(self, pattern, start=0, timeout=120):
        """Reads until `pattern` shows in the output from byte `start` on; returns that output."""
        deadline = time.time() + timeout
        while True:
            text = self.out[start:].decode("utf-8", "replace")
            if re.search(pattern, text):
                return text
            left = deadline - time.time()
            assert left > 0, f"{pattern!r} never came:\n{text[-2000:]}"
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the chat ended before {pattern!r}:\n{text[-2000:]}"
                self.out += chunk

    def send(self, line):
        self.proc.stdin.write(line.encode())
        self.proc.stdin.flush()

    def interrupt(self):
        time.sleep(0.3)  # the prompt is printed just before the read starts waiting
        self.proc.send_signal(signal.SIGINT)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def test_ctrl_c_in_chat(chat_model):
    chat = Chat(chat_model)
    try:
        prompt = "\u203a\x01\x1b\\[0m\x02 "
        chat.read_until(prompt)
        # At the prompt: the first Ctrl-C says what a second one does.
        chat.interrupt()
        chat.read_until("press Ctrl-C again to quit, or type q")
        assert chat.proc.poll() is None
        # A line typed after it resets that: the answer streams until Ctrl-C stops it.
        mark = len(chat.out)
        chat.send("tell me a very long story\n")
        chat.read_until(r"(?s).{400}", start=mark)  # a good part of the answer is out
        chat.interrupt()
        text = chat.read_until("answer cut short, the conversation is kept; Ctrl-C again at the prompt quits",
                               start=mark)
        tokens = int(re.findall(r"  (?:\x1b\[[0-9;]*m)?(\d+) tokens \u00b7", text)[-1])
        assert 0 < tokens < 1000000
        mark = len(chat.out)
        chat.read_until(prompt + r"$", start=mark - 200)
        assert chat.proc.poll() is None
        # The conversation goes on: a second turn answers, and is stopped the same way.
        mark = len(chat.out)
        chat.send("and now?\n")
        chat.read_until(r"(?s).{200}", start=mark)
        chat.interrupt()
        chat.read_until("answer cut short", start=mark)
        chat.read_until(prompt + r"$", start=mark)
        # Right after a stopped answer, Ctrl-C at the prompt quits, saying so.
        chat.interrupt()
        chat.read_until("bye", start=mark)
        assert chat.proc.wait(timeout=30) == 0
        assert chat.out.decode("utf-8", "replace").count("answer cut short") == 2
    finally:
        chat.close()
