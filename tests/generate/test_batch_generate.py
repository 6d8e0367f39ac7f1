"""Batched generation parity: `mlxrt batch-generate` against mlx-lm's BatchGenerator (driven as
batch_generate drives it) for one set of prompts of different lengths and settings submitted
together. Each request's tokens and the logprobs of its sampled tokens equal mlx-lm's exactly."""
import json
import re

import pytest
from conftest import make_fixture, run_mlxrt
from batch_oracle import batch_tokens

EOS = 2  # the fixtures' eos_token_id

# Four prompts of different lengths (one of a single token) and budgets.
GREEDY = [
    {"prompt_tokens": [1, 5, 9, 200, 33, 17, 8, 91, 140, 7, 64], "max_tokens": 24},
    {"prompt_tokens": [1, 44], "max_tokens": 9},
    {"prompt_tokens": [3], "max_tokens": 17},
    {"prompt_tokens": [1, 300, 301, 302, 11, 12], "max_tokens": 30},
]

# Per-request samplers and processors: each row sampled on its own (distinct samplers), with the
# generator's greedy fallback for the row without one.
MIXED = [
    {"prompt_tokens": [1, 5, 9, 200, 33, 17, 8, 91, 140, 7, 64], "max_tokens": 24,
     "sampler": {"temp": 0.8, "top_p": 0.9}},
    {"prompt_tokens": [1, 44], "max_tokens": 20, "sampler": {"temp": 1.0, "top_k": 20},
     "logits_processors": {"repetition_penalty": 1.3}},
    {"prompt_tokens": [3], "max_tokens": 17},
    {"prompt_tokens": [1, 300, 301, 302, 11, 12], "max_tokens": 30, "sampler": {"temp": 0.7, "min_p": 0.05},
     "logits_processors": {"logit_bias": {"5": 2.5}, "presence_penalty": 0.5}},
]


def ours(model, requests, tmp_path, *flags):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": requests}))
    out = run_mlxrt("batch-generate", "--model", model, "--requests", path, *flags).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return [(r["tokens"], r["logprobs"], r["finish_reason"]) for r in rows]


def oracle_requests(requests):
    """The CLI takes logit_bias keys as strings (as OpenAI sends them); make_logits_processors ints."""
    out = []
    for r in requests:
        r = json.loads(json.dumps(r))
        lp = r.get("logits_processors", {})
        if "logit_bias" in lp:
            lp["logit_bias"] = {int(k): v for k, v in lp["logit_bias"].items()}
        out.append(r)
    return out


# Other families whose layers all keep a KVCache batch too (checked as long cases), and families
# with sliding-window layers, whose RotatingKVCaches batch as BatchRotatingKVCaches (window 6 in the
# fixtures: the rows' rings wrap within these budgets).
MORE = ["phi3_bf16", "mistral3_bf16", "smollm3_bf16", "olmo2_bf16", "granite_bf16", "glm4_bf16", "gemma_bf16",
        "starcoder2_bf16", "qwen3_moe_fp32", "mixtral_fp32",
        "olmo3_bf16", "cohere2_bf16", "exaone4_bf16", "gemma3_fp16_untied", "gpt_oss_fp32"]


# RoPE takes the batch's offset array as mlx-lm's does (one op), over precomputed frequencies
# (phi3_longrope) too.
# The quantized fixtures: on CUDA the step's affine [B, 1, K] projections go to MLX as one [B, K]
# matrix (kernels/cuda/folded_rows.h), which must leave every byte as mlx-lm's layout gives it; the
# mxfp4 / nvfp4 ones are not folded yet, and are here for when they are.
@pytest.mark.parametrize("fixture", ["qwen3_bf16", "llama_bf16", "qwen2_bf16", "phi3_longrope", "gemma3_bf16",
                                     "llama_swa", "qwen3_q4_g64", "qwen3_q8_g32", "qwen3_mxfp4", "qwen3_nvfp4"]
                         + [pytest.param(f, marks=pytest.mark.long) for f in MORE])
def test_greedy_batch_equals_mlx_lm(fixture, tmp_path):
    model = make_fixture(fixture)
    want = batch_tokens(model, GREEDY, [EOS])
    got = ours(model, GREEDY, tmp_path)
    assert got == want
    assert all(t for t, _, _ in got)


@pytest.mark.parametrize("fixture", ["qwen3_bf16", "llama_bf16"])
def test_seeded_batch_equals_mlx_lm(fixture, tmp_path):
    """One shared sampler (the --temp flag): one categorical draw over the whole batch per step."""
    model = make_fixture(fixture)
    want = batch_tokens(model, GREEDY, [EOS], seed=7, sampler_args={"temp": 1.0, "top_p": 0.95})
    got = ours(model, GREEDY, tmp_path, "--seed", 7, "--temp", 1.0, "--top-p", 0.95)
    assert got == want


