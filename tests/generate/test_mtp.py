"""`mlxrt generate --mtp`: speculative decoding with the model's own multi-token-prediction head
(Qwen3.5 / Qwen3-Next's mtp.* tensors; docs/exact-mode.md). The head's logits equal
tools/mtp_reference.py's (written from the published architecture) byte for byte. The invariance
suite on qwen3_5: greedy --mtp runs exact, so its tokens and logprobs are the bytes of plain
one-token-at-a-time decoding, with drafts accepted and rejected (a random head, which seldom
agrees, and a "bigram" head that agrees often by construction), with chunked prefill; and so do
--spec-exact with any prefill chunks, with draft models (the model itself, another qwen3_5), whose
rejected drafts the hybrid model's verify windows roll back, and continuing a prompt cache saved
by mlx-lm. 40 tokens here, 256 under make test-long. Then bad input."""
import sys

import mlx.core as mx
import pytest
from conftest import ROOT, make_fixture, run_mlxrt
from oracle import raw_bytes

sys.path.insert(0, str(ROOT / "tools"))
import mtp_reference  # noqa: E402

PROMPT = [1, 5, 9, 200, 33, 17, 80, 41, 7, 300, 12, 99, 4, 8, 15, 16, 23, 42, 108, 3, 77, 55, 21, 34]
PROMPT_FLAG = ",".join(map(str, PROMPT))
MAX_TOKENS = 40


def generate(model, flags, tmp_path, max_tokens=MAX_TOKENS):
    out = tmp_path / "logprobs.safetensors"
    proc = run_mlxrt("generate", "--model", model, "--prompt-tokens", PROMPT_FLAG, "-m", max_tokens,
                     "--logprobs-file", out, *flags)
    tokens = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
    saved = mx.load(str(out))
    from_draft = saved["from_draft"].tolist() if "from_draft" in saved else None
    return tokens, raw_bytes(saved["logprobs"]), from_draft, proc.stdout


@pytest.fixture(scope="module")
def one_token_runs(tmp_path_factory):
    """Each model's reference: plain greedy decoding with a prefill of one token at a time."""
    cache = {}

    def get(name, max_tokens=MAX_TOKENS):
        if (name, max_tokens) not in cache:
            cache[name, max_tokens] = generate(make_fixture(name), ["--prefill-step-size", "1"],
                                               tmp_path_factory.mktemp(name), max_tokens)[:2]
        return cache[name, max_tokens]

    return get


@pytest.mark.parametrize("fixture", ["qwen3_5_mtp_bf16", "qwen3_5_moe_mtp_fp32", "qwen3_next_dense_mtp_bf16",
                                     "qwen3_next_mtp_fp32"])
def test_mtp_logits_equal_the_reference(fixture, tmp_path):
    model_dir = make_fixture(fixture)
    out = tmp_path / "mtp.safetensors"
    run_mlxrt("logits", "--model", model_dir, "--tokens", PROMPT_FLAG, "--mtp", "--out", out)
    got = mx.load(str(out))["logits"]
    from mlx_lm.utils import load_model

    model, _ = load_model(model_dir, strict=False)  # qwen3_next.py keeps an MLX checkpoint's mtp.* tensors
    want = mtp_reference.draft_logits(model, mtp_reference.load_head(model_dir, model), PROMPT)
    assert got.shape == (len(PROMPT) - 1, 512) and got.dtype == want.dtype
    assert raw_bytes(got) == raw_bytes(want)


def hf_layout_copy(model_dir, out):
    """An MLX-layout qwen3_5 / qwen3_5_moe fixture as a Hugging Face checkpoint stores it:
    transformers' names, conv1d weights [channels, 1, kernel], every Qwen3-Next RMSNorm (the MTP
    head's included) zero-centred (transformers scales by 1 + weight), and Qwen3.5-MoE's experts
    fused (gate_up_proj: gate then up along -2; down_proj)."""
    import json
    import shutil

    zero_centred = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                    ".q_norm.weight", ".k_norm.weight", "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
                    "mtp.pre_fc_norm_hidden.weight")
    tensors = mtp_reference.checkpoint_tensors(model_dir)
    hf = {}
    for k, v in tensors.items():
        if k.endswith("conv1d.weight"):
            v = v.moveaxis(1, 2)
        if k.endswith(zero_centred):
            v = v - 1.0
        if k.endswith("switch_mlp.up_proj.weight"):
            continue
        if k.endswith("switch_mlp.gate_proj.weight"):
            up = tensors[k.replace("gate_proj", "up_proj")]
            k, v = k.replace("switch_mlp.gate_proj.weight", "experts.gate_up_proj"), mx.concatenate([v, up], axis=-2)
        elif k.endswith("switch_mlp.down_proj.weight"):
            k = k.replace("switch_mlp.down_proj.weight", "experts.down_proj")
        if k.startswith("language_model.model."):
            k = "model.language_model." + k[len("language_model.model."):]
        elif k.startswith("language_model."):
            k = k[len("language_model."):]
        hf[k] = v
    out.mkdir()
    shutil.copy(model_dir / "config.json", out / "config.json")
    mx.save_safetensors(str(out / "model.safetensors"), hf, metadata={"format": "pt"})
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: "model.safetensors" for k in hf}}))
    return out


