"""`mlxrt benchmark` prints what `mlx_lm benchmark` prints (the numbers aside), flag for flag."""
import re

from conftest import run_mlx_lm, run_mlxrt

NUM = re.compile(r"\d+\.\d{3}")


def test_report_matches_mlx_lm(chat_model):
    args = ["--model", chat_model, "-p", 16, "-g", 8, "-n", 2]
    want = run_mlx_lm("benchmark", *args).stdout
    got = run_mlxrt("benchmark", *args).stdout
    assert NUM.sub("#", got) == NUM.sub("#", want)
    assert "Timing with prompt_tokens=16, generation_tokens=8, batch_size=1." in got


def test_batch_size_is_refused_by_name(chat_model):
    proc = run_mlxrt("benchmark", "--model", chat_model, "-b", 4, check=False)
    assert proc.returncode == 1 and "--batch-size" in proc.stderr
