"""perplexity, embed, cache_prompt and batch-generate as two ring ranks on the CPU (`mlxrt launch -n
2`), against mlx-lm's own code for each over the model sharded as mlx-lm shards it
(tools/sharded_verbs_oracle.py, in two ring ranks that tools/oracle_ranks.py keeps up): the same
token losses, prompt-cache file, batch tokens and logprobs, hidden states; a pipeline's also equal
to one process's (it moves whole layers, so the arithmetic is the unsharded model's). Only rank 0
prints or writes, and a model that cannot be split is refused quickly. Every process runs under a
timeout."""
import json
import os
import subprocess
import time

import mlx.core as mx
import pytest
from conftest import BIN, _chat_fixture, make_fixture
from oracle_ranks import RANKS
from ring_ports import free_port

TIMEOUT = 120
ENV_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
REQUESTS = [
    {"prompt_tokens": [1, 5, 9, 200, 33, 17, 8, 91, 140, 7, 64], "max_tokens": 12},
    {"prompt_tokens": [1, 44], "max_tokens": 9},
    {"prompt_tokens": [3], "max_tokens": 10},
]
PROMPT = "a prompt of a few words, cached by every rank"


def run(cmd, timeout=TIMEOUT):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **ENV_OFFLINE})


def launched(*args, check=True):
    """`mlxrt launch -n 2 -- args...`."""
    proc = run([BIN, "launch", "-n", 2, "--", *args])
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def one_process(*args):
    proc = run([BIN, *args])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def oracle(verb, *args, pipeline=False):
    """mlx-lm's code for `verb` on its sharded model: tools/sharded_verbs_oracle.py's main in two ring
    ranks (those tools/oracle_ranks.py keeps up between calls)."""
    RANKS.run("sharded_verbs_oracle", *(["--pipeline"] if pipeline else []), verb, *args, timeout=TIMEOUT)


def raw(a):
    return a.dtype, a.shape, bytes(memoryview(a))


def pipelined(flag):
    return ["--pipeline"] if flag else []


@pytest.fixture(scope="module")
def tokenizer_models(chat_model):
    """Models with a tokenizer: the chat llama (tensor parallel) and a qwen2 of the same size, whose
    family pipelines in mlx-lm."""
    import make_fixtures

    config = {**make_fixtures.QWEN2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 3, "vocab_size": 151936, "tie_word_embeddings": True,
              "bos_token_id": None, "eos_token_id": 151645}
    return {False: chat_model, True: _chat_fixture("qwen2_qwen3_tokenizer", "qwen3", config)}


# The pipeline case checks against one process too; the tensor case repeats the sharded losses.
@pytest.mark.parametrize("pipeline", [pytest.param(False, marks=pytest.mark.long), True], ids=["tensor", "pipeline"])
def test_perplexity_losses_equal_mlx_lm_sharded(pipeline, tokenizer_models, tmp_path):
    model = tokenizer_models[pipeline]
    words = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()
    text = tmp_path / "text.txt"
    text.write_text(" ".join(words[(i * 7) % len(words)] for i in range(300)))
    flags = ["--text-file", text, "--sequence-length", 32, "--num-samples", 5, "--batch-size", 2]
    proc = launched("perplexity", "--model", model, *flags, "--losses-file", tmp_path / "ours.safetensors",
                    *pipelined(pipeline))
    assert proc.stdout.count("EVALUATION RESULTS") == 1  # rank 0 alone reports
    oracle("perplexity", "--model", model, *flags, "--record", tmp_path / "ref.safetensors", pipeline=pipeline)
    ours, ref = mx.load(str(tmp_path / "ours.safetensors")), mx.load(str(tmp_path / "ref.safetensors"))
    assert raw(ours["tokens"]) == raw(ref["tokens"])
    assert raw(ours["losses"]) == raw(ref["losses"]), "token losses differ from mlx-lm's on its sharded model"
    if pipeline:
        one_process("perplexity", "--model", model, *flags, "--losses-file", tmp_path / "one.safetensors")
        assert raw(ours["losses"]) == raw(mx.load(str(tmp_path / "one.safetensors"))["losses"])


# (model with pipelining, --pipeline, flags): a rotating cache (--max-kv-size smaller than the prompt,
# so that the ring wraps) is gathered too.
CACHES = {"tensor": (False, False, []), "pipeline": (True, True, []),
          "tensor-rotating": (True, False, ["--max-kv-size", 8]),
          "pipeline-rotating": (True, True, ["--max-kv-size", 8])}


