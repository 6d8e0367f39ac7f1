"""Streamed experts (--expert-memory): with a budget holding about a quarter of the experts, `mlxrt
logits` is byte-equal to the fully resident run and to mlx-lm (full, one token at a time, in chunks),
greedy tokens are identical, the expert-cache line is printed and adds up, and peak RSS stays below
budget + dense weights (+ the runtime itself) + 10% on a larger model."""
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

import kv_oracle
import moe_checkpoint
import oracle
from conftest import BIN, FIXTURES, ROOT, run_mlxrt

TOKENS = [1, 17, 300, 42, 5, 511, 77, 8, 256, 3, 99, 150]

# A 4-bit and a float32 qwen3_moe, gpt-oss with mxfp4 experts, and mixtral with its experts saved one
# by one (streamed from the per-expert tensors that sanitize stacks).
STREAMED = ["qwen3_moe_q4_g64", "qwen3_moe_fp32", "gpt_oss_mxfp4", "mixtral_per_expert_q4_ties"]

SIZE = r"([\d.]+ [KMGT]?B)"
STATS = re.compile(r"Expert cache: hit rate ([\d.]+)% \((\d+) hits, (\d+) misses"
                   r"(?:, (\d+) read ahead \((\d+) used\))?\), " + SIZE + " read from disk, " +
                   SIZE + r" resident \(peak " + SIZE + ", budget " + SIZE + r"\)")
UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def size(text):
    """"1.235 MB" -> (1235000.0, tolerance of its last printed digit)."""
    value, unit = text.split()
    return float(value) * UNITS[unit], (0.5 if unit == "B" else 0.0005) * UNITS[unit]


def make(*names):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", *names], check=True)


@pytest.fixture(scope="module")
def fixtures():
    make(*STREAMED, "qwen3_bf16")
    return FIXTURES


