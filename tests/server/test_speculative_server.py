"""`mlxrt server --draft-model` against `mlx_lm.server --draft-model` on the same pair (a tiny random
llama with Qwen3's tokenizer and its 4-bit copy): the same text, finish reason, token counts and
logprobs, greedy and seeded, with the request's num_draft_tokens; the request's draft_model field."""
import os
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, start_mlx_lm, start_mlxrt, stop

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from speculative_oracle import make_chat_pair  # noqa: E402

SHARED = Path(os.environ.get("MLXRT_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    main, draft = make_chat_pair(FIXTURES, SHARED / "data" / "tokenizers")
    extra = ["--draft-model", str(draft)]
    ref = start_mlx_lm(main, tmp_path_factory, extra)
    try:
        ours = start_mlxrt(main, tmp_path_factory, extra)
    except Exception:
        stop(ref)
        raise
    yield ref, ours, draft
    stop(ours)
    stop(ref)


# Each prompt starts with its own word, so no request reuses another's prompt cache.
CASES = [
    ("greedy", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 16, "logprobs": True,
                                     "top_logprobs": 3}),
    ("seeded", "/v1/completions", {"prompt": "Beneath the waves", "max_tokens": 16, "temperature": 0.8,
                                   "top_p": 0.9, "seed": 3, "num_draft_tokens": 2}),
    ("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12,
                                      "num_draft_tokens": 4, "draft_model": "default_model"}),
]


@pytest.mark.parametrize("name,path,body", CASES, ids=[c[0] for c in CASES])
def test_same_response(servers, name, path, body):
    ref, ours, _ = servers
    s1, want = ref.post_json(path, body)
    s2, got = ours.post_json(path, body)
    assert s1 == s2 == 200, (want, got)
    w, g = want["choices"][0], got["choices"][0]
    assert g.get("text", g.get("message")) == w.get("text", w.get("message"))
    assert g["finish_reason"] == w["finish_reason"]
    assert g.get("logprobs") == w.get("logprobs")
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]


def test_draft_model_field(servers):
    _, ours, draft = servers
    status, _ = ours.post_json("/v1/completions", {"prompt": "Quietly", "max_tokens": 2, "draft_model": str(draft)})
    assert status == 200
    status, body = ours.post_json("/v1/completions", {"prompt": "Quietly", "max_tokens": 2,
                                                      "draft_model": "some/other-draft"})
    assert status == 400 and "draft_model" in str(body)
    status, body = ours.post_json("/v1/completions", {"prompt": "Quietly", "max_tokens": 2, "num_draft_tokens": 1000})
    assert status == 400 and "num_draft_tokens" in str(body)