def test_per_request_settings_equal_mlx_lm(tmp_path):
    model = make_fixture("qwen3_bf16")
    want = batch_tokens(model, oracle_requests(MIXED), [EOS], seed=3)
    got = ours(model, MIXED, tmp_path, "--seed", 3)
    assert got == want


# Greedy rows, each with its own sampler and processors as a server's requests have them: rows
# sharing one logit bias get one column add and one argmax over the batch; a row whose bias
# differs puts the batch back on mlx-lm's per-row path for that step. Keys naming one id ("17",
# "017") are one entry with the last bias, as mlx_lm.server's int(k) keys make them.
BIAS = {"2": -100.0, "17": 3.5}
SHARED_BIAS = [dict(r, sampler={"temp": 0.0}, logits_processors={"logit_bias": BIAS}) for r in GREEDY]


@pytest.mark.parametrize("requests", [
    SHARED_BIAS,
    SHARED_BIAS[:-1] + [dict(SHARED_BIAS[-1], logits_processors={"logit_bias": {"17": 3.5}})],
    SHARED_BIAS[:-1] + [dict(SHARED_BIAS[-1], logits_processors={"logit_bias": {"17": 1.0, "017": 2.5}})],
], ids=["shared", "one-differs", "one-id-twice"])
def test_greedy_rows_with_a_logit_bias_equal_mlx_lm(requests, tmp_path):
    model = make_fixture("qwen3_bf16")
    want = batch_tokens(model, oracle_requests(requests), [EOS])
    got = ours(model, requests, tmp_path)
    assert got == want


@pytest.mark.parametrize("fixture", ["qwen3_bf16", "gemma3_bf16"])
def test_small_batches_and_chunked_prefill_equal_mlx_lm(fixture, tmp_path):
    """Fewer rows than requests at once: rows join as others leave, prompts prefilled in chunks
    (gemma3: rotating caches extended and filtered, rolled in temporal order when the rows' rings
    are at different places)."""
    model = make_fixture(fixture)
    args = dict(completion_batch_size=2, prefill_batch_size=2, prefill_step_size=4)
    want = batch_tokens(model, GREEDY, [EOS], **args)
    got = ours(model, GREEDY, tmp_path, "--completion-batch-size", 2, "--prefill-batch-size", 2,
               "--prefill-step-size", 4)
    assert got == want


# --batch-order prompts-first (the server's default): prompts of more than one token submitted
# together in one prefill batch take mlx-lm's own steps in that order, so they give its bytes.
MULTI_TOKEN = [r for r in GREEDY if len(r["prompt_tokens"]) > 1]
MIXED_MULTI_TOKEN = [r for r in MIXED if len(r["prompt_tokens"]) > 1]


@pytest.mark.parametrize("fixture", ["qwen3_bf16", "gemma3_bf16"])
def test_prompts_first_order_equals_mlx_lm_for_prompts_submitted_together(fixture, tmp_path):
    model = make_fixture(fixture)
    want = batch_tokens(model, MULTI_TOKEN, [EOS])
    got = ours(model, MULTI_TOKEN, tmp_path, "--batch-order", "prompts-first")
    assert got == want
    assert ours(model, MULTI_TOKEN, tmp_path, "--batch-order", "prompts-first", "--first-tokens", "early") == want
    want = batch_tokens(model, oracle_requests(MIXED_MULTI_TOKEN), [EOS], seed=3)
    got = ours(model, MIXED_MULTI_TOKEN, tmp_path, "--batch-order", "prompts-first", "--seed", 3)
    assert got == want


def test_first_tokens_early_leaves_joining_rows_tokens_alone(tmp_path):
    """Rows joining as others leave (two rows, chunked prompts): handing a joining row's first token
    out before the next step is encoded runs the same steps, so every row's tokens are the same."""
    model = make_fixture("qwen3_bf16")
    small = ("--batch-order", "prompts-first", "--completion-batch-size", 2, "--prefill-batch-size", 2,
             "--prefill-step-size", 4)
    pipelined = ours(model, GREEDY, tmp_path, *small)
    assert ours(model, GREEDY, tmp_path, *small, "--first-tokens", "early") == pipelined
    proc = run_mlxrt("batch-generate", "--model", model, "--requests", tmp_path / "requests.json",
                     "--first-tokens", "soon", check=False)
    assert proc.returncode != 0
    assert "--first-tokens: expected early or pipelined, got 'soon'" in proc.stderr, proc.stderr