# `make test` gathers a plain cache over heads and a rotating one over layers; the other two pairings
# repeat those paths.
@pytest.mark.parametrize("case", [c if c in ("tensor", "pipeline-rotating") else pytest.param(c, marks=pytest.mark.long)
                                  for c in CACHES])
def test_cache_prompt_file_equals_mlx_lm_sharded(case, tokenizer_models, tmp_path):
    """The ranks' parts of the cache are gathered into the whole model's: the file one process
    writes, here with the sharded model's keys and values."""
    model_key, pipeline, flags = CACHES[case]
    model = tokenizer_models[model_key]
    args = ["--model", model, "--prompt", PROMPT, *flags]
    proc = launched("cache_prompt", *args, "--prompt-cache-file", tmp_path / "ours.safetensors", *pipelined(pipeline))
    assert proc.stdout.count("Saving...") == 1
    oracle("cache_prompt", *args, "--prompt-cache-file", tmp_path / "ref.safetensors", pipeline=pipeline)
    ours, ours_meta = mx.load(str(tmp_path / "ours.safetensors"), return_metadata=True)
    ref, ref_meta = mx.load(str(tmp_path / "ref.safetensors"), return_metadata=True)
    assert ours_meta == ref_meta and sorted(ours) == sorted(ref)
    assert all(raw(ours[k]) == raw(ref[k]) for k in ref), "cache tensors differ from mlx-lm's sharded prefill"
    if pipeline:
        one_process("cache_prompt", *args, "--prompt-cache-file", tmp_path / "one.safetensors")
        one = mx.load(str(tmp_path / "one.safetensors"))
        assert all(raw(ours[k]) == raw(one[k]) for k in one)
    # The gathered file continues in one process as any saved cache does.
    cont = one_process("generate", "--model", model, "--prompt-cache-file", tmp_path / "ours.safetensors",
                       "--prompt", "and more", "--max-tokens", 3)
    assert "==========" in cont.stdout


@pytest.mark.parametrize("case", ["tensor", "pipeline", pytest.param("tensor-rotating", marks=pytest.mark.long)])
def test_a_whole_cache_file_continues_on_the_sharded_model(case, tokenizer_models, tmp_path):
    """A saved prompt cache holds the whole model: each rank continues from its heads or layers."""
    model_key, pipeline, flags = CACHES[case]
    model = tokenizer_models[model_key]
    cache_file = tmp_path / "cache.safetensors"
    one_process("cache_prompt", "--model", model, "--prompt", PROMPT, "--prompt-cache-file", cache_file, *flags)
    args = ["--model", model, "--prompt-cache-file", cache_file, "--tokens", "5,6,7"]
    launched("logits", *args, "--out", tmp_path / "ours.safetensors", *pipelined(pipeline))
    oracle("logits", *args, "--out", tmp_path / "ref.safetensors", pipeline=pipeline)
    ours = mx.load(str(tmp_path / "ours.safetensors"))["logits"]
    assert raw(ours) == raw(mx.load(str(tmp_path / "ref.safetensors"))["logits"])
    if pipeline:
        one_process("logits", *args, "--out", tmp_path / "one.safetensors")
        assert raw(ours) == raw(mx.load(str(tmp_path / "one.safetensors"))["logits"])
    gen = ["generate", "--model", model, "--prompt-cache-file", cache_file, "--prompt", "and more", "--max-tokens", 6]
    text = launched(*gen, *pipelined(pipeline)).stdout
    assert text.count("==========") == 2
    if pipeline:
        assert text.split("==========")[1] == one_process(*gen).stdout.split("==========")[1]


# gpt_oss and ministral3 (sharded as their own shard() does) repeat what the others prove for these
# verbs: `make test-long` runs them.
LONG = pytest.mark.long


@pytest.mark.parametrize("name,pipeline", [("qwen3_bf16", False), ("llama_bias", False), ("qwen3_moe_fp32", True),
                                           pytest.param("gpt_oss_fp32", False, marks=LONG)])
def test_batch_generate_equals_mlx_lm_batch_generator_sharded(name, pipeline, tmp_path):
    model = make_fixture(name)
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps({"requests": REQUESTS}))
    proc = launched("batch-generate", "--model", model, "--requests", requests, *pipelined(pipeline))
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(ours) == len(REQUESTS)  # rank 0 alone prints
    assert proc.stderr.count("[batch_generate]") == 1
    oracle("batch", "--model", model, "--requests", requests, "--out", tmp_path / "ref.json", pipeline=pipeline)
    ref = json.loads((tmp_path / "ref.json").read_text())
    assert [[r["tokens"], r["logprobs"], r["finish_reason"]] for r in ours] == ref


