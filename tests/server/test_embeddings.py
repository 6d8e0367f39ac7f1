"""Embeddings, L1: `mlxrt embed` and POST /v1/embeddings (through the official openai SDK) give
vectors byte-equal to the same computation on mlx-lm's model in Python: the hidden states of
model.model(mx.array([tokens])), last-token (h[0, -1]) or mean (mx.mean(h[0], axis=0)) pooling, the
first `dimensions` values, then v / mx.maximum(mx.linalg.norm(v), 1e-12) when the checkpoint's
sentence-transformers config has a Normalize module, as float32. Pooling and normalisation come
from modules.json / 1_Pooling/config.json. Bad requests get 400s in OpenAI's shape."""
import base64
import json
import subprocess
import sys

import mlx.core as mx
import numpy as np
import openai
import pytest
from mlx_lm.utils import load_model

from conftest import FIXTURES, MLXRT_BIN, SOURCE, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))

TOKENS = [[1, 17, 300, 42, 5, 511, 77, 8], [256, 3, 99]]
TEXTS = ["The quick brown fox", "jumps over the lazy dog.", "Héllo wörld"]


def with_st_config(src, name, pooling, normalize):
    """A model directory `name` holding links to `src`'s files and a sentence-transformers config
    (modules.json, 1_Pooling/config.json, a Normalize module when `normalize`)."""
    out = FIXTURES / name
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        link = out / f.name
        if f.is_file() and not link.exists():
            link.symlink_to(f.resolve())
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "1_Pooling").mkdir(exist_ok=True)
    hidden = json.loads((src / "config.json").read_text())["hidden_size"]
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": pooling == "last", "include_prompt": True}))
    return out


def reference(model, tokens, pooling, normalize, dims=None):
    h = model.model(mx.array([tokens]))
    v = h[0, -1] if pooling == "last" else mx.mean(h[0], axis=0)
    if dims is not None:
        v = v[:dims]
    if normalize:
        v = v / mx.maximum(mx.linalg.norm(v), 1e-12)
    return np.array(v.astype(mx.float32))


def as_f32(values):
    return np.array(values, dtype=np.float64).astype(np.float32)


