"""What the convert and fuse tests share: fixture copies with a tokenizer (mlx-lm's convert and
fuse load one), and the comparison of an output directory with mlx-lm's."""
import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "generate"))
from fixture_dirs import fixture_dir  # noqa: E402

BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
# Files mlx_lm.convert writes through transformers' tokenizer.save_pretrained (mlxrt copies the source's).
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"}
# What mlxrt copies from the source as it is (transformers keeps only what a fast tokenizer needs).
COPIED = TOKENIZER_FILES | {"vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json"}

def tiny_tokenizer(dst: Path):
    """A word-level tokenizer: mlx_lm.convert loads (and saves) one; the fixtures have none."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                           "unk_token": "<unk>"}))


def source_copy(name, tmp_path):
    src = tmp_path / "src" / name
    shutil.copytree(fixture_dir(name), src)
    (src / "fixture.json").unlink(missing_ok=True)
    tiny_tokenizer(src)
    return src


def assert_same_directory(src, ours, theirs):
    names = sorted(os.listdir(theirs))
    assert sorted(os.listdir(ours)) == sorted(set(names) - TOKENIZER_FILES | {f for f in os.listdir(src) if f in COPIED})
    for f in names:
        if f in TOKENIZER_FILES:
            continue
        assert filecmp.cmp(ours / f, theirs / f, shallow=False), f"{f} differs from mlx_lm.convert's"
    for f in COPIED & set(os.listdir(src)):
        assert (ours / f).read_bytes() == (src / f).read_bytes(), f
