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


def test_batch_size_runs_the_batch_as_mlx_lm_does(chat_model):
    # mlx-lm runs -b N through batch_generate: the same report, its rates from the batch's stats.
    args = ["--model", chat_model, "-p", 16, "-g", 8, "-n", 2, "-b", 3]
    want = run_mlx_lm("benchmark", *args).stdout
    got = run_mlxrt("benchmark", *args).stdout
    assert NUM.sub("#", got) == NUM.sub("#", want)
    assert "Timing with prompt_tokens=16, generation_tokens=8, batch_size=3." in got
    rates = re.findall(r"^Trial \d:  prompt_tps=(\S+), generation_tps=(\S+),", got, re.M)
    assert len(rates) == 2 and all(float(p) > 0 and float(g) > 0 for p, g in rates)


def test_batch_size_must_be_positive(chat_model):
    proc = run_mlxrt("benchmark", "--model", chat_model, "-b", 0, check=False)
    assert proc.returncode != 0 and "--batch-size" in proc.stderr


def test_step_timing_splits_each_trials_decode_steps(chat_model):
    proc = run_mlxrt("benchmark", "--model", chat_model, "-p", 16, "-g", 8, "-n", 2, "--step-timing")
    steps = re.findall(r"^Trial (\d) decode step: build=(\S+) ms, dispatch=(\S+) ms, wait=(\S+) ms "
                       r"\(mean of (\d+) steps\)$", proc.stdout, re.M)
    # One line per trial; every step after the first token (whose wait is the prefill's) counted.
    assert [(t, n) for t, *_, n in steps] == [("1", "7"), ("2", "7")]
    for _, build, dispatch, wait, _ in steps:
        assert all(float(v) >= 0 for v in (build, dispatch, wait)) and float(build) + float(dispatch) > 0
