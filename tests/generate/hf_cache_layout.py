"""A local Hugging Face hub cache written with huggingface_hub's own helpers, as hf_hub_download
leaves it: <cache>/models--org--name/{blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>,
refs/<revision>}."""
import hashlib
from pathlib import Path


def write_snapshot(cache: Path, repo_id: str, model_dir: Path, commit: str, revisions=(), files=None):
    """One snapshot of `model_dir`'s files (or of `files`: name -> bytes); returns its folder."""
    from huggingface_hub.file_download import (_cache_commit_hash_for_specific_revision, _create_symlink,
                                               repo_folder_name)

    storage = Path(cache) / repo_folder_name(repo_id=repo_id, repo_type="model")
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (storage / "blobs").mkdir(exist_ok=True)
    if files is None:
        files = {f.name: f.read_bytes() for f in sorted(Path(model_dir).iterdir())
                 if f.is_file() and not f.name.startswith(("fixture", "chat-fixture"))}
    for name, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        _create_symlink(str(blob), str(snapshot / name), new_blob=False)
    for revision in revisions:
        _cache_commit_hash_for_specific_revision(str(storage), revision, commit)
    return snapshot
