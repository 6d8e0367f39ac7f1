"""A repeated option takes its last value, as argparse does for mlx-lm's command lines (CLI11
would refuse it), while an option taking several values keeps them all."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("MLXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BIN = os.environ.get("MLXRT_BIN", str(ROOT / "build" / "mlxrt"))
FIXTURES = Path(os.environ.get("MLXRT_FIXTURES", ROOT / "build" / "fixtures"))


def test_the_last_of_a_repeated_option_wins(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_fixtures.py"), "--out", str(FIXTURES),
                    "--only", "qwen3_bf16"], check=True)
    out = tmp_path / "logits.safetensors"
    proc = subprocess.run([BIN, "logits", "--model", str(FIXTURES / "qwen3_bf16"), "--tokens", "1,2",
                           "--tokens", "1,2,3", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    import mlx.core as mx
    (logits,) = mx.load(str(out)).values()
    assert logits.shape[0] == 3
