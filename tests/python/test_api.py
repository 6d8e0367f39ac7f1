"""The Python package `mlxrt` against mlx-lm 0.32.2 in the same process, on a tiny random llama with
Qwen3's tokenizer and chat template: mlx-lm's README examples run with only the import changed and
print the same text; seeded sampling with logits processors gives the same text; stream_generate's
fields are equal (logprobs byte-equal); model(tokens) logits are byte-equal, with and without a
prompt cache; the tokenizer encodes, decodes and renders chat templates as mlx-lm's does."""
import ast
import contextlib
import io
import re
import subprocess
import sys
import venv
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.generate import GenerationResponse
from mlx_lm.models.cache import make_prompt_cache as mlx_lm_make_prompt_cache
from mlx_lm.sample_utils import make_logits_processors as mlx_lm_processors
from mlx_lm.sample_utils import make_sampler as mlx_lm_sampler
from conftest import ROOT
from oracle import raw_bytes

import mlxrt
from mlxrt.models.cache import make_prompt_cache
from mlxrt.sample_utils import make_logits_processors, make_sampler

# mlx-lm's README examples (Python API section), verbatim but for the repository id.
README_GENERATE = '''
from mlx_lm import load, generate

model, tokenizer = load("mlx-community/Mistral-7B-Instruct-v0.3-4bit")

prompt = "Write a story about Einstein"

messages = [{"role": "user", "content": prompt}]
prompt = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True,
)

text = generate(model, tokenizer, prompt=prompt, verbose=True)
'''

README_STREAM = '''
from mlx_lm import load, stream_generate

repo = "mlx-community/Mistral-7B-Instruct-v0.3-4bit"
model, tokenizer = load(repo)

prompt = "Write a story about Einstein"

messages = [{"role": "user", "content": prompt}]
prompt = tokenizer.apply_chat_template(
    messages, add_generation_prompt=True,
)

for response in stream_generate(model, tokenizer, prompt, max_tokens=512):
    print(response.text, end="", flush=True)
print()
'''

SPEEDS = re.compile(r"[0-9.]+ tokens-per-sec|Peak memory: [0-9.]+ GB")


def run_example(source, model_dir, package):
    source = source.replace("mlx-community/Mistral-7B-Instruct-v0.3-4bit", str(model_dir))
    if package == "mlxrt":
        source = source.replace("from mlx_lm import", "from mlxrt import")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"<readme:{package}>", "exec"), {})
    return out.getvalue()


@pytest.mark.parametrize("example", [README_GENERATE, README_STREAM], ids=["generate", "stream_generate"])
def test_readme_examples_print_what_mlx_lm_prints(chat_model, example):
    want = run_example(example, chat_model, "mlx_lm")
    got = run_example(example, chat_model, "mlxrt")
    assert len(want) > 20
    assert SPEEDS.sub("", got) == SPEEDS.sub("", want)


@pytest.fixture(scope="module")
def loaded(chat_model):
    return mlx_lm.load(str(chat_model)), mlxrt.load(str(chat_model))


def test_seeded_generation_equals_mlx_lm(chat_model):
    """Seeded before load, as a script would: the sampler's first key comes after mlx-lm's model
    construction draws, so load() must advance mx.random.state the same way."""
    prompt = "Tell me a story about the sea."
    kwargs = lambda sampler, procs: dict(
        sampler=sampler(temp=0.9, top_p=0.95, min_p=0.02, top_k=40),
        logits_processors=procs(logit_bias={13: 1.5}, repetition_penalty=1.2, presence_penalty=0.3),
    )
    texts = []
    for package, sampler, procs in ((mlx_lm, mlx_lm_sampler, mlx_lm_processors),
                                    (mlxrt, make_sampler, make_logits_processors)):
        mx.random.seed(11)
        model, tokenizer = package.load(str(chat_model))
        texts.append(package.generate(model, tokenizer, prompt, max_tokens=48, **kwargs(sampler, procs)))
        texts.append(package.generate(model, tokenizer, prompt, max_tokens=48, **kwargs(sampler, procs)))
    assert texts[0] and texts[0] != texts[1]  # the second run continues the key sequence
    assert texts[2:] == texts[:2]


