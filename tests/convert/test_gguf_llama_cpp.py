"""`mlxrt convert --gguf` on GGUFs written by llama.cpp's own converter (convert_hf_to_gguf.py),
for the families whose tensors it transforms: Qwen3-Next (qwen3next) and Qwen3.5 dense and MoE
(qwen35, qwen35moe), with gated delta nets whose A_log, in_proj_qkvz, value-head order and norms
llama.cpp rewrites, MiniCPM (minicpm: Q/K rows permuted, scales rewritten) and Ministral 3
(mistral3: Q/K rows permuted, YaRN and Llama 4's query scale back in rope_parameters), and MiniCPM 3
(minicpm3: latent attention renamed, LongRoPE factors back in rope_scaling, the constants llama.cpp
hard-codes in place of the scales it does not write); and InternLM 3, which llama.cpp writes as
llama: converted as llama, its tensors are mlx-lm's internlm3 tensors and mlx-lm's llama logits on
them are its internlm3 logits, byte for byte; and Gemma 4's text model (gemma4: per-layer-type
head sizes, RoPE and key/value heads, KV-shared layers, double-wide MLPs and per-layer embeddings
gathered back from the metadata and rope_freqs, its "gemma4" tokenizer rebuilt as a tokenizer.json
that encodes as the checkpoint's; and in 26B-A4B's layout, experts whose fused gate_up_proj is split
back as mlx-lm's sanitize splits it, router scales, full layers whose values are their keys);
and Gemma 3n's text model (gemma3n: the stacked AltUp projections split back, the per-layer
embeddings' zero padding dropped, the activation sparsity recovered from its normal quantile,
the AltUp clip and output scale that the file leaves out taken as published and said in notes).
One tiny random Hugging Face checkpoint per family (tools/hf_fixtures.py) goes both ways: through
llama.cpp's converter and `mlxrt convert --gguf`, and through mlx_lm.convert.

- exact GGUF types (F32 of a float32 model, BF16 of a bfloat16 one): every tensor equal to
  mlx-lm's, bytes and dtype, except A_log: llama.cpp stores -exp(A_log) computed by torch, whose
  exp differs from MLX's by an ulp at times: A_log is the float32 whose MLX exp is the file's
  value where one is near (gguf_gated_delta.h), within an ulp of the checkpoint's. With mlx-lm's A_log put in
  place of ours, mlx-lm's logits on the two directories are byte-equal (the config says the same),
  and mlxrt's logits on ours are mlx-lm's bytes.
- Q8_0: every quantized matrix within Q8_0's rounding (half a step of its block) of mlx-lm's
  weight, which a row or column in the wrong place would exceed; mlxrt's logits equal mlx-lm's.

These need llama.cpp's converter (tools/setup/install-llama-cpp-converter.sh: Debian's CPU torch
and the converter's packages, about a minute to install), so they run with `make test-long`; the
cheap cases (an unknown architecture named with the supported ones) run in `make test`."""
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from gguf_support import convert, run_convert, tiny_gguf_bytes

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
import hf_fixtures  # noqa: E402

# fixture: the GGUF types llama.cpp's converter writes it as (exact first).
CASES = {"hf_qwen3_next_fp32": ("f32", "q8_0"), "hf_qwen3_5_bf16": ("bf16", "q8_0"),
         "hf_qwen3_5_moe_fp32": ("f32", "q8_0"), "hf_minicpm_bf16": ("bf16", "q8_0"),
         "hf_ministral3_bf16": ("bf16", "q8_0"), "hf_minicpm3_bf16": ("bf16", "q8_0"),
         "hf_internlm3_fp32": ("f32", "q8_0"), "hf_gemma4_bf16": ("bf16", "q8_0"),
         "hf_gemma4_moe_fp32": ("f32", "q8_0"), "hf_gemma3n_bf16": ("bf16", "q8_0")}
# Token ids inside both tokenizers' vocabularies (Qwen's and Llama 2's).
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203]


