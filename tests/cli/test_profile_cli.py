"""`mlxrt profile` and --profile-file: exact artifact profiles for HF cache snapshots, guarded by
the config fingerprint; relocating a snapshot keeps its identity."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))
SHA = "c1899de289a04d12100db370d81485cdf75e47ca"


@pytest.fixture(scope="module")
def fixture():
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "qwen3_bf16"], check=True)
    return FIXTURES / "qwen3_bf16"


def mlxrt(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)


def as_snapshot(src, root):
    repo = root / "hub" / "models--tiny-org--tiny-qwen3"
    snap = repo / "snapshots" / SHA
    shutil.copytree(src, snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SHA)
    return repo, snap


def profile_file(path, config_fp):
    path.write_text(json.dumps({"profiles": [{
        "id": "tiny-qwen3-exact",
        "artifact_fingerprint": f"hf:tiny-org/tiny-qwen3@{SHA}",
        "config_fingerprint": config_fp,
        "fidelity": {"tier": "l1", "oracle": "mlx-lm", "claim": "bit-exact"},
        "required_capabilities": ["safetensors", "autoregressive", "qwen3-graph"],
        "execution": {"loader": "safetensors", "graph": "qwen3", "loop": "autoregressive",
                      "specialization": "artifact"}}]}))
    return path


def test_family_profile_for_a_plain_directory(fixture):
    out = json.loads(mlxrt("profile", "--model", fixture).stdout)
    assert out["profile"]["id"] == "qwen3-dedicated"
    assert out["artifact"]["fingerprint"] is None
    assert out["exact_artifact"] is False


def test_snapshot_identity_survives_relocation(fixture, tmp_path):
    repo_a, snap_a = as_snapshot(fixture, tmp_path / "a")
    _, snap_b = as_snapshot(fixture, tmp_path / "elsewhere" / "b")
    a = json.loads(mlxrt("profile", "--model", snap_a).stdout)
    b = json.loads(mlxrt("profile", "--model", snap_b).stdout)
    via_repo = json.loads(mlxrt("profile", "--model", repo_a).stdout)  # refs/main is followed
    assert a["artifact"]["fingerprint"] == f"hf:tiny-org/tiny-qwen3@{SHA}"
    assert a["artifact"] == b["artifact"] == via_repo["artifact"]


def test_exact_artifact_profile_and_its_guard(fixture, tmp_path):
    _, snap = as_snapshot(fixture, tmp_path)
    fp = json.loads(mlxrt("profile", "--model", snap).stdout)["artifact"]["config_fingerprint"]
    good = profile_file(tmp_path / "good.json", fp)
    out = json.loads(mlxrt("profile", "--model", snap, "--profile-file", good).stdout)
    assert out["exact_artifact"] is True and out["profile"]["id"] == "tiny-qwen3-exact"
    proc = mlxrt("logits", "--model", snap, "--tokens", "1,2", "--out", tmp_path / "o.safetensors",
                 "--profile-file", good)
    assert proc.returncode == 0, proc.stderr

    bad = profile_file(tmp_path / "bad.json", "0000000000000000")
    proc = mlxrt("logits", "--model", snap, "--tokens", "1,2", "--out", tmp_path / "o2.safetensors",
                 "--profile-file", bad)
    assert proc.returncode != 0
    assert "refusing to fall back" in proc.stderr and "tiny-qwen3-exact" in proc.stderr
    assert not (tmp_path / "o2.safetensors").exists()


@pytest.mark.parametrize("content,expected", [
    ("[1]", "profiles[0] must be an object"),
    ('{"profiles": [{"id": "x"}]}', "fidelity must be an object"),
    ("{oops", "invalid JSON"),
])
def test_bad_profile_file(fixture, tmp_path, content, expected):
    f = tmp_path / "p.json"
    f.write_text(content)
    proc = mlxrt("profile", "--model", fixture, "--profile-file", f)
    assert proc.returncode != 0 and expected in proc.stderr, proc.stderr


def test_qwen2_resolves_to_its_graph_and_refuses_another(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "qwen2_bf16"], check=True)
    _, snap = as_snapshot(FIXTURES / "qwen2_bf16", tmp_path)
    out = json.loads(mlxrt("profile", "--model", snap).stdout)
    assert out["profile"]["id"] == "qwen2-dedicated"
    assert out["profile"]["execution"]["graph"] == "qwen2"
    assert out["profile"]["required_capabilities"] == ["safetensors", "autoregressive", "qwen2-graph"]
    # An exact profile naming the qwen3 graph for this qwen2 artifact is refused, not run.
    wrong = profile_file(tmp_path / "wrong.json", out["artifact"]["config_fingerprint"])
    proc = mlxrt("profile", "--model", snap, "--profile-file", wrong)
    assert proc.returncode != 0
    assert "selects qwen3, which is incompatible with qwen2; refusing to fall back" in proc.stderr
    right = json.loads(wrong.read_text())
    right["profiles"][0]["execution"]["graph"] = "qwen2"
    right["profiles"][0]["required_capabilities"][-1] = "qwen2-graph"
    (tmp_path / "right.json").write_text(json.dumps(right))
    out = json.loads(mlxrt("profile", "--model", snap, "--profile-file", tmp_path / "right.json").stdout)
    assert out["exact_artifact"] is True and out["profile"]["execution"]["graph"] == "qwen2"