@pytest.mark.parametrize("fixture", ["qwen3_5_mtp_bf16", "qwen3_5_moe_mtp_fp32"])
def test_mtp_head_of_a_hugging_face_checkpoint(fixture, tmp_path):
    """The published checkpoints' layout: the head's norms get their 1 added with the model's (and
    its experts are split as the model's), so its logits equal the MLX-layout twin's (and the
    reference's on the same files)."""
    model_dir = make_fixture(fixture)
    hf_dir = hf_layout_copy(model_dir, tmp_path / "hf")
    logits = {}
    for name, path in (("mlx", model_dir), ("hf", hf_dir)):
        run_mlxrt("logits", "--model", path, "--tokens", PROMPT_FLAG, "--mtp", "--out", tmp_path / f"{name}.safetensors")
        logits[name] = raw_bytes(mx.load(str(tmp_path / f"{name}.safetensors"))["logits"])
    assert logits["hf"] == logits["mlx"]
    from mlx_lm.utils import load_model

    model, _ = load_model(hf_dir)
    assert raw_bytes(mtp_reference.draft_logits(model, mtp_reference.load_head(hf_dir, model), PROMPT)) == logits["hf"]


# The invariance suite on qwen3_5: every variant gives plain one-token decoding's tokens and logprobs.
# (name, model, flags); "{self}" is the model itself, other names are fixtures.
VARIANTS = [
    ("spec-exact", "qwen3_5_mtp_bigram_bf16", ["--spec-exact"]),
    ("spec-exact-chunked", "qwen3_5_mtp_bigram_bf16", ["--spec-exact", "--prefill-step-size", "7"]),
    # draft models on a model whose caches cannot be trimmed: verify windows roll them back
    ("draft-itself", "qwen3_5_mtp_bigram_bf16", ["--spec-exact", "--draft-model", "{self}", "--num-draft-tokens", "4"]),
    ("draft-other-init-chunked", "qwen3_5_mtp_bigram_bf16",
     ["--spec-exact", "--draft-model", "qwen3_5_mtp_bf16", "--num-draft-tokens", "3", "--prefill-step-size", "5"]),
    ("mtp-random-head", "qwen3_5_mtp_bf16", ["--mtp", "--num-draft-tokens", "3"]),
    ("mtp-bigram-head", "qwen3_5_mtp_bigram_bf16", ["--mtp", "--num-draft-tokens", "3"]),
    ("mtp-bigram-head-chunked", "qwen3_5_mtp_bigram_bf16", ["--mtp", "--num-draft-tokens", "2", "--prefill-step-size", "5"]),
    ("mtp-bigram-head-5-drafts", "qwen3_5_mtp_bigram_bf16", ["--mtp", "--num-draft-tokens", "5", "--prefill-step-size", "3"]),
    # qwen3_next with experts, in float32 (where plain chunked prefill does not give one-token bytes):
    # its MTP layer is sparse; the -mtp fixtures are the plain ones with a head added
    ("next-spec-exact-chunked", "qwen3_next_fp32", ["--spec-exact", "--prefill-step-size", "7"]),
    ("next-draft-itself", "qwen3_next_fp32", ["--spec-exact", "--draft-model", "{self}", "--num-draft-tokens", "3"]),
    ("next-mtp-moe-head", "qwen3_next_mtp_fp32", ["--mtp", "--num-draft-tokens", "3", "--prefill-step-size", "6"]),
    ("next-mtp-dense-head", "qwen3_next_dense_mtp_bf16", ["--mtp", "--num-draft-tokens", "2"]),
    # qwen3_5_moe in float32 (experts on every layer, the MTP layer's too)
    ("moe-spec-exact-chunked", "qwen3_5_moe_mtp_fp32", ["--spec-exact", "--prefill-step-size", "7"]),
    ("moe-mtp-head", "qwen3_5_moe_mtp_fp32", ["--mtp", "--num-draft-tokens", "3", "--prefill-step-size", "5"]),
]
SHORT = {"draft-other-init-chunked", "mtp-random-head", "mtp-bigram-head", "mtp-bigram-head-chunked",
         "next-mtp-moe-head", "moe-mtp-head"}
# A qwen3_next checkpoint with mtp.* tensors loads only with --mtp (qwen3_next.py's strict load
# refuses them): its one-token reference is the same model without them.
REFERENCE = {"qwen3_next_mtp_fp32": "qwen3_next_fp32", "qwen3_next_dense_mtp_bf16": "qwen3_next_dense_bf16"}


def variant_flags(model, flags):
    out = []
    for f in flags:
        out.append(str(make_fixture(model)) if f == "{self}" else str(make_fixture(f)) if f.startswith("qwen") else f)
    return out