FIELDS = ["text", "token", "from_draft", "prompt_tokens", "generation_tokens", "finish_reason"]


def responses(package, model, tokenizer, prompt, **kwargs):
    return [(tuple(getattr(r, f) for f in FIELDS), raw_bytes(r.logprobs), r.logprobs.shape)
            for r in package.stream_generate(model, tokenizer, prompt, **kwargs)]


def test_stream_generate_fields_equal(loaded):
    (ref_model, ref_tok), (model, tok) = loaded
    ids = ref_tok.encode("The weather today")
    scale = lambda tokens, logits: logits / 1.5  # a Python processor after the library's own
    want = responses(mlx_lm, ref_model, ref_tok, ids, max_tokens=12,
                     logits_processors=mlx_lm_processors(frequency_penalty=0.5) + [scale])
    got = responses(mlxrt, model, tok, ids, max_tokens=12,
                    logits_processors=make_logits_processors(frequency_penalty=0.5) + [scale])
    assert len(want) == 12 and want[-1][0][-1] == "length"
    assert got == want
    # An eos id forced by a logit bias ends generation at once with "stop" and no text.
    eos = ref_tok.eos_token_id
    want = responses(mlx_lm, ref_model, ref_tok, mx.array(ids), logits_processors=mlx_lm_processors(logit_bias={eos: 1e4}))
    got = responses(mlxrt, model, tok, mx.array(ids), logits_processors=make_logits_processors(logit_bias={eos: 1e4}))
    assert got == want and want[0][0][-1] == "stop"
    fields = set(mlxrt.GenerationResponse.__dataclass_fields__)
    assert fields == set(GenerationResponse.__dataclass_fields__)


def test_logits_byte_equal(loaded):
    (ref_model, _), (model, _) = loaded
    tokens = mx.array([[9707, 11, 1879, 0, 42, 151643, 7]])
    want, got = ref_model(tokens), model(tokens)
    assert type(got) is mx.array
    assert got.shape == want.shape and got.dtype == want.dtype
    assert raw_bytes(got) == raw_bytes(want)
    # With a prompt cache: a prefill, then one token at a time.
    ref_cache, cache = mlx_lm_make_prompt_cache(ref_model), make_prompt_cache(model)
    assert len(cache) == len(ref_cache)
    for chunk in (tokens[:, :5], tokens[:, 5:6], tokens[:, 6:]):
        assert raw_bytes(model(chunk, cache=cache)) == raw_bytes(ref_model(chunk, cache=ref_cache))
    assert cache.offset == ref_cache[0].offset == 7


def test_tokenizer_equals_mlx_lm(loaded):
    (_, ref), (_, tok) = loaded
    texts = ["Hello, world!", "  spaces\tand\nnewlines ", "<|im_start|>user\nhé 日本語<|im_end|>", ""]
    for text in texts:
        assert tok.encode(text) == ref.encode(text)
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False)
        ids = ref.encode(text)
        assert tok.decode(ids) == ref.decode(ids)
        assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a color."}]
    for kwargs in ({}, {"add_generation_prompt": True}, {"add_generation_prompt": True, "enable_thinking": True},
                   {"continue_final_message": True}):
        assert tok.apply_chat_template(messages, tokenize=False, **kwargs) == \
            ref.apply_chat_template(messages, tokenize=False, **kwargs)
        assert tok.apply_chat_template(messages, **kwargs) == ref.apply_chat_template(messages, **kwargs)
    assert tok.eos_token_ids == ref.eos_token_ids and tok.eos_token_id == ref.eos_token_id
    assert tok.bos_token == ref.bos_token and len(tok) == len(ref)
    detok = tok.detokenizer
    for t in ref.encode("streamed text, 日本"):
        detok.add_token(t)
    detok.finalize()
    assert detok.text == "streamed text, 日本"


BATCH_PROMPTS = ["Tell me a story about the sea.", "Hi", "Write a list of three fruits and their colors", "Why?"]


