"""`mlxrt manage` against `mlx_lm manage` on the same Hugging Face cache (written with
huggingface_hub's helpers): --scan's table byte-equal, --delete's listing, confirmation dialogue
and the files left behind equal."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, PY
from hf_cache_layout import write_snapshot

DAY = 86400


def build_cache(root: Path):
    """Three model repos (one with two revisions sharing a blob), a dataset, and a stray folder."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    now = time.time()
    a = write_snapshot(root, "mlx-community/Tiny-4bit", None, "1" * 40, ["main"],
                       files={"config.json": b'{"model_type": "llama"}', "model.safetensors": b"x" * 1234567})
    b1 = write_snapshot(root, "mlx-community/Other-8bit", None, "2" * 40, ["main"],
                        files={"config.json": b'{"a": 1}', "tokenizer.json": b"t" * 5000})
    b2 = write_snapshot(root, "mlx-community/Other-8bit", None, "0" * 40, ["v1"],
                        files={"config.json": b'{"a": 2}', "tokenizer.json": b"t" * 5000})
    c = write_snapshot(root, "someone/plain-model", None, "3" * 40, ["main"], files={"config.json": b"{}"})
    (root / "datasets--mlx-data--set" / "snapshots").mkdir(parents=True)
    (root / "not-a-repo").mkdir()
    (root / ".locks").mkdir()
    # Fixed ages, away from the rounding boundaries of "N days ago".
    for snap, age in [(a, 3.3 * DAY), (b1, 10.2 * DAY), (b2, 40 * DAY), (c, 400 * DAY)]:
        for f in snap.iterdir():
            blob = f.resolve()
            os.utime(blob, (now - age, now - age - 3 * 3600))
    return root


def tree(root: Path):
    return sorted(str(p.relative_to(root)) + ("/" if p.is_dir() and not p.is_symlink() else "")
                  for p in root.rglob("*"))


def run(cmd, cache, stdin=""):
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("pattern", [None, "mlx-community", "Other", "nothing-matches", ""])
def test_scan_equals_mlx_lm(tmp_path, pattern):
    cache = build_cache(tmp_path / "hub")
    extra = [] if pattern is None else ["--pattern", pattern]
    want = run([PY, "-m", "mlx_lm", "manage", "--scan", *extra], cache)
    got = run([BIN, "manage", "--scan", *extra], cache)
    assert want.returncode == 0, want.stderr
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    if pattern == "mlx-community":
        assert "3.3 days ago" not in got.stdout and "3 days ago" in got.stdout and "1.2M" in got.stdout


@pytest.mark.parametrize("answers", ["y\n", "yes\n", "maybe\nn\n", "\n", "1\n"])
def test_delete_equals_mlx_lm(tmp_path, answers):
    cache = tmp_path / "hub"
    results = []
    for cmd in ([PY, "-m", "mlx_lm", "manage"], [BIN, "manage"]):
        build_cache(cache)
        proc = run([*cmd, "--delete", "--pattern", "mlx-community"], cache, answers)
        assert proc.returncode == 0, proc.stderr
        results.append((proc.stdout, tree(cache)))
    (want_out, want_tree), (got_out, got_tree) = results
    assert got_out == want_out
    assert got_tree == want_tree
    deleted = answers.startswith(("y", "1"))
    assert ("Model(s) deleted successfully." in got_out) == deleted
    assert any(p.startswith("models--someone--plain-model") for p in got_tree)


def test_delete_without_an_answer_deletes_nothing(tmp_path):
    cache = build_cache(tmp_path / "hub")
    before = tree(cache)
    proc = run([BIN, "manage", "--delete", "--pattern", "Tiny"], cache, "")
    assert proc.returncode == 1 and "no answer on standard input; nothing was deleted" in proc.stderr
    assert tree(cache) == before


def test_missing_cache_says_where(tmp_path):
    proc = run([BIN, "manage", "--scan"], tmp_path / "absent")
    assert proc.returncode == 1
    assert f"Cache directory not found: {tmp_path / 'absent'}" in proc.stderr and "HF_HUB_CACHE" in proc.stderr
