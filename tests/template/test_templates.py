"""Chat templates rendered by `mlxrt template` must equal transformers' apply_chat_template, byte for
byte, for every real template in shared/data (the .jinja files, the templates inside the tokenizer
configs, the golden fixtures) over a fixed message set; when transformers raises, mlxrt must fail.
The oracle runs here, in the same test run: transformers' own apply_chat_template, on a tokenizer
built locally (no network)."""
import json
import os
import pathlib
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tokenizers import Tokenizer, models  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

BIN = os.environ["MLXRT_BIN"]
DATA = pathlib.Path(os.environ["MLXRT_SHARED_DIR"]) / "data"

# Special tokens given to the bare .jinja templates (real models' configs give their own).
SPECIALS = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "unk_token": "<unk>", "pad_token": "<|pad|>"}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
            "required": ["query"]}}},
]

TOOL_CALL = {"id": "call_0001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
TOOL_CALL_STR = {"id": "call_0002", "type": "function",
                 "function": {"name": "search", "arguments": "{\"query\": \"mlx \\\"runtime\\\"\", \"max_results\": 3}"}}

MESSAGE_SETS = {
    "single": ([{"role": "user", "content": "Hello Café 世界 👋"}], None),
    "multi": ([
        {"role": "system", "content": "You are a helpful assistant.\nAnswer briefly."},
        {"role": "user", "content": "  What is 2+2?  "},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 'why' is that \"so\"?\n\nExplain."},
    ], None),
    "tools": ([
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
        {"role": "user", "content": "Now search for mlx."},
    ], TOOLS),
    "tools_no_system": ([
        {"role": "user", "content": "Search for mlx."},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_STR]},
        {"role": "tool", "tool_call_id": "call_0002", "content": "3 results"},
    ], TOOLS),
    "reasoning": ([
        {"role": "user", "content": "Think, then answer: 3*3?"},
        {"role": "assistant", "content": "9", "reasoning_content": "3 times 3 is 9."},
        {"role": "user", "content": "Thanks"},
    ], None),
    "parts": ([
        {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this."}]},
    ], None),
}


def bare_tokenizer(template, specials):
    vocab = {"<unk>": 0}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template, **specials)


def template_sources():
    """(id, model_dir_maker, tokenizer) for every template under test."""
    out = []
    for path in sorted((DATA / "chat-templates").glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        out.append((path.stem, {"chat_template.jinja": source, "tokenizer_config.json": json.dumps(SPECIALS)},
                    bare_tokenizer(source, SPECIALS)))
    for cfg in sorted((DATA / "tokenizers").glob("*/tokenizer_config.json")):
        if "chat_template" not in json.loads(cfg.read_text(encoding="utf-8")):
            continue
        out.append(("config-" + cfg.parent.name, cfg.parent, AutoTokenizer.from_pretrained(str(cfg.parent))))
    return out


def make_dir(root, name, spec):
    if isinstance(spec, pathlib.Path):
        return spec
    d = pathlib.Path(root) / name
    d.mkdir()
    for fname, text in spec.items():
        (d / fname).write_text(text, encoding="utf-8")
    return d


def oracle(tokenizer, messages, tools, agp, kwargs):
    try:
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=agp, tokenize=False,
                                             **kwargs), None
    except Exception as e:  # the template (or transformers) refused the input
        return None, f"{type(e).__name__}: {e}"


