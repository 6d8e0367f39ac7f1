"""--fidelity on the inference verbs, and `mlxrt fidelity`, the harness that measures a tier against
l1: KL(P_l1 || P_tier) and greedy agreement per position, decode and prefill modes. Tiny random
models with Qwen3's tokenizer (the generate tests' chat fixture and its 4-bit copy)."""
import http.client
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
SHARED = Path(os.environ.get("MLXRT_SHARED_DIR", ROOT.parent / "shared"))
TOKENIZERS = SHARED / "data" / "tokenizers"
sys.path.insert(0, str(ROOT / "tools"))

# The L3 kernels run on x86-64 CPUs with AVX2, FMA and F16C; elsewhere an l3 load is refused.
_FLAGS = set(re.findall(r"\w+", Path("/proc/cpuinfo").read_text())) if Path("/proc/cpuinfo").exists() else set()
needs_l3 = pytest.mark.skipif(not {"avx2", "fma", "f16c"} <= _FLAGS, reason="no L3 CPU kernels on this machine")


def mlxrt(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def models():
    """(bf16 model, its 4-bit quantized copy), both with Qwen3's tokenizer."""
    from speculative_oracle import make_chat_pair
    return make_chat_pair(FIXTURES, TOKENIZERS)


def fidelity_json(model, *args):
    proc = mlxrt("fidelity", "--model", model, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- --fidelity on the verbs -------------------------------------------------------------------

VERB_ARGS = {
    "generate": ["--model", "M"],
    "chat": ["--model", "M"],
    "server": ["--model", "M"],
    "benchmark": ["--model", "M"],
    "batch-generate": ["--model", "M", "--requests", "R"],
    "perplexity": ["--model", "M"],
    "logits": ["--model", "M", "--tokens", "1", "--out", "o.safetensors"],
}


@pytest.mark.parametrize("verb", sorted(VERB_ARGS))
@pytest.mark.parametrize("value", ["l2", "L3", "fast", ""])
def test_bad_fidelity_is_a_clear_parse_error(verb, value):
    proc = mlxrt(verb, *VERB_ARGS[verb], "--fidelity", value)
    assert proc.returncode != 0
    assert "--fidelity" in proc.stderr and "l1" in proc.stderr and "l3" in proc.stderr, proc.stderr
    assert f"got '{value}'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--tier", "--against"])
def test_fidelity_verb_rejects_bad_tiers(flag):
    proc = mlxrt("fidelity", "--model", "M", flag, "l2")
    assert proc.returncode != 0
    assert flag in proc.stderr and "l1" in proc.stderr and "l3" in proc.stderr, proc.stderr


def test_fidelity_is_in_the_help_of_generate():
    out = mlxrt("generate", "--help").stdout
    assert "--fidelity" in out and "l1" in out


def test_generate_l1_output_is_the_default_output(models):
    _, q4 = models
    args = ["generate", "--model", q4, "--prompt", "hello", "--max-tokens", "8", "--verbose", "False"]
    default, l1 = mlxrt(*args), mlxrt(*args, "--fidelity", "l1")
    assert default.returncode == 0 and l1.returncode == 0, default.stderr + l1.stderr
    assert default.stdout and l1.stdout == default.stdout


@needs_l3
def test_generate_runs_at_l3(models):
    _, q4 = models
    proc = mlxrt("generate", "--model", q4, "--prompt", "hello", "--max-tokens", "8", "--fidelity", "l3")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"Generation: \d+ tokens", proc.stdout), proc.stdout


