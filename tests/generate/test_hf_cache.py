"""`--model org/name[@revision]` from the local Hugging Face cache, offline, as mlx-lm resolves it
(mlx_lm.utils._download -> huggingface_hub.snapshot_download). The cache is written with
huggingface_hub's own helpers (repo_folder_name, blobs by sha256, relative symlinks made by
_create_symlink, refs by _cache_commit_hash_for_specific_revision); scan_cache_dir must recognise
it and snapshot_download(local_files_only=True) must pick the directory mlxrt picks."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, PY, run_mlx_lm
from hf_cache_layout import write_snapshot

REPO = "mlxrt-test/tiny-chat"
COMMIT_MAIN = "a" * 8 + "0123456789abcdef0123456789abcdef"
COMMIT_V2 = "b" * 8 + "0123456789abcdef0123456789abcdef"


def split_output(stdout):
    """mlx_lm.generate's screen: the text between the ========== rulers, and the timing footer."""
    assert stdout.startswith("==========\n"), stdout[:200]
    body, sep, footer = stdout[len("==========\n"):].rpartition("\n==========\n")
    assert sep, stdout
    return body, footer


@pytest.fixture(scope="module")
def cache(chat_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("hf") / "hub"
    main = write_snapshot(root, REPO, Path(chat_model), COMMIT_MAIN, ["main"])
    v2 = write_snapshot(root, REPO, Path(chat_model), COMMIT_V2, ["v2"])
    return root, main, v2


def env_with(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}


def mlxrt(args, env, cwd=None):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd)


