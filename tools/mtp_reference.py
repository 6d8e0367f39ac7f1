#!/usr/bin/env python3
"""The multi-token-prediction (MTP) head of Qwen3.5 / Qwen3-Next on mlx: the reference mlxrt's C++
head (src/mlxrt/model/families/qwen3_next_mtp.cpp) is checked against byte for byte, and what puts
an MTP head into a test fixture. mlx-lm has no MTP (its sanitize drops the checkpoints' mtp.*
tensors); this module is written from the published architecture:

- tensors (the Hugging Face checkpoints' names): mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden,
  mtp.fc [hidden, 2 * hidden] without bias, mtp.layers.0.* (one decoder layer), mtp.norm; the
  embedding and the output head are the main model's (vLLM qwen3_next_mtp.py / qwen3_5_mtp.py);
- entry j drafts token j + 2: fc(concat(RMSNorm(embed(t[j+1])), RMSNorm(h[j]))), embedding first
  (vLLM: torch.cat([inputs_embeds, hidden_states], dim=-1)), then the decoder layer, the final
  norm and the shared head; h[j] is the main model's hidden state after its final norm (what vLLM's
  Qwen3NextModel.forward returns and its EAGLE/MTP proposer passes on);
- the layer is a full-attention layer (layer_type="full_attention") with its own KV cache, entry j
  at RoPE position j (vLLM's proposer keeps the target positions and shifts the tokens by one); its
  MLP is the model's own kind (MoE when num_experts > 0 for Qwen3.5; Qwen3-Next's rule at layer 0);
- a further draft step takes the drafted token with the head's own output hidden state, one
  position on (vLLM: method "mtp" feeds the draft model's hidden states back);
- the norms are zero-centred (x * (1 + w)) in Hugging Face's layout: sanitize adds 1 to them when it
  adds 1 to the main model's (when the checkpoint's conv1d weights are in Hugging Face's layout).

Usage:
  mtp_reference.py logits --model DIR --tokens 1,2,3 --out FILE.safetensors
      the head's logits [T - 1, vocab] for entries 0..T-2 ("logits"), from fresh caches: the main
      model over tokens 0..T-2, the head over every entry in one call (mlxrt logits --mtp).
"""
import argparse
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3_5, qwen3_next
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

