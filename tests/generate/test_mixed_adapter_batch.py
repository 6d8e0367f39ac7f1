"""Mixed-adapter batches (ours; mlx-lm batches one adapter at a time): `mlxrt batch-generate
--adapters NAME=DIR ...` with each request naming its adapter ("" or none: the plain model) runs
rows of different adapters in one batch. Each row's tokens and logprobs equal those of mlx-lm's
BatchGenerator running the same requests with every row on that row's adapter (and, for plain
rows, on the plain model): the selection between adapters never changes a byte. Covered: LoRA on
every layer, DoRA on the last layer, LoRA on the tied embedding (its rows and the head), on a bf16
and a 4-bit base, and LoRA on a mixture of experts' switch layers; greedy and seeded sampling; the batch-invariant mode; bad names and adapters
that cannot share a batch refused with a clear message."""
import json

import pytest
from batch_oracle import batch_tokens
from conftest import FIXTURES, fixture_lock, make_fixture, run_mlxrt

EOS = 2  # the fixtures' eos_token_id

PROMPTS = [
    {"prompt_tokens": [1, 5, 9, 200, 33, 17, 8, 91, 140, 7, 64], "max_tokens": 14},
    {"prompt_tokens": [1, 44], "max_tokens": 9},
    {"prompt_tokens": [3], "max_tokens": 12},
    {"prompt_tokens": [1, 300, 301, 302, 11, 12], "max_tokens": 16},
    {"prompt_tokens": [1, 17, 300, 42], "max_tokens": 11},
]
# The fixture's own adapter plus two more trained here on the same base.
EXTRA = {"dora_last": {"type": "dora", "num_layers": 1, "seed": 31, "lr": 5e-2},
         "embed": {"type": "lora", "num_layers": 1, "seed": 32, "lr": 5e-2,
                   "keys": ["model.embed_tokens", "mlp.up_proj"]}}
# A mixture of experts too (float32: MLX's CPU gather_mm takes no other dtype): its own adapter is LoRA
# on the experts' switch layers, the router and attention; the prefill's many (token, expert) pairs go
# through the sorted gather, where each pair finds its row through its token.
BASES = ["qwen3_bf16_lora", "qwen3_q4_g64_dora", "qwen3_moe_fp32_lora"]
MOE_EXTRA = {"attn_only": {"type": "lora", "num_layers": 2, "seed": 33, "lr": 5e-2,
                           "keys": ["self_attn.q_proj", "self_attn.v_proj"]},
             "experts": {"type": "lora", "num_layers": 1, "seed": 34, "lr": 5e-2}}


def adapters_of(base):
    """{name: dir}: the fixture's adapter as "own" and the EXTRA adapters trained on its model."""
    import make_fixtures
    from mlx_lm.utils import load_model

    model_dir = make_fixture(base)
    out = {"own": model_dir / "adapter"}
    for name, spec in (MOE_EXTRA if "moe" in base else EXTRA).items():
        path = FIXTURES / "mixed_adapters" / base / name
        stamp = path / "adapter-fixture.json"
        want = json.dumps({**spec, "model": str(model_dir)}, sort_keys=True)
        with fixture_lock():
            if not (stamp.exists() and stamp.read_text() == want):
                model, config = load_model(model_dir)
                make_fixtures.train_adapter(model, config, path, spec)
                stamp.write_text(want)
        out[name] = path
    return model_dir, out


def ours(model, requests, adapters, tmp_path, *flags):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": requests}))
    spec = [f"{n}={d}" for n, d in adapters.items()]
    out = run_mlxrt("batch-generate", "--model", model, "--requests", path,
                    *(["--adapters", *spec] if spec else []), *flags).stdout
    return [(r["tokens"], r["logprobs"], r["finish_reason"]) for r in map(json.loads, out.splitlines())]


def assign(requests, names):
    return [{**r, "adapter": n} for r, n in zip(requests, names)]