def hub_snapshot(repo_id, env, revision=None):
    """What huggingface_hub itself resolves under `env` (its constants are read at import)."""
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "print(snapshot_download(sys.argv[1], revision=sys.argv[2] or None, local_files_only=True))")
    proc = subprocess.run([PY, "-c", code, repo_id, revision or ""], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def fingerprint(args, env):
    proc = mlxrt(["profile", "--model", *args], env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["artifact"]["fingerprint"]


def test_huggingface_hub_recognises_the_cache(cache):
    from huggingface_hub import scan_cache_dir, snapshot_download

    root, main, v2 = cache
    info = scan_cache_dir(root)
    assert not info.warnings, info.warnings
    (repo,) = info.repos
    assert repo.repo_id == REPO and repo.repo_type == "model"
    revisions = {r.commit_hash: set(r.refs) for r in repo.revisions}
    assert revisions == {COMMIT_MAIN: {"main"}, COMMIT_V2: {"v2"}}
    assert all(r.nb_files == len(list(main.iterdir())) for r in repo.revisions)
    assert snapshot_download(REPO, cache_dir=root, local_files_only=True) == str(main)
    assert snapshot_download(REPO, cache_dir=root, revision="v2", local_files_only=True) == str(v2)
    assert all((main / f).is_symlink() for f in os.listdir(main))


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"])
def test_the_snapshot_huggingface_hub_picks(cache, variable):
    root, main, v2 = cache
    value = {"HF_HUB_CACHE": root, "HF_HOME": root.parent / "home"}.get(variable)
    if variable == "HF_HOME":
        (root.parent / "home").mkdir(exist_ok=True)
        link = root.parent / "home" / "hub"
        if not link.exists():
            link.symlink_to(root)
    elif variable in ("XDG_CACHE_HOME", "HOME"):
        base = root.parent / variable.lower()
        (base / (".cache" if variable == "HOME" else "") / "huggingface").mkdir(parents=True, exist_ok=True)
        link = base / (".cache" if variable == "HOME" else "") / "huggingface" / "hub"
        if not link.exists():
            link.symlink_to(root)
        value = base
    env = env_with(**{variable: str(value)})
    for revision, commit in [(None, COMMIT_MAIN), ("v2", COMMIT_V2), (COMMIT_V2, COMMIT_V2)]:
        spec = REPO + (f"@{revision}" if revision else "")
        want = hub_snapshot(REPO, env, revision)
        assert want.endswith("/" + commit)
        assert fingerprint([spec], env) == f"hf:{REPO}@{commit}"
        assert fingerprint([want], env) == f"hf:{REPO}@{commit}"


def test_generate_by_id_equals_generate_by_path(cache, chat_model):
    root, main, _ = cache
    env = env_with(HF_HUB_CACHE=str(root))
    args = ["--max-tokens", 12, "--prompt", "hello there"]
    by_id = mlxrt(["generate", "--model", REPO, *args], env)
    assert by_id.returncode == 0, by_id.stderr
    by_path = mlxrt(["generate", "--model", chat_model, *args], env)
    assert split_output(by_id.stdout)[0] == split_output(by_path.stdout)[0]
    # mlx-lm itself, offline, resolving the same id in the same cache.
    old = os.environ.get("HF_HUB_CACHE")
    os.environ["HF_HUB_CACHE"] = str(root)
    try:
        want = run_mlx_lm("generate", "--model", REPO, *args).stdout
    finally:
        if old is None:
            del os.environ["HF_HUB_CACHE"]
        else:
            os.environ["HF_HUB_CACHE"] = old
    assert split_output(by_id.stdout)[0] == split_output(want)[0]


def test_other_verbs_take_an_id(cache, chat_model, tmp_path):
    root, _, _ = cache
    env = env_with(HF_HUB_CACHE=str(root))
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    for verb in (["tokenize", "--text", "hello"], ["template", "--messages", messages]):
        by_id = mlxrt([verb[0], "--model", f"{REPO}@v2", *verb[1:]], env)
        by_path = mlxrt([verb[0], "--model", chat_model, *verb[1:]], env)
        assert by_id.returncode == 0 and by_id.stdout, by_id.stderr
        assert by_id.stdout == by_path.stdout


def test_a_local_path_wins_over_the_cache(cache, chat_model, tmp_path):
    root, _, _ = cache
    env = env_with(HF_HUB_CACHE=str(root))
    # A relative directory spelled like the id: mlx-lm's Path(id).exists() takes it first.
    local = tmp_path / REPO
    local.parent.mkdir(parents=True)
    local.symlink_to(chat_model)
    proc = mlxrt(["profile", "--model", REPO], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["artifact"]["fingerprint"] is None


def assert_refused(proc, *texts):
    assert proc.returncode == 1 and proc.stderr.startswith("error: "), proc.stderr
    for t in texts:
        assert t in proc.stderr, (t, proc.stderr)


def test_absent_model_says_where_it_looked_and_how_to_get_it(cache):
    root, _, _ = cache
    env = env_with(HF_HUB_CACHE=str(root))
    proc = mlxrt(["generate", "--model", "someone/absent-model", "--prompt", "x"], env)
    assert_refused(proc, "--model someone/absent-model", "not in the Hugging Face cache",
                   "`hf download someone/absent-model`",
                   str(root / "models--someone--absent-model"), "from HF_HUB_CACHE",
                   "huggingface-cli download someone/absent-model", "local model directory")
    proc = mlxrt(["generate", "--model", f"{REPO}@v9", "--prompt", "x"], env)
    assert_refused(proc, "revision 'v9'", str(root / "models--mlxrt-test--tiny-chat" / "refs" / "v9"),
                   "huggingface-cli download mlxrt-test/tiny-chat --revision v9")
    proc = mlxrt(["generate", "--model", f"{REPO}@{'c' * 40}", "--prompt", "x"], env)
    assert_refused(proc, "snapshot " + "c" * 40, "huggingface-cli download")
    home = env_with(HOME=str(root.parent / "nobody"))
    proc = mlxrt(["logits", "--model", "a/b", "--tokens", "1", "--out", root.parent / "x.safetensors"], home)
    assert_refused(proc, str(root.parent / "nobody" / ".cache" / "huggingface" / "hub" / "models--a--b"),
                   "from the default")


@pytest.mark.parametrize("spec,texts", [
    ("../escape/x", ["model directory does not exist", "org/name[@revision]"]),
    ("/nonexistent/abs/dir", ["model directory does not exist"]),
    ("org/a/b", ["model directory does not exist"]),
    ("org--x/name", ["model directory does not exist"]),
    ("org/na..me", ["model directory does not exist"]),
    ("org/name@../../../etc", ["revision '../../../etc'", "'..'"]),
    ("org/name@/etc/passwd", ["revision '/etc/passwd'"]),
    ("org/name@", ["revision ''"]),
])
def test_ids_and_revisions_that_could_escape_are_refused(cache, spec, texts, tmp_path):
    root, _, _ = cache
    proc = mlxrt(["profile", "--model", spec], env_with(HF_HUB_CACHE=str(root)), cwd=tmp_path)
    assert_refused(proc, *texts)


def test_a_refs_file_that_is_not_a_hash_is_refused(cache, tmp_path):
    root, main, _ = cache
    repo = tmp_path / "hub" / "models--org--bad"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots").symlink_to(main.parent)
    for content in ["../" + COMMIT_MAIN, COMMIT_MAIN.upper(), COMMIT_MAIN[:39], ""]:
        (repo / "refs" / "main").write_text(content)
        proc = mlxrt(["profile", "--model", "org/bad"], env_with(HF_HUB_CACHE=str(tmp_path / "hub")))
        assert_refused(proc, str(repo / "refs" / "main"), "40-character lowercase hex commit hash")
    (repo / "refs" / "main").write_text(COMMIT_MAIN)
    assert fingerprint(["org/bad"], env_with(HF_HUB_CACHE=str(tmp_path / "hub"))) == f"hf:org/bad@{COMMIT_MAIN}"


def test_server_takes_an_id_and_answers_to_it(cache, tmp_path):
    import http.client
    import socket

    root, main, _ = cache
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([BIN, "server", "--model", REPO, "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env_with(HF_HUB_CACHE=str(root)))

    def request(method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request(method, path, body=json.dumps(body) if body else None,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()

    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()
            try:
                if request("GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        for name, status in [(REPO, 200), (str(main), 200), ("default_model", 200), (f"{REPO}@{COMMIT_MAIN}", 200),
                             (f"{REPO}@v2", 404), ("someone/else", 404)]:
            got, body = request("POST", "/v1/chat/completions", {**chat, "model": name})
            assert got == status, (name, body)
        assert REPO in [m["id"] for m in request("GET", "/v1/models")[1]["data"]]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
