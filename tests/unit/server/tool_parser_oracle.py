#!/usr/bin/env python3
"""The expectations of tool_parsers_test.cpp, made at test time by mlx-lm's own parsers.

Usage: tool_parser_oracle.py CASES.json OUT.json
CASES.json: [{"parser": module name, "text": str, "tools": list or null}, ...]; a case
{"parser": name, "markers": true} asks for the module's [tool_call_start, tool_call_end].
OUT.json, one entry per case: {"result": json.dumps(parse_tool_call(text, tools), ensure_ascii=False)},
{"unserializable": true} when json.dumps refuses the result (what mlx_lm.server's formatter then
fails on), or {"error": "ValueError"} / {"error": "other"} for what parse_tool_call raised
(mlx_lm.server skips a call on ValueError; anything else escapes the handler).
"""
import importlib
import json
import sys


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        module = importlib.import_module(f"mlx_lm.tool_parsers.{case['parser']}")
        if case.get("markers"):
            out.append({"markers": [module.tool_call_start, module.tool_call_end]})
            continue
        try:
            result = module.parse_tool_call(case["text"], case["tools"])
        except ValueError:
            out.append({"error": "ValueError"})
            continue
        except Exception:  # noqa: BLE001 - the kind is what the test compares
            out.append({"error": "other"})
            continue
        try:
            out.append({"result": json.dumps(result, ensure_ascii=False)})
        except (TypeError, ValueError):
            out.append({"unserializable": True})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