@pytest.mark.parametrize("base", BASES)
def test_each_row_equals_mlx_lm_batch_on_its_adapter(base, tmp_path):
    model_dir, adapters = adapters_of(base)
    names = ["own", "", *[n for n in adapters if n != "own"], "own"]
    mixed = ours(model_dir, assign(PROMPTS, names), adapters, tmp_path)
    for name in sorted(set(names)):
        want = batch_tokens(model_dir, PROMPTS, [EOS], adapter_path=adapters[name] if name else None)
        for i, n in enumerate(names):
            if n == name:
                assert mixed[i] == want[i], f"row {i} (adapter '{n}') differs from mlx-lm's batch on that adapter"
    # The adapters change the answers: otherwise the check above could not tell them apart.
    plain = batch_tokens(model_dir, PROMPTS, [EOS])
    assert sum(mixed[i] != plain[i] for i, n in enumerate(names) if n) >= 2


def test_sampled_rows_equal_their_single_adapter_batch(tmp_path):
    """With the same seed, a mixed batch samples each row as the same batch all on that row's adapter.
    The rows draw from one PRNG in row order, so they must leave the batch at the same steps in
    both runs: eos is biased away and every row runs to its max_tokens."""
    model_dir, adapters = adapters_of("qwen3_bf16_lora")
    names = ["dora_last", "own", "", "own", "embed"]
    flags = ["--seed", "7", "--temp", "0.9", "--top-p", "0.95"]
    sampled = [{**r, "sampler": {"temp": 0.9, "top_p": 0.95}, "logits_processors": {"logit_bias": {str(EOS): -1e9}}}
               for r in PROMPTS]
    mixed = ours(model_dir, assign(sampled, names), adapters, tmp_path, *flags)
    for name in set(names):
        alone = ours(model_dir, assign(sampled, [name] * len(PROMPTS)), adapters, tmp_path, *flags)
        for i, n in enumerate(names):
            if n == name:
                assert mixed[i] == alone[i], f"row {i} (adapter '{n}')"


def test_batch_invariant_rows_equal_generate_with_the_adapter(tmp_path):
    """--batch-invariant: each row of a mixed batch equals `mlxrt generate --adapter-path` of its request."""
    model_dir, adapters = adapters_of("qwen3_bf16_lora")
    names = ["embed", "", "own", "dora_last", "own"]
    mixed = ours(model_dir, assign(PROMPTS, names), adapters, tmp_path, "--batch-invariant")
    for i, (r, n) in enumerate(zip(PROMPTS, names)):
        proc = run_mlxrt("generate", "--model", model_dir, "--prompt-tokens", ",".join(map(str, r["prompt_tokens"])),
                         "-m", r["max_tokens"], *(["--adapter-path", adapters[n]] if n else []))
        tokens = [int(t) for t in proc.stdout.split("==========\n")[1].split()]
        assert tokens and mixed[i][0] == tokens, f"row {i} (adapter '{n}')"


def test_bad_adapter_names_and_unmixable_adapters(tmp_path):
    model_dir, adapters = adapters_of("qwen3_bf16_lora")
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"requests": assign(PROMPTS[:2], ["own", "nope"])}))
    proc = run_mlxrt("batch-generate", "--model", model_dir, "--requests", path, "--adapters",
                     f"own={adapters['own']}", check=False)
    assert proc.returncode != 0 and "requests[1].adapter: 'nope' is not one of --adapters" in proc.stderr
    proc = run_mlxrt("batch-generate", "--model", model_dir, "--requests", path, "--adapters",
                     f"own={adapters['own']}", f"own={adapters['embed']}", check=False)
    assert proc.returncode != 0 and "the name 'own' is given twice" in proc.stderr
    proc = run_mlxrt("batch-generate", "--model", model_dir, "--requests", path, "--adapters", "own", check=False)
    assert proc.returncode != 0 and "expected NAME=DIR" in proc.stderr
    # A full fine-tune carries its own copy of base tensors: it cannot share a batch, and says so.
    full = tmp_path / "full"
    full.mkdir()
    (full / "adapter_config.json").write_text(json.dumps({"fine_tune_type": "full", "num_layers": 2}))
    import mlx.core as mx
    mx.save_safetensors(str(full / "adapters.safetensors"),
                        {"model.norm.weight": mx.load(str(model_dir / "model.safetensors"))["model.norm.weight"]})
    proc = run_mlxrt("batch-generate", "--model", model_dir, "--requests", path, "--adapters", f"own={full}",
                     check=False)
    assert proc.returncode != 0 and "cannot share a batch" in proc.stderr and "full fine-tune" in proc.stderr
