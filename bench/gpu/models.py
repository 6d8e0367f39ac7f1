"""The benchmark models: Qwen3-0.6B to Qwen3-8B dimensions (their published configs), random
weights made by mlx-lm, bf16 and 4-bit g64 (mlx_lm.utils.quantize_model), saved as mlx_lm.convert
saves them, with the Qwen3 tokenizer files beside (mlx_lm.load needs them). `tiny` is a small
model of the same family for trying the scripts on a CPU."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

QWEN3_COMMON = {
    "model_type": "qwen3", "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "max_position_embeddings": 40960, "eos_token_id": 151645,
    "bos_token_id": 151643, "hidden_act": "silu",
}
SHAPES = {
    "qwen3-0.6b": {**QWEN3_COMMON, "hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True},
    "qwen3-1.7b": {**QWEN3_COMMON, "hidden_size": 2048, "num_hidden_layers": 28, "intermediate_size": 6144,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True},
    "qwen3-4b": {**QWEN3_COMMON, "hidden_size": 2560, "num_hidden_layers": 36, "intermediate_size": 9728,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": True},
    "qwen3-8b": {**QWEN3_COMMON, "hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False},
    # Qwen3.5-9B's text model (its published dims): 32 layers, every 4th gated full attention (16 query
    # heads of 256, 4 KV heads, 64 rotary dims), gated delta nets with 16 key and 32 value heads of 128
    "qwen3.5-9b": {"model_type": "qwen3_5", "hidden_size": 4096, "num_hidden_layers": 32,
                   "intermediate_size": 12288, "num_attention_heads": 16, "num_key_value_heads": 4,
                   "head_dim": 256, "linear_num_value_heads": 32, "linear_num_key_heads": 16,
                   "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                   "full_attention_interval": 4, "vocab_size": 248320, "rms_norm_eps": 1e-6,
                   "max_position_embeddings": 262144, "tie_word_embeddings": False, "eos_token_id": 151645,
                   "rope_parameters": {"rope_type": "default", "mrope_section": [11, 11, 10],
                                       "mrope_interleaved": True, "rope_theta": 10000000,
                                       "partial_rotary_factor": 0.25}},
    # Qwen3-30B-A3B (its published dims): 48 layers, 128 experts of 768, 8 routed per token
    "qwen3-30b-a3b": {**QWEN3_COMMON, "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "norm_topk_prob": True, "num_attention_heads": 32, "num_key_value_heads": 4,
                      "tie_word_embeddings": False},
    # gpt-oss-20b (its published config): 24 layers alternating sliding (128) and full attention with
    # sinks, 32 experts of 2880, 4 routed per token
    "gpt-oss-20b": {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24, "intermediate_size": 2880,
                    "num_local_experts": 32, "num_experts_per_tok": 4, "num_attention_heads": 64,
                    "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128, "vocab_size": 201088,
                    "rms_norm_eps": 1e-5, "rope_theta": 150000, "max_position_embeddings": 131072,
                    "tie_word_embeddings": False, "eos_token_id": 200002, "swiglu_limit": 7.0,
                    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "truncate": False, "original_max_position_embeddings": 4096},
                    "layer_types": ["sliding_attention", "full_attention"] * 12},
    # Qwen3-8B's layers and heads at a small width: a step's op graph has the 8B's structure, made and
    # run in seconds on a CPU (bench/batch_generate_bench.py --graphs; fp32 takes the GPU's bf16 path
    # through mx::matmul there)
    "qwen3-8b-layout": {**QWEN3_COMMON, "hidden_size": 256, "num_hidden_layers": 36, "intermediate_size": 512,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 16, "vocab_size": 4096,
                        "eos_token_id": 4000, "bos_token_id": 4001, "tie_word_embeddings": False},
    "tiny": {**QWEN3_COMMON, "hidden_size": 128, "num_hidden_layers": 2, "intermediate_size": 256,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True},
}
QUANTS = ("bf16", "q4", "mxfp4", "fp32")  # bench.py's default; MAKE_MODEL also makes q8 and nvfp4

MAKE_MODEL = r"""
import json, sys
from pathlib import Path
import mlx.core as mx
from mlx_lm import utils
out, quant, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
mx.random.seed(0)
model_class, args_class = utils._get_classes(config=config)
model = model_class(args_class.from_dict(config))
model.set_dtype(mx.float32 if quant == "fp32" else mx.bfloat16)
if quant in ("q4", "q8"):
    model, config = utils.quantize_model(model, config, 64, 4 if quant == "q4" else 8)
elif quant in ("mxfp4", "nvfp4"):  # mxfp4 as mlx-community's gpt-oss checkpoints (the router at 8 bits)
    model, config = utils.quantize_model(model, config, None, None, mode=quant)
utils.save_model(out, model)
utils.save_config(config, config_path=out / "config.json")
"""


def add_run_args(ap, default_models):
    """The options every model benchmark here takes: mlxrt's binary, the models' folder, the
    tokenizer files, the output folder and which models (shape-quant names)."""
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--models", nargs="+", default=default_models)


def ensure_model(python, work: Path, shape: str, quant: str, tokenizer_dir: Path) -> Path:
    """The model directory, made on first use (with this run's MLX, on its default device)."""
    path = work / f"{shape}-{quant}"
    recipe = json.dumps({"config": SHAPES[shape], "quant": quant}, sort_keys=True)
    if (path / "recipe.json").exists() and (path / "recipe.json").read_text() == recipe:
        return path
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # Its output goes to stderr: the scripts read the path this function's caller prints on stdout.
    subprocess.run([str(python), "-c", MAKE_MODEL, str(tmp), quant, json.dumps(SHAPES[shape])], check=True,
                   stdout=sys.stderr)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, tmp / name)
    (tmp / "recipe.json").write_text(recipe)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    print(f"made {path.name}", file=sys.stderr)
    return path


def safetensors_sizes(model_dir: Path) -> dict:
    """{tensor name: bytes} from the safetensors headers."""
    sizes = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name != "__metadata__":
                sizes[name] = meta["data_offsets"][1] - meta["data_offsets"][0]
    return sizes


def decode_bytes_per_token(model_dir: Path, context: float) -> tuple[float, float]:
    """(weight bytes one decode step reads, KV-cache bytes it reads at this context length).
    Every weight is read once, except the input embedding table, of which one row is read; with
    tied embeddings the table is read whole as the output head."""
    config = json.loads((model_dir / "config.json").read_text())
    sizes = safetensors_sizes(model_dir)
    weights = sum(sizes.values())
    # A mixture-of-experts step reads only the routed experts' share of the expert tensors.
    experts = config.get("num_experts") or config.get("num_local_experts")
    if experts:
        share = config["num_experts_per_tok"] / experts
        weights -= (1 - share) * sum(v for k, v in sizes.items() if ".switch_mlp." in k or ".mlp.experts." in k)
    if not config.get("tie_word_embeddings", False):
        weights -= sum(v for k, v in sizes.items() if "model.embed_tokens." in k)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    layers = config["num_hidden_layers"]
    interval = config.get("full_attention_interval")
    kv_layers = layers // interval if interval else layers
    kv = 2 * kv_layers * config["num_key_value_heads"] * head_dim * 2 * context  # K and V, bf16
    if interval:
        # Each gated delta net reads and writes its float32 recurrent state once per token.
        state = config["linear_num_value_heads"] * config["linear_value_head_dim"] * config["linear_key_head_dim"] * 4
        kv += 2 * (layers - kv_layers) * state
    return float(weights), float(kv)