NORMS = ("pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "norm.weight", "input_layernorm.weight",
         "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def decoder_layer(text_args):
    """The head's decoder layer: full attention, with the MLP the model's layers have."""
    if isinstance(text_args, qwen3_5.TextModelArgs):
        return qwen3_5.DecoderLayer(text_args, layer_idx=text_args.full_attention_interval - 1)
    layer = qwen3_next.Qwen3NextDecoderLayer(text_args, layer_idx=text_args.full_attention_interval - 1)
    sparse = 0 not in text_args.mlp_only_layers and text_args.num_experts > 0 and 1 % text_args.decoder_sparse_step == 0
    layer.mlp = (qwen3_next.Qwen3NextSparseMoeBlock(text_args) if sparse
                 else qwen3_next.Qwen3NextMLP(text_args.hidden_size, text_args.intermediate_size))
    return layer


class MTPHead(nn.Module):
    def __init__(self, text_args):
        super().__init__()
        h, eps = text_args.hidden_size, text_args.rms_norm_eps
        self.pre_fc_norm_embedding = nn.RMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(h, eps=eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = [decoder_layer(text_args)]
        self.norm = nn.RMSNorm(h, eps=eps)

    def __call__(self, embeds, hidden, cache):
        x = mx.concatenate([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], axis=-1)
        x = self.fc(x)
        for layer, c in zip(self.layers, cache):
            x = layer(x, create_attention_mask(x, c), c)
        return self.norm(x)

    def make_cache(self):
        return [KVCache() for _ in self.layers]


def text_parts(model):
    """(text args, the decoder returning final-norm hidden states, the head) of a qwen3_5 / qwen3_next Model."""
    if hasattr(model, "language_model"):
        lm = model.language_model
        head = lm.model.embed_tokens.as_linear if lm.args.tie_word_embeddings else lm.lm_head
        return lm.args, lm.model, head
    head = model.model.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head
    return model.args, model.model, head


def checkpoint_tensors(model_dir):
    out = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        out.update(mx.load(str(f)))
    return out


def load_head(model_dir, model):
    """The checkpoint's mtp.* tensors bound to an MTPHead (norms shifted by 1 in Hugging Face's layout)."""
    args, _, _ = text_parts(model)
    tensors = checkpoint_tensors(model_dir)
    hf_layout = any("conv1d.weight" in k and v.shape[-1] != 1 for k, v in tensors.items())
    weights = {}
    for k, v in tensors.items():
        if not k.startswith("mtp."):
            continue
        k = k[len("mtp."):]
        if hf_layout and v.ndim == 1 and k.endswith(NORMS):
            v = v + 1.0
        if k.endswith("mlp.experts.gate_up_proj"):  # Qwen3.5-MoE's fused experts: gate, then up, along -2
            mid = v.shape[-2] // 2
            prefix = k[: -len("experts.gate_up_proj")]
            weights[prefix + "switch_mlp.gate_proj.weight"] = v[..., :mid, :]
            weights[prefix + "switch_mlp.up_proj.weight"] = v[..., mid:, :]
            continue
        if k.endswith("mlp.experts.down_proj"):
            k = k[: -len("experts.down_proj")] + "switch_mlp.down_proj.weight"
        weights[k] = v
    if not weights:
        raise SystemExit(f"{model_dir}: no mtp.* tensors")
    head = MTPHead(args)
    head.load_weights(list(weights.items()), strict=True)
    mx.eval(head.parameters())
    return head


def draft_logits(model, head, ids):
    """The head's logits [T - 1, vocab]: entries j = 0..T-2 from fresh caches."""
    _, decoder, lm_head = text_parts(model)
    tokens = mx.array([ids], dtype=mx.int32)
    hidden = decoder(tokens[:, :-1], cache=model.make_cache())
    out = head(decoder.embed_tokens(tokens[:, 1:]), hidden, head.make_cache())
    return lm_head(out)[0]


def scale_layer_outputs(model, scale):
    """Scales what every decoder layer adds to the residual stream (its attention's and gated delta
    net's output projections, its MLP's down projection): with a small scale the main model's next
    token depends mostly on the current one, which a "bigram" head (add_head) then predicts."""
    updates = [(k, v * scale) for k, v in tree_flatten(model.parameters())
               if ".layers." in k and k.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight"))]
    model.load_weights(updates, strict=False)


def add_head(out_dir, model, recipe, dtype):
    """Writes an MTP head into the checkpoint at `out_dir` (model-mtp.safetensors, in the index):
    recipe {"seed": S, "mode": "random" | "bigram"}. random: mlx's initialisation, norms randomised
    around 1 as the fixtures' others. bigram: the head drafts from the token alone, as the main
    model would with no layers (fc reads only the embedding half, the layer adds nothing, the final
    norm is the main model's), so it agrees with a main model whose layers add little
    (scale_layer_outputs) often, but not always."""
    args, decoder, _ = text_parts(model)
    mx.random.seed(recipe["seed"])
    head = MTPHead(args)
    flat = dict(tree_flatten(head.parameters()))
    h = args.hidden_size
    for k, v in flat.items():
        if k.endswith(NORMS):
            flat[k] = 1.0 + 0.1 * mx.random.normal(v.shape)
    if recipe["mode"] == "bigram":
        flat["fc.weight"] = mx.concatenate([mx.eye(h), mx.zeros((h, h))], axis=1)
        for k in list(flat):
            if k.endswith(("self_attn.o_proj.weight", "down_proj.weight")):
                flat[k] = mx.zeros(flat[k].shape)
        flat["pre_fc_norm_embedding.weight"] = mx.ones((h,))
        flat["norm.weight"] = decoder.norm.weight
    elif recipe["mode"] != "random":
        raise ValueError(f"unknown MTP fixture mode {recipe['mode']!r}")
    tensors = {"mtp." + k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in flat.items()}
    out_dir = Path(out_dir)
    mx.save_safetensors(str(out_dir / "model-mtp.safetensors"), tensors, metadata={"format": "mlx"})
    index_path = out_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update({k: "model-mtp.safetensors" for k in tensors})
    index_path.write_text(json.dumps(index, indent=4))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--model", required=True)
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out", required=True)
    a = ap.parse_args()
    from mlx_lm.utils import load_model

    # strict=False: qwen3_next.py's sanitize keeps mtp.* tensors of an MLX-layout checkpoint
    model, _ = load_model(Path(a.model), strict=False)
    head = load_head(a.model, model)
    logits = draft_logits(model, head, [int(t) for t in a.tokens.split(",")])
    mx.save_safetensors(a.out, {"logits": logits})


if __name__ == "__main__":
    main()
