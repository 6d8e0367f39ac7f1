#!/usr/bin/env python3
"""mlx_lm.generate with a prompt given as token ids, for timing against `mlxrt generate`.

Loads the model and tokenizer as mlx_lm.generate does (mlx_lm.load), generates greedily with
mlx_lm's stream_generate, and prints what mlx_lm.generate (and `mlxrt generate` with a tokenizer
beside the model) prints: the text as it streams, then the footer (the same fields of the same
response objects).

Usage: mlx_lm_tokens.py --model DIR --prompt-tokens 1,2,3 [--max-tokens N] [--prefill-step-size N]
"""
import argparse
import sys

from mlx_lm import load, stream_generate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", required=True)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--prefill-step-size", type=int, default=2048)
    args = ap.parse_args()
    model, tokenizer = load(args.model)
    prompt = [int(t) for t in args.prompt_tokens.split(",")]
    print("==========", flush=True)
    response = None
    for response in stream_generate(model, tokenizer, prompt, max_tokens=args.max_tokens,
                                    prefill_step_size=args.prefill_step_size):
        sys.stdout.write(response.text)
        sys.stdout.flush()
    print("\n==========")
    if response is None:
        print("No text generated for this prompt")
        return
    print(f"Prompt: {response.prompt_tokens} tokens, {response.prompt_tps:.3f} tokens-per-sec")
    print(f"Generation: {response.generation_tokens} tokens, {response.generation_tps:.3f} tokens-per-sec")
    print(f"Peak memory: {response.peak_memory:.3f} GB")


if __name__ == "__main__":
    main()