def check_variant(model, flags, one_token_runs, tmp_path, max_tokens):
    want_tokens, want_logprobs = one_token_runs(REFERENCE.get(model, model), max_tokens)
    tokens, logprobs, from_draft, stdout = generate(make_fixture(model), variant_flags(model, flags), tmp_path,
                                                    max_tokens)
    assert tokens == want_tokens
    assert logprobs == want_logprobs
    return from_draft, stdout


@pytest.mark.parametrize("name,model,flags", [v for v in VARIANTS if v[0] in SHORT],
                         ids=[v[0] for v in VARIANTS if v[0] in SHORT])
def test_greedy_variants_equal_one_token_decoding(name, model, flags, one_token_runs, tmp_path):
    from_draft, stdout = check_variant(model, flags, one_token_runs, tmp_path, MAX_TOKENS)
    if "--mtp" in flags:
        accepted = sum(from_draft)
        assert f"MTP: {accepted} of " in stdout
        if "bigram" in name:
            # Drafts are both accepted and rejected: the rollback runs on either path.
            assert 0 < accepted < len(from_draft)


@pytest.mark.long
@pytest.mark.parametrize("name,model,flags", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_greedy_variants_equal_one_token_decoding_256(name, model, flags, one_token_runs, tmp_path):
    check_variant(model, flags, one_token_runs, tmp_path, 256)


def one_token_prompt_cache(model_dir, ids, out):
    """mlx-lm's prompt cache after `ids`, fed one token at a time (plain decoding's bytes)."""
    from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache
    from mlx_lm.utils import load_model

    model, _ = load_model(model_dir)
    cache = make_prompt_cache(model)
    for t in ids:
        model(mx.array([[t]]), cache=cache)
        mx.eval([c.state for c in cache])
    save_prompt_cache(str(out), cache, {"model": str(model_dir)})


@pytest.mark.parametrize("max_tokens", [MAX_TOKENS, pytest.param(256, marks=pytest.mark.long)])
def test_prompt_cache_reuse_equals_one_token_decoding(max_tokens, one_token_runs, tmp_path):
    """The prompt's first 16 tokens from a saved cache, the rest (and the answer) with --spec-exact."""
    model = "qwen3_5_mtp_bigram_bf16"
    model_dir = make_fixture(model)
    cache_file = tmp_path / "prefix.safetensors"
    one_token_prompt_cache(model_dir, PROMPT[:16], cache_file)
    want_tokens, want_logprobs = one_token_runs(model, max_tokens)
    out = tmp_path / "logprobs.safetensors"
    proc = run_mlxrt("generate", "--model", model_dir, "--prompt-tokens", ",".join(map(str, PROMPT[16:])),
                     "--prompt-cache-file", cache_file, "--spec-exact", "-m", max_tokens, "--logprobs-file", out)
    assert [int(t) for t in proc.stdout.split("==========\n")[1].split()] == want_tokens
    assert raw_bytes(mx.load(str(out))["logprobs"]) == want_logprobs


def test_sampled_mtp_drafts_and_verifies(tmp_path):
    """Sampling turns exact mode off (it is the default for greedy only): drafts are verified with
    the sampler, as mlx-lm's draft-model path verifies them."""
    tokens, _, from_draft, stdout = generate(make_fixture("qwen3_5_mtp_bigram_bf16"),
                                             ["--mtp", "--temp", "0.5", "--seed", "3"], tmp_path)
    assert len(tokens) == len(from_draft) == MAX_TOKENS
    assert f"MTP: {sum(from_draft)} of " in stdout


@pytest.mark.parametrize("model,flags,message", [
    ("qwen3_5_bf16", [], "--mtp needs the checkpoint's multi-token-prediction head (the mtp.* tensors of the "
                         "original Hugging Face checkpoint, which mlx_lm.convert drops); missing: "
                         "mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight, mtp.norm.weight, "
                         "mtp.layers.0.input_layernorm.weight, mtp.layers.0.self_attn.q_proj.weight"),
    ("qwen3_bf16", [], "--mtp: model_type 'qwen3' has no multi-token-prediction head"),
    ("qwen3_5_mtp_bf16", ["--draft-model", "{self}"], "--mtp and --draft-model: choose one drafter"),
    ("qwen3_5_mtp_bf16", ["--num-draft-tokens", "0"], "--num-draft-tokens: must be between 1 and 64"),
])
def test_refused(model, flags, message):
    path = make_fixture(model)
    flags = [str(path) if f == "{self}" else f for f in flags]
    proc = run_mlxrt("generate", "--model", path, "--prompt-tokens", PROMPT_FLAG, "-m", 4, "--mtp", *flags,
                     check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_text_path_refuses_a_family_without_a_head(chat_model):
    """With tokenizer files (the text path): a model without an MTP head is named."""
    proc = run_mlxrt("generate", "--model", chat_model, "--prompt", "hello", "-m", 4, "--mtp", check=False)
    assert proc.returncode != 0
    assert "--mtp: model_type 'llama' has no multi-token-prediction head" in proc.stderr