def headers(path):
    for f in sorted(Path(path).glob("model*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            yield json.loads(fh.read(n))


def expert_layout(path):
    """(bytes of one expert of one layer, experts in all layers, experts per token)."""
    config = json.loads((Path(path) / "config.json").read_text())
    per_layer = config.get("num_experts") or config["num_local_experts"]
    total, layers = 0, set()
    for h in headers(path):
        for k, v in h.items():
            if k != "__metadata__" and (".switch_mlp." in k or ".experts." in k):
                total += v["data_offsets"][1] - v["data_offsets"][0]
                layers.add(int(k.split(".layers.")[1].split(".")[0]))
    count = per_layer * len(layers)
    assert total % count == 0
    return total // count, count, config["num_experts_per_tok"]


def quarter_budget(path):
    """A budget of a quarter of all experts (at least one layer's top-k), in bytes and as a flag value."""
    per_expert, count, top_k = expert_layout(path)
    budget = max(count // 4, top_k) * per_expert
    return budget, f"{(budget + 1) / 1e9:.9f}"


def parse_stats(stderr):
    m = STATS.search(stderr)
    assert m, stderr
    rate, hits, misses, ahead, ahead_used, read, resident, peak, budget = m.groups()
    return {"rate": float(rate), "hits": int(hits), "misses": int(misses), "ahead": int(ahead or 0),
            "ahead_used": int(ahead_used or 0), "read": size(read),
            "resident": size(resident), "peak": size(peak), "budget": size(budget)}


def check_stats(stderr, path, budget):
    s = parse_stats(stderr)
    per_expert, _, top_k = expert_layout(path)
    lookups = s["hits"] + s["misses"]
    assert s["misses"] >= top_k and lookups > 0
    assert abs(s["rate"] - 100.0 * s["hits"] / lookups) < 0.06
    # every miss and every read-ahead reads one expert of one layer; what stays resident is within the
    # budget (a step that routes to more experts than that runs with them all, then the cache drops back)
    (read, tol_read), (resident, tol_res), (limit, tol_limit) = s["read"], s["resident"], s["budget"]
    assert abs(read - (s["misses"] + s["ahead"]) * per_expert) <= tol_read
    assert s["ahead_used"] <= min(s["ahead"], s["hits"])
    assert abs(limit - budget) <= tol_limit + 1
    assert resident <= budget + tol_res and resident >= min(top_k * per_expert, budget) - tol_res
    return s


def logits(path, out, *extra):
    proc = run_mlxrt("logits", "--model", path, "--tokens", ",".join(map(str, TOKENS)), "--out", out, *extra)
    return mx.load(str(out))["logits"], proc


MODES = {"full": ([], lambda m: oracle.full_logits(m, TOKENS)),
         "incremental": (["--incremental"], lambda m: oracle.incremental_logits(m, TOKENS)),
         "chunked": (["--chunk-size", "5"], lambda m: kv_oracle.cached_logits(m, TOKENS, 5))}


@pytest.mark.parametrize("name", STREAMED)
@pytest.mark.parametrize("mode", list(MODES))
def test_streamed_logits_byte_equal(name, mode, fixtures, tmp_path):
    path = fixtures / name
    budget, flag = quarter_budget(path)
    extra, compute = MODES[mode]
    model, _ = oracle.load(path)
    ref = compute(model)
    resident, proc = logits(path, tmp_path / "resident.safetensors", *extra)
    assert "Expert cache" not in proc.stderr
    streamed, proc = logits(path, tmp_path / "streamed.safetensors", *extra, "--expert-memory", flag)
    assert streamed.dtype == ref.dtype and streamed.shape == ref.shape
    assert oracle.raw_bytes(streamed) == oracle.raw_bytes(resident), f"{name} {mode}: streamed != resident"
    assert oracle.raw_bytes(streamed) == oracle.raw_bytes(ref), f"{name} {mode}: streamed != mlx-lm"
    check_stats(proc.stderr, path, budget)


@pytest.mark.parametrize("name", ["qwen3_moe_q4_g64", "gpt_oss_mxfp4"])
def test_budget_of_all_experts_reads_each_once(name, fixtures, tmp_path):
    """With room for every expert nothing is evicted: each expert is read at most once, and the 12
    one-token steps find the experts earlier steps read."""
    path = fixtures / name
    per_expert, count, _ = expert_layout(path)
    _, proc = logits(path, tmp_path / "o.safetensors", "--incremental", "--expert-memory", f"{(count * per_expert + 1) / 1e9:.9f}")
    s = check_stats(proc.stderr, path, count * per_expert)
    assert s["misses"] + s["ahead"] <= count and s["hits"] > 0
    assert s["resident"][0] == (s["misses"] + s["ahead"]) * per_expert


def parse_generated(stdout):
    body = stdout.split("==========\n")[1].strip()
    return [int(t) for t in body.split()] if body and not body.startswith("No text") else []


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_greedy_tokens(name, fixtures):
    path = fixtures / name
    budget, flag = quarter_budget(path)
    model, config = oracle.load(path)
    prompt = [1, 5, 9, 200, 33]
    ref = oracle.greedy_tokens(model, config, prompt, 32, prefill_step_size=2)
    args = ["generate", "--model", path, "--prompt-tokens", ",".join(map(str, prompt)), "--max-tokens", 32,
            "--prefill-step-size", 2]
    resident = run_mlxrt(*args)
    streamed = run_mlxrt(*args, "--expert-memory", flag)
    assert parse_generated(streamed.stdout) == parse_generated(resident.stdout) == ref
    assert "Peak memory:" in streamed.stdout
    check_stats(streamed.stderr, path, budget)


def test_budget_below_one_layer_is_refused(fixtures):
    path = fixtures / "qwen3_moe_q4_g64"
    per_expert, _, top_k = expert_layout(path)
    proc = run_mlxrt("logits", "--model", path, "--tokens", "1,2", "--out", fixtures / "unused.safetensors",
                     "--expert-memory", f"{(top_k * per_expert - 1000) / 1e9:.9f}", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: --expert-memory"), proc.stderr
    minimum = float(re.search(r"must be at least ([\d.]+)", proc.stderr).group(1))
    assert minimum * 1e9 >= top_k * per_expert
    # the minimum it names is enough
    ok = run_mlxrt("logits", "--model", path, "--tokens", "1,2", "--out", fixtures / "unused.safetensors",
                   "--expert-memory", str(minimum))
    assert "Expert cache" in ok.stderr


def test_dense_model_is_refused(fixtures, tmp_path):
    for verb in (["logits", "--tokens", "1,2", "--out", tmp_path / "o.safetensors"],
                 ["generate", "--prompt-tokens", "1,2", "--max-tokens", "2"]):
        proc = run_mlxrt(verb[0], "--model", fixtures / "qwen3_bf16", *verb[1:], "--expert-memory", "1", check=False)
        assert proc.returncode == 1, proc.stderr
        assert "--expert-memory" in proc.stderr and "'qwen3'" in proc.stderr and "no mixture-of-experts" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc"])
def test_bad_budget_value(fixtures, value):
    proc = run_mlxrt("generate", "--model", fixtures / "qwen3_moe_q4_g64", "--prompt-tokens", "1",
                     "--expert-memory", value, check=False)
    assert proc.returncode != 0 and "--expert-memory" in proc.stderr, proc.stderr


# --- peak RSS on a larger model ------------------------------------------------------------------

def run_measured(args):
    """(stdout, stderr, peak memory in bytes) of one `mlxrt generate`: the process's peak RSS on a CPU;
    on a GPU, whose weights live in device memory, the device peak the run reports in its footer
    ("Peak memory", MLX's get_peak_memory as mlx-lm prints it)."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)\n"
            "print('\\nRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
            "sys.exit(p.returncode)\n")
    proc = subprocess.run([sys.executable, "-c", code, BIN, *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out, rss = proc.stdout.rsplit("\nRSS ", 1)
    if mx.default_device() == mx.gpu:
        peak = re.search(r"^Peak memory: ([0-9.]+) GB$", out, re.M)
        assert peak, out
        return out, proc.stderr, round(float(peak.group(1)) * 1e9)
    return out, proc.stderr, int(rss) * 1024


@pytest.fixture(scope="module")
def large_moe(tmp_path_factory):
    """A 4-bit qwen3_moe whose experts (~230 MB) dwarf the rest of the weights."""
    out = tmp_path_factory.mktemp("large_moe") / "m"
    moe_checkpoint.write(out, layers=4, hidden=512, moe_intermediate=512, experts=128, top_k=4, heads=8, kv_heads=2,
                         head_dim=64, vocab=4096, layers_per_shard=2, seed=7)
    return out


def test_peak_memory_below_budget(large_moe, fixtures):
    experts, dense = moe_checkpoint.expert_bytes(large_moe)
    budget = experts // 4
    prompt = ["--prompt-tokens", "1,5,9,200,33,17,300,42", "--max-tokens", "8"]
    # the runtime alone: the same run on a model whose weights are a few hundred KB
    _, _, runtime = run_measured(["generate", "--model", fixtures / "qwen3_moe_q4_g64", *prompt])
    bound = 1.1 * (budget + dense + runtime)
    out_r, _, resident = run_measured(["generate", "--model", large_moe, *prompt])
    out_s, err, streamed = run_measured(["generate", "--model", large_moe, *prompt,
                                         "--expert-memory", f"{budget / 1e9:.9f}"])
    assert parse_generated(out_s) == parse_generated(out_r)
    parse_stats(err)
    # the bound separates the two runs: all experts resident exceed it, streamed ones stay below
    assert resident > bound, (resident, bound)
    assert streamed < bound, (streamed, bound, runtime, budget, dense)


@pytest.mark.parametrize("name", ["qwen3_moe_q4_g64", "mixtral_per_expert_q4_ties"])
def test_read_ahead_changes_no_token(name, fixtures):
    """Each MoE block's router, run on the block before it's input, guesses its experts, which are read
    ahead on the store's own thread: the tokens are the same with and without it, the guesses are
    used, and every byte read is accounted for."""
    path = fixtures / name
    per_expert, count, top_k = expert_layout(path)
    budget = max(count // 2, 2 * top_k) * per_expert
    args = ["generate", "--model", path, "--prompt-tokens", "1,5,9,200,33", "--max-tokens", 32,
            "--expert-memory", f"{(budget + 1) / 1e9:.9f}"]
    ahead = run_mlxrt(*args, "--expert-prefetch")
    plain = run_mlxrt(*args)
    assert parse_generated(ahead.stdout) == parse_generated(plain.stdout)
    with_ahead, without = check_stats(ahead.stderr, path, budget), check_stats(plain.stderr, path, budget)
    assert with_ahead["ahead"] > 0 and with_ahead["ahead_used"] > 0, ahead.stderr
    assert without["ahead"] == 0 and "read ahead" not in plain.stderr
