"""Real-weights sanity and L1 for `mlxrt perplexity` (mlx_lm.perplexity's flags): on a fixed English
paragraph the converted SmolLM2-135M-Instruct scores a perplexity far below a random model of the
same shape (45.617 against 78934.590), and the report, every token's loss and the evaluated tokens
equal mlx_lm.perplexity's own computation on the same text (tools/perplexity_oracle.py)."""
import json
import shutil

import mlx.core as mx
import pytest

import oracle
from conftest import ROOT, run_mlxrt, run_python

PARAGRAPH = (
    "The river town wakes slowly in winter. Before sunrise, the baker lights the ovens and the smell of "
    "fresh bread drifts along the narrow streets. Fishermen check their nets by lantern light, talking "
    "quietly about the weather and the price of fuel. By eight o'clock the school bell rings, and children "
    "run across the old stone bridge, their breath white in the cold air. Most shops open at nine. The "
    "library, which was built more than a hundred years ago, keeps a small collection of local history: "
    "maps of the river, photographs of floods, and letters written by the families who first settled here. "
    "In the afternoon the market square fills with farmers selling apples, potatoes and cheese. When the "
    "light fades, people gather in the cafe by the water to share news, play cards and drink hot tea. "
    "Visitors often say that nothing ever happens in the town, but the people who live there know that "
    "every day brings its own small stories, and they would not trade their quiet life for anything."
)

TIMING = ("Evaluation time:", "Peak memory:", "Tokens per second:")
FLAGS = ["--sequence-length", 64, "--num-samples", 3, "--batch-size", 2, "--seed", 5]  # 192 of its 204 tokens


def report(stdout):
    """The printed report without its timing and memory lines."""
    return [line for line in stdout.split("\n") if not line.startswith(TIMING)]


def perplexity_of(stdout):
    line = next(line for line in stdout.split("\n") if line.startswith("Perplexity: "))
    return float(line.split()[1])


def compare_with_mlx_lm(model, source_flag, source, flags, tmp_path):
    ours_file, theirs_file = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    ours = run_mlxrt("perplexity", "--model", model, source_flag, source, *flags, "--losses-file", ours_file).stdout
    oracle_flag = "--text-file" if source_flag == "--text-file" else "--rows"
    theirs = run_python(ROOT / "tools" / "perplexity_oracle.py", oracle_flag, source, "--record", theirs_file,
                        "--model", model, *map(str, flags)).stdout
    assert report(ours) == report(theirs), f"ours:\n{ours}\nmlx-lm:\n{theirs}"
    got, want = mx.load(str(ours_file)), mx.load(str(theirs_file))
    assert got["tokens"].dtype == want["tokens"].dtype and got["tokens"].tolist() == want["tokens"].tolist()
    assert got["losses"].dtype == want["losses"].dtype == mx.float32
    assert oracle.raw_bytes(got["losses"]) == oracle.raw_bytes(want["losses"]), "token losses differ"
    return ours


@pytest.fixture(scope="module")
def paragraph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "paragraph.txt"
    path.write_text(PARAGRAPH, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def random_smollm2(smollm2, tmp_path_factory):
    """A random-initialised model of the converted checkpoint's shape and quantization, made by
    mlx-lm, with the same tokenizer files."""
    import mlx.nn as nn  # noqa: F401
    from mlx_lm import utils as lm_utils

    out = tmp_path_factory.mktemp("random") / "smollm2_random"
    config = json.loads((smollm2 / "config.json").read_text())
    quant = config.pop("quantization")
    config.pop("quantization_config", None)
    mx.random.seed(0)
    model_class, args_class = lm_utils._get_classes(config=config)
    model = model_class(args_class.from_dict(config))
    overrides = {k: v for k, v in quant.items() if isinstance(v, dict)}
    model, config = lm_utils.quantize_model(
        model, config, quant["group_size"], quant["bits"],
        quant_predicate=lambda path, module: overrides.get(path, True))
    lm_utils.save_model(out, model)
    lm_utils.save_config(config, config_path=out / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(smollm2 / name, out / name)
    yield out
    shutil.rmtree(out)


@pytest.mark.long  # the L1 of the verb is test_rows_sampled_as_mlx_lm_samples_them
def test_real_weights_far_below_random(smollm2, random_smollm2, paragraph_file, tmp_path):
    real = compare_with_mlx_lm(smollm2, "--text-file", paragraph_file, FLAGS, tmp_path)
    random = run_mlxrt("perplexity", "--model", random_smollm2, "--text-file", paragraph_file, *FLAGS).stdout
    real_ppl, random_ppl = perplexity_of(real), perplexity_of(random)
    print(f"perplexity on the paragraph: converted SmolLM2-135M-Instruct {real_ppl:.3f}, "
          f"random model of the same shape {random_ppl:.3f}")
    print(real)
    assert real_ppl < 100 and random_ppl > 10000 and real_ppl * 100 < random_ppl


def test_rows_sampled_as_mlx_lm_samples_them(smollm2, tmp_path):
    """Several rows: numpy's permutation (seeded) decides their order, each row gets its eos, and
    the last batch is partial."""
    rows = tmp_path / "rows.jsonl"
    sentences = [s.strip() + "." for s in PARAGRAPH.split(".") if s.strip()]
    rows.write_text("".join(json.dumps({"text": s}) + "\n" for s in sentences), encoding="utf-8")
    compare_with_mlx_lm(smollm2, "--data-path", rows,
                        ["--sequence-length", 24, "--num-samples", 7, "--batch-size", 2, "--seed", 1234], tmp_path)


def test_data_errors(smollm2, tmp_path):
    proc = run_mlxrt("perplexity", "--model", smollm2, check=False)  # the default, a Hugging Face dataset
    assert proc.returncode == 1, proc.stderr
    assert "--data-path allenai/tulu-3-sft-mixture: this looks like a Hugging Face dataset id" in proc.stderr
    assert ".jsonl" in proc.stderr, proc.stderr  # the local formats it takes instead
    short = tmp_path / "short.txt"
    short.write_text("Too short.")
    proc = run_mlxrt("perplexity", "--model", smollm2, "--text-file", short, "--num-samples", -1, check=False)
    assert proc.returncode == 1 and "fewer than one row of --sequence-length 512" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    proc = run_mlxrt("perplexity", "--model", smollm2, "--data-path", bad, check=False)
    assert proc.returncode == 1 and 'bad.jsonl:1: expected an object with a string "text" field' in proc.stderr