def test_batch_generate_equals_mlx_lm(loaded):
    """Four prompts of different lengths and budgets, two prefilled at a time into a batch of three
    (rows join as others leave): greedy, then a seeded sampler with logits processors, each row's
    text, tokens and log-probabilities equal to mlx-lm's batch_generate."""
    (ref_model, ref_tok), (model, tok) = loaded
    prompts = [ref_tok.encode(p) for p in BATCH_PROMPTS]
    common = dict(max_tokens=[24, 9, 31, 16], return_token_ids=True, return_logprobs=True,
                  prefill_batch_size=2, completion_batch_size=3)
    runs = [(lambda pkg, sampler, procs: {}, None),
            (lambda pkg, sampler, procs: dict(sampler=sampler(temp=0.9, top_p=0.95, top_k=40),
                                              logits_processors=procs(logit_bias={13: 1.5}, repetition_penalty=1.2)),
             5)]
    for make_kwargs, seed in runs:
        got = []
        for package, m, t, sampler, procs in ((mlx_lm, ref_model, ref_tok, mlx_lm_sampler, mlx_lm_processors),
                                              (mlxrt, model, tok, make_sampler, make_logits_processors)):
            if seed is not None:
                mx.random.seed(seed)
            r = package.batch_generate(m, t, prompts, **common, **make_kwargs(package, sampler, procs))
            got.append((r.texts, r.token_ids, r.logprobs))
        assert got[1] == got[0]
        assert all(got[0][1]) and len(got[0][1][2]) > 9


def test_what_is_not_provided_says_so(loaded):
    _, (model, tok) = loaded
    with pytest.raises(NotImplementedError, match="batch_generate.prompt_caches"):
        mlxrt.batch_generate(model, tok, [[1, 2, 3]], prompt_caches=[[]])
    with pytest.raises(NotImplementedError, match="model.layers"):
        model.layers
    with pytest.raises(NotImplementedError, match="tokenizer.batch_decode"):
        tok.batch_decode([[1]])
    with pytest.raises(NotImplementedError, match="model_config"):
        mlxrt.load("unused", model_config={"x": 1})
    with pytest.raises(ValueError, match="top_p"):
        make_sampler(temp=1.0, top_p=1.5)


def test_type_stub_covers_the_api():
    stub = Path(mlxrt.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    assert set(mlxrt.__all__) <= names
    assert (Path(mlxrt.__file__).parent / "py.typed").exists()


# `pip install .` from the source tree, as a user without `make` would: pip builds a wheel with
# scikit-build-core in its isolated build environment (the pinned mlx and nanobind from the package
# index; CMake configures only the extension module and the libraries it links), the wheel installs
# into a fresh virtual environment beside the pinned mlx with its CPU backend, and there `import
# mlxrt` loads a model and generates the text mlx-lm generates. Long (`make test-long`): the wheel
# build compiles the libraries once more, in its own build folder.
WHEEL_PROMPT = "hello there"
WHEEL_SCRIPT = """
import sys
import mlxrt
model, tokenizer = mlxrt.load(sys.argv[1])
print(mlxrt.generate(model, tokenizer, prompt=sys.argv[2], max_tokens=12), end="")
"""


def pinned(name):
    for line in (ROOT / "versions.env").read_text().splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"versions.env has no {name}")


def run_checked(*args, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.long
def test_pip_install_builds_a_wheel_that_generates_mlx_lm_text(tmp_path, chat_model):
    wheels = tmp_path / "wheels"
    run_checked(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-w", wheels)
    (wheel,) = wheels.glob("mlxrt-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    mlx_version = pinned("MLX_VERSION")
    run_checked(python, "-m", "pip", "install", "-q", f"mlx=={mlx_version}", f"mlx-cpu=={mlx_version}", wheel)

    # Run outside the source tree, so that only the installed package can be imported.
    ours = run_checked(python, "-c", WHEEL_SCRIPT, chat_model, WHEEL_PROMPT, cwd=tmp_path).stdout
    model, tokenizer = mlx_lm.load(str(chat_model))
    assert ours == mlx_lm.generate(model, tokenizer, prompt=WHEEL_PROMPT, max_tokens=12)