def wait_until_listening(port, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/v1/models")
            conn.getresponse().read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("tier", ["l1", pytest.param("l3", marks=needs_l3)])
def test_server_logs_the_tier_it_serves_at(models, tier):
    _, q4 = models
    proc = subprocess.Popen([BIN, "server", "--model", q4, "--port", "0", "--fidelity", tier],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:  # until the server listens (or stops)
            lines.append(line)
            if "Starting httpd" in line:
                break
        claim = "bit-exact" if tier == "l1" else "measured"
        assert any(f"': fidelity {tier} {claim}" in line for line in lines), "".join(lines)
        # Stopped once it answers: a stop that comes before the listening loop starts can be lost.
        port = int(re.search(r"on port (\d+)", lines[-1]).group(1))
        wait_until_listening(port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- mlxrt fidelity ----------------------------------------------------------------------------

def check_modes(report, positions, modes=("decode", "prefill")):
    assert set(report["modes"]) == set(modes)
    for mode in report["modes"].values():
        assert mode["positions"] == positions
        assert isinstance(mode["mean_kl"], float) and isinstance(mode["max_kl"], float)
        assert math.isfinite(mode["mean_kl"]) and math.isfinite(mode["max_kl"])
        assert 0.0 <= mode["mean_kl"] <= mode["max_kl"]
        assert 0.0 <= mode["agreement"] <= 1.0
        assert 0 <= mode["max_kl_position"] < positions


def test_l1_against_l1_is_exactly_zero(models):
    """The harness's self-check: two l1 loads give the same bytes in both modes."""
    for model in models:
        report = fidelity_json(model, "--tier", "l1", "--tokens", 40, "--prefill-chunk", 16)
        check_modes(report, 40)
        assert report["tier"] == "l1" and report["against"] == "l1"
        assert report["fidelity"] == {"tier": "l1", "oracle": "mlx-lm", "claim": "bit-exact"}
        for mode in report["modes"].values():
            assert mode["mean_kl"] == 0.0 and mode["max_kl"] == 0.0 and mode["agreement"] == 1.0
        assert report["gate"]["pass"] is True


@needs_l3
def test_l3_against_l1_on_a_4bit_model(models):
    _, q4 = models
    report = fidelity_json(q4, "--tokens", 48, "--prefill-chunk", 20)  # --tier l3 is the default
    check_modes(report, 48)
    assert report["tier"] == "l3" and report["against"] == "l1" and report["tokens"] == 48
    assert report["fidelity"] == {"tier": "l3", "oracle": None, "claim": "measured"}
    assert report["corpus"] == "built-in" and report["corpus_tokens"] > 1024
    assert "L3" in report["kernels"]["tier"], report["kernels"]
    assert report["gate"]["pass"] == all(m["mean_kl"] <= 1e-3 and m["agreement"] >= 0.99
                                         for m in report["modes"].values())
    # --gate: the same report, and the exit status the gate gives (the same bytes again: deterministic).
    proc = mlxrt("fidelity", "--model", q4, "--tokens", 48, "--prefill-chunk", 20, "--json", "--gate")
    assert json.loads(proc.stdout) == report
    assert proc.returncode == (0 if report["gate"]["pass"] else 1), proc.stderr
    if not report["gate"]["pass"]:
        assert "--gate: fidelity l3 fails the gate" in proc.stderr, proc.stderr


def test_table_and_gate(models):
    _, q4 = models
    proc = mlxrt("fidelity", "--model", q4, "--tier", "l1", "--tokens", 12, "--gate")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["decode"], ["prefill"])}
    assert set(rows) == {"decode", "prefill"}
    for row in rows.values():
        assert row[1] == "12" and float(row[2]) == 0.0 and float(row[3]) == 0.0 and row[4] == "100.00%"
    assert "gate (mean KL <= 0.001, agreement >= 0.99 in every mode): pass" in proc.stdout


def test_tokens_beyond_the_corpus_is_a_clear_error(models, tmp_path):
    from tokenizers import Tokenizer
    _, q4 = models
    corpus = tmp_path / "short.txt"
    corpus.write_text("A short corpus: eleven words, a number (42), and nothing more.\n")
    have = len(Tokenizer.from_file(str(Path(q4) / "tokenizer.json")).encode(corpus.read_text()).ids)
    proc = mlxrt("fidelity", "--model", q4, "--corpus", corpus, "--tokens", have)
    assert proc.returncode == 1
    assert f"--tokens {have}: the corpus ({corpus}) has {have} tokens" in proc.stderr, proc.stderr
    assert f"--tokens {have - 1} or less" in proc.stderr
    # One fewer fits exactly.
    report = fidelity_json(q4, "--corpus", corpus, "--tokens", have - 1, "--tier", "l1")
    check_modes(report, have - 1)
    # The built-in corpus says how many tokens it has.
    proc = mlxrt("fidelity", "--model", q4, "--tokens", 100000)
    assert proc.returncode == 1
    m = re.search(r"--tokens 100000: the corpus \(built-in\) has (\d+) tokens", proc.stderr)
    assert m and 1024 < int(m.group(1)) < 100000, proc.stderr


def test_batch_mode_decodes_rows_together(models):
    """--batch B: the positions as B rows decoded together (a batched cache, products of B rows);
    l1 against l1 is zero there too."""
    _, q4 = models
    report = fidelity_json(q4, "--tier", "l1", "--tokens", 42, "--batch", 4)
    # 42 positions in 4 rows: 10 each, the last 2 not measured.
    assert report["modes"]["batch"]["positions"] == 40 and report["batch"] == 4
    assert report["modes"]["batch"]["mean_kl"] == 0.0 and report["modes"]["batch"]["agreement"] == 1.0
    proc = mlxrt("fidelity", "--model", q4, "--tier", "l1", "--tokens", 8, "--batch", 2)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[:2] for line in proc.stdout.splitlines() if line.startswith("batch")] == [["batch", "8"]]


@needs_l3
def test_batch_mode_at_l3(models):
    """l3's batch mode is its own figure (the CPU's L3 kernels take the B-row products), and the
    gate covers the third mode."""
    _, q4 = models
    report = fidelity_json(q4, "--tokens", 40, "--batch", 4)
    check_modes(report, 40, ("decode", "prefill", "batch"))
    assert report["modes"]["batch"]["mean_kl"] > 0.0
    assert report["gate"]["pass"] == all(m["mean_kl"] <= 1e-3 and m["agreement"] >= 0.99
                                         for m in report["modes"].values())


@pytest.mark.parametrize("args,flag", [(["--tokens", "0"], "--tokens"), (["--prefill-chunk", "0"], "--prefill-chunk"),
                                       (["--batch", "-1"], "--batch"), (["--tokens", "8", "--batch", "9"], "--batch")])
def test_bad_counts(models, args, flag):
    proc = mlxrt("fidelity", "--model", models[1], *args)
    assert proc.returncode == 1 and flag in proc.stderr, proc.stderr
