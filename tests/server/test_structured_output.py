"""Structured output (constrained decoding) on the tiny qwen3 model with the real Qwen3 vocabulary:
response_format json_schema / json_object in chat and completions, text.format in the Responses
API, and `mlxrt generate --json-schema / --grammar`. Sampling at temperature 1 with a seed (a random
model at high temperature is the hardest case for a mask): every output must finish by itself,
parse, and validate against its schema (the jsonschema package). Schemas with keywords the engine
would not enforce are refused with a 400 naming the keyword."""
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import mlx.core as mx
import numpy as np
import pytest

from conftest import FIXTURES, MLXRT_BIN, SOURCE, start_mlxrt, stop

sys.path.insert(0, str(SOURCE / "tools"))
import make_server_fixture  # noqa: E402

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

# Real-world shapes: nested objects, arrays of objects, enums, anyOf, nullable types, string formats,
# $ref into $defs, numeric bounds, additionalProperties.
SCHEMAS = {
    "nested_objects": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20},
                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
            },
        },
        "required": ["name", "age", "address"],
    },
    "array_of_enums": {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array", "minItems": 1, "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {"title": {"type": "string", "maxLength": 16},
                                   "status": {"enum": ["open", "done", "blocked"]},
                                   "priority": {"type": "integer", "enum": [1, 2, 3]}},
                    "required": ["title", "status", "priority"],
                },
            },
        },
        "required": ["todos"],
    },
    "any_of_nullable": {
        "type": "object",
        "properties": {
            "value": {"anyOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "null"}]},
            "note": {"type": ["string", "null"], "maxLength": 12},
            "kind": {"const": "measurement"},
        },
        "required": ["value", "note", "kind"],
        "additionalProperties": False,
    },
    "string_formats": {
        "type": "object",
        "properties": {
            # (bounded formats: an unbounded one such as "email" may run past max_tokens at temperature 1)
            "day": {"type": "string", "format": "date"},
            "id": {"type": "string", "format": "uuid"},
            # (xgrammar's own ipv4 pattern allows leading zeros; ours is the standard's)
            "ip": {"type": "string", "format": "ipv4"},
        },
        "required": ["day", "id", "ip"],
    },
    "refs": {
        "$defs": {
            "point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10},
                                                       "y": {"type": "number"}},
                      "required": ["x", "y"]},
        },
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
                       "label": {"type": "string", "maxLength": 10}},
        "required": ["start", "end"],
    },
}

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def check(text, schema):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER).validate(value)
    return value


def chat(server, model_dir, response_format, seed, content="Describe something.", **kw):
    body = {"model": str(model_dir), "messages": [{"role": "user", "content": content}],
            "max_tokens": 1500, "temperature": 1.0, "seed": seed, "response_format": response_format,
            **NO_THINKING, **kw}
    status, r = server.post_json("/v1/chat/completions", body, timeout=300)
    assert status == 200, r
    return r["choices"][0]


@pytest.mark.parametrize("name", SCHEMAS)
def test_chat_json_schema_outputs_validate(mlxrt_server, model_dir, name):
    schema = SCHEMAS[name]
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    choice = chat(mlxrt_server, model_dir, fmt, 1)
    assert choice["finish_reason"] == "stop", choice
    check(choice["message"]["content"], schema)


def test_json_object_mode(mlxrt_server, model_dir):
    # Free-form strings of a random model at temperature 1 rarely close: this seed's object does.
    choice = chat(mlxrt_server, model_dir, {"type": "json_object"}, 4, max_tokens=300)
    assert choice["finish_reason"] == "stop"
    assert isinstance(json.loads(choice["message"]["content"]), dict)
    # Cut off by max_tokens, the text so far is still a prefix of an object.
    choice = chat(mlxrt_server, model_dir, {"type": "json_object"}, 1, max_tokens=40)
    assert choice["finish_reason"] == "length" and choice["message"]["content"].startswith("{")


def test_completions_json_schema(mlxrt_server, model_dir):
    # Not strict: the schema's own additionalProperties keeps extra properties out.
    schema = SCHEMAS["any_of_nullable"]
    status, r = mlxrt_server.post_json("/v1/completions", {
        "model": str(model_dir), "prompt": "A measurement:", "max_tokens": 1500, "temperature": 1.0, "seed": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}, timeout=300)
    assert status == 200, r
    assert r["choices"][0]["finish_reason"] == "stop"
    check(r["choices"][0]["text"], schema)


def test_streamed_json_schema(mlxrt_server, model_dir):
    schema = SCHEMAS["any_of_nullable"]
    events, _ = mlxrt_server.stream("/v1/chat/completions", {
        "model": str(model_dir), "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "max_tokens": 1500, "temperature": 1.0, "seed": 5, **NO_THINKING,
        "response_format": {"type": "json_schema", "json_schema": {"name": "m", "schema": schema, "strict": True}}},
        timeout=300)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    check(text, schema)