def run_embed(*args, check=True):
    proc = subprocess.run([MLXRT_BIN, "embed", *map(str, args)], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def fixture():
    import fixture_dirs
    return fixture_dirs.fixture_dir


@pytest.fixture(scope="module")
def embed_model(model_dir):
    """The server fixture (a tiny qwen3 with the real Qwen3 tokenizer) as a Qwen3-Embedding-style
    checkpoint: last-token pooling, normalised."""
    return with_st_config(model_dir, "embed_qwen3_last", "last", True)


@pytest.fixture(scope="module")
def hf_tokenizer(model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_dir)


# (fixture, directory variant, CLI flags, pooling, normalise, dimensions)
CLI_CASES = [
    ("qwen3_bf16", None, ["--pooling", "last", "--normalize"], "last", True, None),
    ("llama_bf16", None, ["--pooling", "mean", "--no-normalize"], "mean", False, None),
    ("llama_bf16", ("mean", True), ["--dimensions", "50"], "mean", True, 50),
    ("qwen3_bf16", ("last", False), ["--dimensions", "128"], "last", False, 128),
]


@pytest.mark.parametrize("case", range(len(CLI_CASES)))
def test_cli_tokens_byte_equal(case, fixture):
    name, variant, flags, pooling, normalize, dims = CLI_CASES[case]
    path = fixture(name)
    if variant:
        path = with_st_config(path, f"{name}_st_{variant[0]}_{int(variant[1])}", *variant)
    args = ["--model", path, *flags]
    for t in TOKENS:
        args += ["--tokens", ",".join(map(str, t))]
    out = json.loads(run_embed(*args).stdout)
    model, _ = load_model(path)
    assert [d["index"] for d in out["data"]] == list(range(len(TOKENS)))
    for d, tokens in zip(out["data"], TOKENS):
        want = reference(model, tokens, pooling, normalize, dims)
        assert as_f32(d["embedding"]).tobytes() == want.tobytes(), (name, flags)
    assert out["usage"] == {"prompt_tokens": sum(map(len, TOKENS)), "total_tokens": sum(map(len, TOKENS))}


def test_cli_texts_and_file(embed_model, hf_tokenizer, tmp_path):
    model, _ = load_model(embed_model)
    listed = tmp_path / "texts.txt"
    listed.write_text("\n".join(TEXTS[:2]) + "\n\n")
    by_args = json.loads(run_embed("--model", embed_model, *TEXTS).stdout)
    by_file = json.loads(run_embed("--model", embed_model, "--file", listed, "--encoding-format", "base64").stdout)
    for i, text in enumerate(TEXTS):
        want = reference(model, hf_tokenizer.encode(text), "last", True)
        assert as_f32(by_args["data"][i]["embedding"]).tobytes() == want.tobytes(), text
        if i < 2:
            assert base64.b64decode(by_file["data"][i]["embedding"]) == want.tobytes(), text
    assert len(by_file["data"]) == 2


@pytest.mark.parametrize("args,message", [
    (["--tokens", "1,2", "--dimensions", "4096"], "larger than the model's embedding width 64"),
    (["--tokens", "1,2", "--pooling", "max"], "pooling 'max' is not one of"),
    (["--tokens", "1,2", "--encoding-format", "int8"], "--encoding-format must be"),
    ([], "give texts, --file or --tokens"),
])
def test_cli_bad_input(embed_model, args, message):
    proc = run_embed("--model", embed_model, *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_cli_unsupported_pooling(model_dir):
    path = with_st_config(model_dir, "embed_qwen3_cls", "last", False)
    cfg = json.loads((path / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_lasttoken=False, pooling_mode_cls_token=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    proc = run_embed("--model", path, "--tokens", "1,2", check=False)
    assert proc.returncode != 0 and "pooling_mode_cls_token is not supported" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def server(embed_model, tmp_path_factory):
    running = start_mlxrt(embed_model, tmp_path_factory)
    yield running
    stop(running)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0)


def test_sdk_texts_byte_equal(client, embed_model, hf_tokenizer):
    model, _ = load_model(embed_model)
    # The SDK asks for base64 by default and decodes it; float is asked for explicitly.
    for fmt in (None, "float"):
        r = client.embeddings.create(model="default_model", input=TEXTS, **({"encoding_format": fmt} if fmt else {}))
        assert r.object == "list" and len(r.data) == len(TEXTS)
        used = 0
        for d, text in zip(r.data, TEXTS):
            ids = hf_tokenizer.encode(text)
            used += len(ids)
            assert as_f32(d.embedding).tobytes() == reference(model, ids, "last", True).tobytes(), (fmt, text)
        assert r.usage.prompt_tokens == r.usage.total_tokens == used


def test_sdk_tokens_and_dimensions(client, embed_model):
    model, _ = load_model(embed_model)
    r = client.embeddings.create(model=str(embed_model), input=TOKENS, dimensions=24)
    for d, tokens in zip(r.data, TOKENS):
        assert len(d.embedding) == 24
        assert as_f32(d.embedding).tobytes() == reference(model, tokens, "last", True, 24).tobytes()
    one = client.embeddings.create(model="default_model", input=TOKENS[0], encoding_format="float")
    assert as_f32(one.data[0].embedding).tobytes() == reference(model, TOKENS[0], "last", True).tobytes()
    single = client.embeddings.create(model="default_model", input=TEXTS[0])
    assert as_f32(single.data[0].embedding).tobytes() == as_f32(
        client.embeddings.create(model="default_model", input=[TEXTS[0]]).data[0].embedding).tobytes()


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": ["a", 3]}, "input[1]"),
    ({"input": [[1, 2], []]}, "input[1]"),
    ({"input": [1, 2.5]}, "input[1]"),
    ({"input": [1, 10 ** 9]}, "input[1]"),
    ({"input": "hi", "dimensions": 65}, "dimensions"),
    ({"input": "hi", "dimensions": 0}, "dimensions"),
    ({"input": "hi", "dimensions": "8"}, "dimensions"),
    ({"input": "hi", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "hi", "model": 3}, "model"),
])
def test_bad_requests(server, body, param):
    status, err = server.post_json("/v1/embeddings", body)
    assert status == 400, err
    assert err["error"]["param"] == param and err["error"]["message"], err


def test_sdk_error_and_unknown_model(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="default_model", input="hi", dimensions=1000)
    assert "dimensions" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no/such-model", input="hi")