@pytest.mark.parametrize("name,pipeline", [("qwen3_bf16", False), ("qwen3_moe_fp32", True),
                                           pytest.param("gpt_oss_fp32", False, marks=LONG),
                                           pytest.param("ministral3_q4_g64", False, marks=LONG)])
def test_embed_equals_mlx_lm_hidden_states_sharded(name, pipeline, tmp_path):
    model = make_fixture(name)
    args = ["embed", "--model", model, "--tokens", "1,17,300,42,5", "--tokens", "9,8", "--pooling", "last",
            "--no-normalize"]
    ours = json.loads(launched(*args, *pipelined(pipeline)).stdout)
    assert len(ours["data"]) == 2
    oracle("hidden", "--model", model, "--tokens", "1,17,300,42,5", "--out", tmp_path / "h.safetensors",
           pipeline=pipeline)
    hidden = mx.load(str(tmp_path / "h.safetensors"))["hidden"]
    assert ours["data"][0]["embedding"] == hidden[-1].tolist()
    if pipeline:
        assert ours == json.loads(one_process(*args).stdout)


@pytest.mark.parametrize("verb", [
    ["perplexity", "--text-file", "/dev/null"],
    ["embed", "--tokens", "1,2"],
    ["cache_prompt", "--prompt", "x", "--prompt-cache-file", "/dev/null"],
    ["batch-generate", "--requests", "REQUESTS"],
])
def test_a_model_that_does_not_split_is_refused_quickly(verb, tmp_path):
    # qwen3_hd128 has one key/value head: two ranks cannot split it (before any data is read).
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps({"requests": REQUESTS}))
    verb = [requests if v == "REQUESTS" else v for v in verb]
    started = time.monotonic()
    proc = launched(verb[0], "--model", make_fixture("qwen3_hd128"), *verb[1:], check=False)
    assert proc.returncode != 0
    assert "'num_key_value_heads' is 1, which does not divide across 2 ranks" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 30


def test_a_qwen3_5_whose_key_heads_do_not_split_is_refused_quickly_on_every_rank(tmp_path):
    # qwen3_5_one_key_head's gated delta nets have one key head: two ranks cannot split it. Each rank
    # is started by hand (the ring environment mlx.launch gives), so that every one's error is read.
    model = make_fixture("qwen3_5_one_key_head")
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(f'[["127.0.0.1:{free_port()}"], ["127.0.0.1:{free_port()}"]]\n')
    started = time.monotonic()
    procs = [subprocess.Popen([BIN, "embed", "--model", str(model), "--tokens", "1,2"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)})
             for rank in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode != 0
        assert "'linear_num_key_heads' is 1, which does not divide across 2 ranks" in err, err
    assert time.monotonic() - started < 30


def test_cache_prompt_refuses_caches_it_cannot_gather(tokenizer_models, tmp_path):
    proc = launched("cache_prompt", "--model", tokenizer_models[False], "--prompt", PROMPT, "--kv-bits", 4,
                    "--prompt-cache-file", tmp_path / "c.safetensors", check=False)
    assert proc.returncode != 0 and "--kv-bits is not supported in distributed mode" in proc.stderr, proc.stderr
    assert not (tmp_path / "c.safetensors").exists()


def test_a_cache_file_of_another_layer_count_is_refused_on_every_rank(tmp_path):
    """A pipeline's ranks would cut such a file differently from their layers: every rank refuses it."""
    from mlx_lm.models.cache import KVCache, save_prompt_cache

    model = make_fixture("qwen3_moe_fp32")  # 3 layers, 2 key/value heads of 32
    layers = []
    for _ in range(4):
        layer = KVCache()
        layer.update_and_fetch(mx.zeros((1, 2, 3, 32)), mx.zeros((1, 2, 3, 32)))
        layers.append(layer)
    save_prompt_cache(str(tmp_path / "four.safetensors"), layers)
    # Two ranks started by hand with the ring environment mlx.launch gives, so that each one's
    # error can be read.
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(f'[["127.0.0.1:{free_port()}"], ["127.0.0.1:{free_port()}"]]\n')
    args = ["logits", "--model", model, "--pipeline", "--prompt-cache-file", tmp_path / "four.safetensors",
            "--tokens", "1,2", "--out", tmp_path / "x.safetensors"]
    procs = [subprocess.Popen([BIN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)})
             for rank in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode != 0 and "the cache has 4 layers, the model 3" in err, err