def run_mlxrt(model_dir, messages_file, tools_file, agp, kwargs):
    cmd = [BIN, "template", "--model", str(model_dir), "--messages", str(messages_file)]
    if tools_file:
        cmd += ["--tools", str(tools_file)]
    if agp:
        cmd.append("--add-generation-prompt")
    if kwargs:
        cmd += ["--template-args", json.dumps(kwargs)]
    p = subprocess.run(cmd, capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8", "replace")


def build_cases(root):
    cases = []
    files = {}
    for name, (messages, tools) in MESSAGE_SETS.items():
        m = pathlib.Path(root) / f"messages-{name}.json"
        m.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
        t = None
        if tools is not None:
            t = pathlib.Path(root) / f"tools-{name}.json"
            t.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
        files[name] = (m, t)
    for tid, spec, tokenizer in template_sources():
        model_dir = make_dir(root, tid, spec)
        template_text = tokenizer.get_chat_template()
        thinking = [{}] + ([{"enable_thinking": True}, {"enable_thinking": False}]
                           if "enable_thinking" in template_text else [])
        for name, (messages, tools) in MESSAGE_SETS.items():
            for agp in (False, True):
                for kwargs in thinking:
                    cases.append((f"{tid}/{name}/agp={agp}/{kwargs}", tokenizer, model_dir, messages, tools,
                                  files[name], agp, kwargs))
    return cases


def first_difference(want, got):
    i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
    return f"\n  at {i}: want={want[max(0, i - 40):i + 60]!r}\n        got ={got[max(0, i - 40):i + 60]!r}"


def test_templates_match_transformers():
    with tempfile.TemporaryDirectory() as root:
        cases = build_cases(root)
        expected = [oracle(c[1], c[3], c[4], c[6], c[7]) for c in cases]

        def run(case):
            _, _, model_dir, _, _, (mf, tf), agp, kwargs = case
            return run_mlxrt(model_dir, mf, tf, agp, kwargs)

        with ThreadPoolExecutor(max_workers=2) as pool:
            got = list(pool.map(run, cases))
    failures = []
    for case, (want, err), (rc, out, stderr) in zip(cases, expected, got):
        if err is None:
            if rc != 0 or out != want:
                failures.append(f"{case[0]}: rc={rc} {stderr.strip()[:300]}" + first_difference(want, out))
        elif rc == 0:
            failures.append(f"{case[0]}: transformers raised ({err[:200]}) but mlxrt rendered {out[:200]!r}")
        elif not stderr.startswith("error: "):
            failures.append(f"{case[0]}: expected a one-line error, got rc={rc} stderr={stderr[:300]!r}")
    assert len(cases) > 300
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures[:40])


def golden_dir(root, model):
    d = pathlib.Path(root) / model
    d.mkdir()
    src = DATA / "chat-template-goldens" / model
    (d / "chat_template.jinja").write_bytes((src / "chat_template.jinja").read_bytes())
    cfg = src / "tokenizer_config.json"
    if not cfg.exists():
        cfg = DATA / "tokenizers" / model / "tokenizer_config.json"
    config = json.loads(cfg.read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def test_golden_cases():
    cases = json.loads((DATA / "chat-template-goldens" / "cases.json").read_text(encoding="utf-8"))
    assert len(cases) == 30
    with tempfile.TemporaryDirectory() as root:
        dirs = {}
        failures = []
        for i, case in enumerate(cases):
            model = case["model"]
            if model not in dirs:
                dirs[model] = golden_dir(root, model)
            mf = pathlib.Path(root) / f"golden-{i}.json"
            mf.write_text(json.dumps(case["messages"], ensure_ascii=False), encoding="utf-8")
            rc, out, stderr = run_mlxrt(dirs[model], mf, None, case["add_generation_prompt"], case["kwargs"])
            if rc != 0 or out != case["expected"]:
                failures.append(f"case {i} ({model}): rc={rc} {stderr.strip()[:300]}\n want={case['expected']!r}\n"
                                f" got ={out!r}")
    assert not failures, "\n".join(failures)


def test_cli_errors_name_the_input():
    with tempfile.TemporaryDirectory() as root:
        d = pathlib.Path(root) / "m"
        d.mkdir()
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in messages %}{{ m.content }"}))
        mf = pathlib.Path(root) / "msgs.json"
        mf.write_text('[{"role": "user",\n "content": }]')
        rc, out, err = run_mlxrt(d, mf, None, False, {})
        assert rc != 0 and out == ""
        assert "--messages" in err and "msgs.json:2:" in err, err
        mf.write_text('[{"role": "user", "content": "hi"}]')
        rc, out, err = run_mlxrt(d, mf, None, False, {})
        assert rc != 0 and out == "" and "tokenizer_config.json:1:" in err, err
        (d / "tokenizer_config.json").write_text(json.dumps(
            {"chat_template": "line1\n{{ raise_exception('no system role') }}"}))
        rc, out, err = run_mlxrt(d, mf, None, False, {})
        assert rc != 0 and "tokenizer_config.json:2:" in err and "no system role" in err, err
        p = subprocess.run([BIN, "template", "--model", str(d), "--messages", str(mf), "--template-args", "{oops"],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "--template-args:1:" in p.stderr, p.stderr