def test_responses_api_text_format(mlxrt_server, model_dir):
    schema = SCHEMAS["refs"]
    status, r = mlxrt_server.post_json("/v1/responses", {
        "model": str(model_dir), "input": "Two points.", "temperature": 1.0, "seed": 6, "max_output_tokens": 1500,
        "reasoning": {"effort": "none"},
        "text": {"format": {"type": "json_schema", "name": "seg", "schema": schema, "strict": True}}}, timeout=300)
    assert status == 200, r
    text = "".join(part["text"] for item in r["output"] if item["type"] == "message" for part in item["content"])
    check(text, schema)


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, '"uniqueItems" at /'),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, '"not" at /properties/a'),
    ({"type": "object", "properties": {"when": {"type": "string", "format": "iso-week"}}}, '"iso-week"'),
])
def test_unsupported_schema_keyword_is_a_400(mlxrt_server, model_dir, schema, keyword):
    status, r = mlxrt_server.post_json("/v1/chat/completions", {
        "model": str(model_dir), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert status == 400, r
    assert keyword in r["error"]["message"], r
    assert r["error"]["param"] == "response_format.json_schema.schema"


def test_bad_response_format_type_is_a_400(mlxrt_server, model_dir):
    status, r = mlxrt_server.post_json("/v1/chat/completions", {
        "model": str(model_dir), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "response_format": {"type": "yaml"}})
    assert status == 400 and r["error"]["param"] == "response_format.type", r


def generate(model_dir, *args):
    return subprocess.run([MLXRT_BIN, "generate", "--model", str(model_dir), "--prompt", "Answer:",
                           "--temp", "1.0", "--seed", "7", "--max-tokens", "400", "--verbose", "F", *args],
                          capture_output=True, text=True, timeout=300)


def test_generate_with_grammar_and_json_schema(model_dir, tmp_path):
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text('root ::= ("yes" | "no" | "maybe") " (" [0-9] [0-9]? "%)"\n')
    out = generate(model_dir, "--grammar", grammar)
    assert out.returncode == 0, out.stderr
    import re
    assert re.fullmatch(r"(yes|no|maybe) \([0-9][0-9]?%\)\n?", out.stdout), out.stdout
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMAS["nested_objects"]))
    out = generate(model_dir, "--json-schema", schema_file, "--max-tokens", "1500")
    assert out.returncode == 0, out.stderr
    check(out.stdout, SCHEMAS["nested_objects"])


def test_generate_refuses_bad_constraints(model_dir, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"if": {"type": "string"}}}}')
    out = generate(model_dir, "--json-schema", bad)
    assert out.returncode != 0 and '"if" at /properties/a' in out.stderr and str(bad) in out.stderr, out.stderr
    gbnf = tmp_path / "bad.gbnf"
    gbnf.write_text('root ::= "a" | \n')
    out = generate(model_dir, "--grammar", gbnf)
    assert out.returncode != 0 and "--grammar" in out.stderr and "EBNF parser error" in out.stderr, out.stderr


def test_generate_with_json_schema_and_a_draft_model(model_dir, tmp_path):
    """With a draft model the constraint sees the draft's guesses and the main model's rows in turn,
    and follows each history it is given (rolling back where the draft was wrong). A draft that
    disagrees often (another seed's weights): the greedy answer validates, and every step's set of
    allowed tokens (the finite entries of its logprobs row) is the one the plain run had at the same
    prefix, so the mask never ran ahead of or behind the tokens."""
    draft = make_server_fixture.ensure(FIXTURES, name="server_qwen3_seed41", seed=41)
    schema = SCHEMAS["array_of_enums"]
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))

    def run(name, *extra):
        out = tmp_path / f"{name}.safetensors"
        proc = subprocess.run([MLXRT_BIN, "generate", "--model", str(model_dir), "--prompt", "Answer:", "--temp", "0",
                               "--max-tokens", "1500", "--verbose", "F", "--json-schema", str(schema_file),
                               "--logprobs-file", str(out), *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        rows = np.array(mx.load(str(out))["logprobs"].astype(mx.float32))
        return proc.stdout, rows, mx.load(str(out)).get("from_draft")

    plain_text, plain_rows, _ = run("plain")
    spec_text, spec_rows, from_draft = run("draft", "--draft-model", str(draft), "--num-draft-tokens", "3")
    check(spec_text, schema)
    drafted = np.array(from_draft).astype(bool)
    assert drafted.any() and not drafted.all()  # some guesses taken, some corrected: rollbacks happened
    plain_tokens, spec_tokens = plain_rows.argmax(-1), spec_rows.argmax(-1)
    same = 0
    while same < min(len(plain_tokens), len(spec_tokens)) and plain_tokens[same] == spec_tokens[same]:
        same += 1
    assert same > 10, (plain_text, spec_text)
    for i in range(same + 1 if same < min(len(plain_rows), len(spec_rows)) else same):
        assert np.array_equal(np.isfinite(plain_rows[i]), np.isfinite(spec_rows[i])), i


def test_server_structured_output_with_a_draft_model(model_dir, tmp_path_factory):
    draft = make_server_fixture.ensure(FIXTURES, name="server_qwen3_seed41", seed=41)
    running = start_mlxrt(model_dir, tmp_path_factory, extra=["--draft-model", str(draft), "--num-draft-tokens", "3"])
    try:
        schema = SCHEMAS["any_of_nullable"]
        fmt = {"type": "json_schema", "json_schema": {"name": "m", "schema": schema, "strict": True}}
        choice = chat(running, model_dir, fmt, 4)
        assert choice["finish_reason"] == "stop", choice
        check(choice["message"]["content"], schema)
    finally:
        stop(running)
