#!/usr/bin/env python3
"""mlx_lm.perplexity's own main() on local data, for the parity tests of `mlxrt perplexity`.

mlx-lm reads its evaluation text from a Hugging Face dataset (load_dataset); here that one call is
replaced by a TextDataset of local rows, and everything else is mlx-lm's: the permutation, the
batching, the loss and the printed report. The losses of every batch (recorded as
mlx.nn.losses.cross_entropy returns them) and the evaluated tokens are written to --record.

Usage: perplexity_oracle.py (--text-file FILE | --rows FILE.jsonl) --record OUT.safetensors
                            [mlx_lm.perplexity flags...]
"""
import argparse
import json
import sys

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import perplexity
from mlx_lm.tuner.datasets import TextDataset


def main():
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text-file", help="a plain text file, one row")
    source.add_argument("--rows", help="a JSONL file of {\"text\": ...} rows")
    parser.add_argument("--record", required=True)
    ours, theirs = parser.parse_known_args()
    if ours.text_file:
        with open(ours.text_file, encoding="utf-8", newline="") as f:
            rows = [{"text": f.read()}]
    else:
        with open(ours.rows, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]

    perplexity.load_dataset = lambda args, tokenizer: (TextDataset(rows, tokenizer), [], [])
    recorded = {"losses": []}
    cross_entropy, eval_ppl = nn.losses.cross_entropy, perplexity.eval_ppl

    def recording_cross_entropy(*args, **kwargs):
        out = cross_entropy(*args, **kwargs)
        recorded["losses"].append(out)
        return out

    def recording_eval_ppl(model, data, batch_size=8):
        recorded["tokens"] = data
        return eval_ppl(model, data, batch_size=batch_size)

    nn.losses.cross_entropy = recording_cross_entropy
    perplexity.eval_ppl = recording_eval_ppl
    sys.argv = ["mlx_lm.perplexity", *theirs]
    perplexity.main()
    losses = mx.concatenate([batch.flatten() for batch in recorded["losses"]])
    mx.save_safetensors(ours.record, {"losses": losses, "tokens": recorded["tokens"]})


if __name__ == "__main__":
    main()
