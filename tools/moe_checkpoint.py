"""Writes a random 4-bit (affine, group 64) qwen3_moe checkpoint straight in its quantized form, one
safetensors shard at a time, with numpy only: a model far larger than memory can be written without
ever holding it (building it in bf16 first would need the whole model in memory).

The values are random but sane: 4-bit codes uniform, scales near 1/(4*sqrt(in)) so that each layer
keeps the hidden state's scale, biases centring the codes, norms at 1. Used by the streamed-experts
tests (a model large enough for peak-RSS checks) and bench/experts.

    python tools/moe_checkpoint.py OUT --layers 24 --hidden 2048 --moe-intermediate 768 \\
        --experts 128 --top-k 8 --heads 32 --kv-heads 4 --head-dim 128 --vocab 151936
"""
import argparse
import json
import struct
from pathlib import Path

import numpy as np

BITS, GROUP = 4, 64


def bf16(a):
    """float32 -> bfloat16 bytes (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


class Shard:
    """One safetensors file, its tensors added one by one and written when closed."""

    def __init__(self, path):
        self.path, self.tensors = Path(path), []

    def add(self, name, dtype, shape, data):
        self.tensors.append((name, dtype, list(shape), np.ascontiguousarray(data)))

    def close(self):
        header, offset = {"__metadata__": {"format": "mlx"}}, 0
        for name, dtype, shape, data in self.tensors:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + data.nbytes]}
            offset += data.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(self.path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for _, _, _, data in self.tensors:
                f.write(memoryview(data).cast("B"))
        names = [t[0] for t in self.tensors]
        self.tensors = []
        return names


class Codes:
    """Random 4-bit codes, cheaply: slices at random offsets of one pool of random words (drawing
    every word of a 17 GB model would take longer than writing it)."""

    def __init__(self, rng, words=1 << 24):
        self.rng, self.pool = rng, rng.integers(0, 2**32, size=words, dtype=np.uint32)

    def take(self, n):
        parts = []
        while n > 0:
            m = min(n, len(self.pool) // 2)
            start = int(self.rng.integers(0, len(self.pool) - m + 1))
            parts.append(self.pool[start:start + m])
            n -= m
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def quantized(shard, rng, name, lead, out_dims, in_dims, codes):
    """A 4-bit affine Linear / SwitchLinear: name.weight (uint32), .scales and .biases (bf16)."""
    shape = [*lead, out_dims]
    words = in_dims * BITS // 32
    shard.add(name + ".weight", "U32", [*shape, words], codes.take(int(np.prod(shape)) * words))
    groups = (*shape, in_dims // GROUP)
    scale = 1.0 / (4.0 * np.sqrt(in_dims))
    scales = (scale * rng.uniform(0.75, 1.25, size=groups)).astype(np.float32)
    shard.add(name + ".scales", "BF16", groups, bf16(scales))
    shard.add(name + ".biases", "BF16", groups, bf16(-7.5 * scales))


def norm(shard, name, dims):
    shard.add(name + ".weight", "BF16", [dims], bf16(np.ones(dims, np.float32)))


def write(out, layers, hidden, moe_intermediate, experts, top_k, heads, kv_heads, head_dim, vocab,
          layers_per_shard=2, seed=0):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    codes = Codes(rng)
    config = {
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": 4 * moe_intermediate,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "num_experts": experts, "num_experts_per_tok": top_k, "moe_intermediate_size": moe_intermediate,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-6,
        "vocab_size": vocab, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "eos_token_id": [vocab - 1],
        "quantization": {"group_size": GROUP, "bits": BITS, "mode": "affine"},
    }
    config["quantization_config"] = config["quantization"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    groups = [list(range(i, min(layers, i + layers_per_shard))) for i in range(0, layers, layers_per_shard)]
    n_files = len(groups) + 1
    weight_map = {}

    def file_name(i):
        return f"model-{i + 1:05d}-of-{n_files:05d}.safetensors"

    shard = Shard(out / file_name(0))
    quantized(shard, rng, "model.embed_tokens", [], vocab, hidden, codes)
    quantized(shard, rng, "lm_head", [], vocab, hidden, codes)
    norm(shard, "model.norm", hidden)
    weight_map.update({n: file_name(0) for n in shard.close()})
    for i, group in enumerate(groups, start=1):
        shard = Shard(out / file_name(i))
        for l in group:
            p = f"model.layers.{l}"
            quantized(shard, rng, p + ".self_attn.q_proj", [], heads * head_dim, hidden, codes)
            quantized(shard, rng, p + ".self_attn.k_proj", [], kv_heads * head_dim, hidden, codes)
            quantized(shard, rng, p + ".self_attn.v_proj", [], kv_heads * head_dim, hidden, codes)
            quantized(shard, rng, p + ".self_attn.o_proj", [], hidden, heads * head_dim, codes)
            norm(shard, p + ".self_attn.q_norm", head_dim)
            norm(shard, p + ".self_attn.k_norm", head_dim)
            norm(shard, p + ".input_layernorm", hidden)
            norm(shard, p + ".post_attention_layernorm", hidden)
            quantized(shard, rng, p + ".mlp.gate", [], experts, hidden, codes)
            quantized(shard, rng, p + ".mlp.switch_mlp.gate_proj", [experts], moe_intermediate, hidden, codes)
            quantized(shard, rng, p + ".mlp.switch_mlp.up_proj", [experts], moe_intermediate, hidden, codes)
            quantized(shard, rng, p + ".mlp.switch_mlp.down_proj", [experts], hidden, moe_intermediate, codes)
        weight_map.update({n: file_name(i) for n in shard.close()})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    return out


def expert_bytes(out):
    """(bytes of the stacked expert tensors, bytes of everything else) of a checkpoint directory."""
    experts = dense = 0
    for f in Path(out).glob("model*.safetensors"):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            size = v["data_offsets"][1] - v["data_offsets"][0]
            if ".switch_mlp." in k or ".experts." in k:
                experts += size
            else:
                dense += size
    return experts, dense


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--moe-intermediate", type=int, default=768)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--layers-per-shard", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    write(a.out, a.layers, a.hidden, a.moe_intermediate, a.experts, a.top_k, a.heads, a.kv_heads, a.head_dim,
          a.vocab, a.layers_per_shard, a.seed)
    e, d = expert_bytes(a.out)
    print(f"{a.out}: experts {e / 1e9:.3f} GB, other weights {d / 1e9:.3f} GB")


if __name__ == "__main__":
    main()