def test_unknown_architecture_lists_the_hybrids(tmp_path):
    """An architecture the converter does not know is refused, naming the ones it does."""
    s = lambda text: len(text.encode()).to_bytes(8, "little") + text.encode()  # noqa: E731
    path = tmp_path / "mamba.gguf"
    path.write_bytes(tiny_gguf_bytes(kv=[("general.architecture", 8, s("mamba"))]))
    r = run_convert("--gguf", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode != 0
    assert "'mamba' is not supported" in r.stderr
    for arch in ("qwen3next", "qwen35", "qwen35moe", "lfm2"):
        assert arch in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_gemma3n_without_its_metadata_names_the_first_key_missing(tmp_path):
    """gemma3n converts now: a file without its hyper-parameters is refused for the first one
    missing, not for its architecture."""
    s = lambda text: len(text.encode()).to_bytes(8, "little") + text.encode()  # noqa: E731
    path = tmp_path / "gemma3n.gguf"
    path.write_bytes(tiny_gguf_bytes(kv=[("general.architecture", 8, s("gemma3n"))]))
    r = run_convert("--gguf", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode != 0
    assert "missing required metadata 'gemma3n.embedding_length'" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def converter():
    r = subprocess.run([str(ROOT / "tools" / "setup" / "install-llama-cpp-converter.sh")], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, f"installing llama.cpp's converter failed:\n{r.stdout}\n{r.stderr}"
    python = r.stdout.strip().splitlines()[-1]
    return python, ROOT / ".cache" / "llama-cpp-converter" / "llama.cpp"


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    return hf_fixtures.ensure(tmp_path_factory.mktemp("hf"))


def llama_cpp_gguf(converter, hf: Path, outtype: str, out: Path) -> Path:
    python, llama_cpp = converter
    r = subprocess.run([python, str(ROOT / "tools" / "llama_cpp_gguf.py"), "--llama-cpp", str(llama_cpp), str(hf),
                        "--outfile", str(out), "--outtype", outtype,
                        # Qwen's MTP head stays out (mlx-lm drops it); the option is Qwen's alone.
                        *(["--no-mtp"] if "qwen" in hf.name else [])],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def mlx_lm_convert(hf: Path, out: Path) -> Path:
    from mlx_lm.convert import convert as lm_convert
    with contextlib.redirect_stdout(io.StringIO()):
        lm_convert(str(hf), str(out))
    return out


def weights(d: Path):
    return {k: v for f in sorted(d.glob("*.safetensors")) for k, v in mx.load(str(f)).items()}


def mlx_lm_logits(d: Path, replace=None):
    from mlx_lm.utils import load_model
    model, _ = load_model(d)
    if replace:
        model.load_weights(list(replace.items()), strict=False)
    return model(mx.array([PROMPT]))[0]


def mlxrt_logits(d: Path, tmp: Path):
    out = tmp / "logits.safetensors"
    r = subprocess.run([os.environ["MLXRT_BIN"], "logits", "--model", str(d), "--tokens", ",".join(map(str, PROMPT)),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return mx.load(str(out))["logits"]


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        np.array(a.view({2: mx.uint16, 4: mx.uint32}[a.dtype.size])), np.array(b.view({2: mx.uint16, 4: mx.uint32}[b.dtype.size])))


def gemma3n_notes_and_config(gguf: Path, ours: Path, theirs: Path):
    """What llama.cpp's gemma3n file leaves out is said, and the config mlx-lm reads is the
    checkpoint's (this fixture has the published values the converter assumes)."""
    r = run_convert("--gguf", str(gguf), "--out", str(ours))
    assert r.returncode == 0, r.stderr
    for said in ("note: altup_coef_clip = 120.0", "note: altup_correct_scale = true",
                 "note: vocab_size_per_layer_input = 262144"):
        assert said in r.stderr, r.stderr
    from mlx_lm.models.gemma3n import TextConfig
    mine = json.loads((ours / "config.json").read_text())
    want = json.loads((theirs / "config.json").read_text())
    assert mine["model_type"] == want["model_type"]
    for field in TextConfig.__dataclass_fields__:
        assert mine["text_config"].get(field) == want["text_config"].get(field), field
    return ours


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_types_equal_mlx_lm(name, converter, hf_dirs, tmp_path):
    gguf = llama_cpp_gguf(converter, hf_dirs / name, CASES[name][0], tmp_path / "model.gguf")
    theirs = mlx_lm_convert(hf_dirs / name, tmp_path / "theirs")
    ours = (gemma3n_notes_and_config(gguf, tmp_path / "ours", theirs) if "gemma3n" in name
            else convert(gguf, tmp_path / "ours"))
    a, b = weights(ours), weights(theirs)
    assert sorted(a) == sorted(b)
    a_logs = {}
    for k in sorted(a):
        if k.endswith(".A_log"):
            # llama.cpp's A = -exp(A_log) went through torch's exp: ours is within an ulp.
            assert a[k].dtype == mx.float32 and a[k].shape == b[k].shape, k
            ulps = np.abs(np.array(a[k]).view(np.int32).astype(np.int64) - np.array(b[k].astype(mx.float32)).view(np.int32))
            assert ulps.max() <= 1, (k, a[k], b[k])
            a_logs[k] = a[k]
            continue
        assert same_bytes(a[k], b[k]), (k, a[k].dtype, b[k].dtype, a[k].shape, b[k].shape)
    # The config: mlx-lm runs both directories alike once they hold the same A_log.
    assert same_bytes(mlx_lm_logits(ours), mlx_lm_logits(theirs, replace=a_logs))
    assert same_bytes(mlxrt_logits(ours, tmp_path), mlx_lm_logits(ours))
    if "gemma4" in name:
        same_encodings(hf_dirs / name, ours)


def same_encodings(hf: Path, ours: Path):
    """The tokenizer.json rebuilt from llama.cpp's "gemma4" tokenizer encodes as the checkpoint's.
    Special tokens only as the file marks them: llama.cpp's converter (its transformers 4.57) does
    not see this fixture's <start_of_turn> as special, so the file holds it as a normal token."""
    from tokenizers import Tokenizer
    theirs, mine = Tokenizer.from_file(str(hf / "tokenizer.json")), Tokenizer.from_file(str(ours / "tokenizer.json"))
    for text in ("The quick brown fox", "  two spaces,\n\nnew lines\n and   more", "naïve café 東京 🙂",
                 "user\nHi<end_of_turn>\n", "x\ty\r\n\n\n\nz"):
        assert mine.encode(text).ids == theirs.encode(text).ids, text
        assert mine.decode(mine.encode(text).ids) == theirs.decode(theirs.encode(text).ids), text


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(CASES))
def test_q8_0_within_its_rounding(name, converter, hf_dirs, tmp_path):
    gguf = llama_cpp_gguf(converter, hf_dirs / name, CASES[name][1], tmp_path / "model.gguf")
    ours, theirs = convert(gguf, tmp_path / "ours"), mlx_lm_convert(hf_dirs / name, tmp_path / "theirs")
    a, b = weights(ours), weights(theirs)
    config = json.loads((ours / "config.json").read_text())
    quantized = [k[: -len(".scales")] for k in a if k.endswith(".scales")]
    assert len(quantized) > 10
    for module in quantized:
        q = config["quantization"].get(module, config["quantization"])
        got = mx.dequantize(a[module + ".weight"], a[module + ".scales"], a[module + ".biases"],
                            group_size=q["group_size"], bits=q["bits"])
        want = b[module + ".weight"].astype(mx.float32)
        assert got.shape == want.shape, module
        # Q8_0: 32 values per block, step d = amax / 127, each value rounded to a step; d is then
        # stored as float16 (relative error 2^-11, times up to 127 steps). A misplaced row or
        # column is off by about amax, far beyond.
        blocks = want.reshape(*want.shape[:-1], -1, 32)
        step = mx.max(mx.abs(blocks), axis=-1, keepdims=True) / 127
        err = mx.abs(got.reshape(blocks.shape) - blocks)
        assert mx.all(err <= (0.5 + 127 * 2.0**-11) * step * 1.001 + 1e-7).item(), module
    assert same_bytes(mlxrt_logits(ours, tmp_path), mlx_lm_logits(ours))