def test_bad_batch_order_is_refused(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": MULTI_TOKEN}))
    proc = run_mlxrt("batch-generate", "--model", make_fixture("qwen3_bf16"), "--requests", path,
                     "--batch-order", "fifo", check=False)
    assert proc.returncode != 0
    assert "--batch-order" in proc.stderr and "prompts-first or mlx-lm" in proc.stderr and "fifo" in proc.stderr


def test_step_log_and_graph_leave_the_tokens_alone(tmp_path):
    """--step-log writes a line per step (the rows it answered, its milliseconds); --step-graph the
    op graph of one decode step as DOT. Neither changes what is generated."""
    model = make_fixture("qwen3_bf16")
    steps, graph = tmp_path / "steps.txt", tmp_path / "step.dot"
    got = ours(model, GREEDY, tmp_path, "--step-log", steps, "--step-graph", graph)
    assert got == batch_tokens(model, GREEDY, [EOS])
    lines = [line.split() for line in steps.read_text().splitlines()]
    assert len(lines) >= max(len(t) + (f == "stop") for t, _, f in got)
    assert sum(int(rows) for rows, _ in lines) == sum(len(t) + (f == "stop") for t, _, f in got)
    assert all(float(ms) >= 0 for _, ms in lines)
    dot = graph.read_text()
    assert dot.startswith("digraph") and 'label ="Matmul"' in dot


def test_step_timing_and_a_step_without_per_layer_copies_of_shared_nodes(tmp_path):
    """--step-timing prints the decode steps' mean build / dispatch / wait split (what
    bench/batch_generate_bench.py reads). On a float32 model, whose dense layers go through MLX's
    matmul as bfloat16 ones do on a GPU, a step's graph holds no transpose of a weight: each layer's
    is made once (a Qwen3 layer keeps 5 transposes of activations; the 7 of its weights would make
    12 a layer), and the tokens stay mlx-lm's."""
    model = make_fixture("qwen3_fp32")
    layers = json.loads((model / "config.json").read_text())["num_hidden_layers"]
    graph = tmp_path / "step.dot"
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": GREEDY}))
    proc = run_mlxrt("batch-generate", "--model", model, "--requests", path, "--step-timing", "--step-graph", graph)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["tokens"], r["logprobs"], r["finish_reason"]) for r in rows] == batch_tokens(model, GREEDY, [EOS])
    m = re.search(r"decode step: build=([\d.]+) ms, dispatch=([\d.]+) ms, wait=([\d.]+) ms \(mean of (\d+) steps\)",
                  proc.stderr)
    assert m, proc.stderr
    # Every step after the first of its batch reads the one before it: the longest row's tokens less one.
    assert int(m.group(4)) >= max(len(r["tokens"]) for r in rows) - 1
    assert all(float(v) >= 0 for v in m.groups()[:3])
    # Each prefilling step's split: the prompts' chunk (built, then dispatched or waited for), then
    # the step that starts their rows.
    prefills = re.findall(r"prefilling step: (\d+) prompts, (\d+) tokens generated \(owed step ([\d.]+), decode "
                          r"([\d.]+), admit ([\d.]+), start ([\d.]+), prefill ([\d.]+): build ([\d.]+), wait "
                          r"([\d.]+), dispatch ([\d.]+) ms\)", proc.stderr)
    assert prefills, proc.stderr
    assert sum(int(p[0]) for p in prefills) >= len(GREEDY)
    assert any(float(p[7]) > 0 for p in prefills) and any(float(p[5]) > 0 for p in prefills)
    for p in prefills:
        assert float(p[6]) >= float(p[7]) + float(p[8]) + float(p[9]) - 0.01
    transposes = graph.read_text().count('label ="Transpose"')
    assert 0 < transposes < 7 * layers


@pytest.mark.parametrize("fixture", [
    "lfm2_bf16",  # its convolution layers keep an ArraysCache, which mlxrt does not batch
    pytest.param("ministral3_bf16", marks=pytest.mark.long),  # scales queries by one position offset
    pytest.param("gemma2_bf16", marks=pytest.mark.long),  # its attention cannot take a batched mask
])
def test_unbatchable_model_is_refused(fixture, tmp_path):
    model = make_fixture(fixture)
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": GREEDY[:1]}))
    proc = run_mlxrt("batch-generate", "--model", model, "--requests", path, check=False)
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: batched generation: ") and proc.stdout == ""


@pytest.mark.parametrize("doc,message", [
    ("not json", "not valid JSON"),
    ('{"requests": []}', "at least one request"),
    ('{"requests": [{"max_tokens": 3}]}', 'requests[0]: expected an object with "prompt_tokens"'),
    ('{"requests": [{"prompt_tokens": [1, 99999]}]}', "requests[0].prompt_tokens: ids must be integers in [0, "),
    ('{"requests": [{"prompt_tokens": []}]}', "Sequence 0 has an empty prompt."),
    ('{"requests": [{"prompt_tokens": [1], "max_tokens": 0}]}', "max_tokens must be > 0"),
    ('{"requests": [{"prompt_tokens": [1], "sampler": {"temp": 1, "tmp": 2}}]}',
     "requests[0].sampler: unknown make_sampler argument 'tmp'"),
    ('{"requests": [{"prompt_tokens": [1], "sampler": {"top_p": 2}}]}', "top_p: has to be a float in the [0, 1]"),
])
def test_bad_requests_file_is_refused(tmp_path, doc, message):
    path = tmp_path / "requests.json"
    path.write_text(doc)
    proc = run_mlxrt("batch-generate", "--model", make_fixture("qwen3_bf16"), "--requests", path, check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert message in proc.stderr, proc.stderr
