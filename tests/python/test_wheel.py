"""`pip install .` from the source tree, as a user without `make` would: pip builds a wheel with
scikit-build-core in its isolated build environment (the pinned mlx and nanobind from the package
index; CMake configures only the extension module and the libraries it links), the wheel installs
into a fresh virtual environment beside the pinned mlx with its CPU backend, and there `import
mlxrt` loads a model and generates the text mlx-lm generates.

Long (`make test-long`): the wheel build compiles the libraries once more, in its own build folder."""
import subprocess
import sys
import venv

import mlx_lm
import pytest
from conftest import ROOT

PROMPT = "hello there"
SCRIPT = """
import sys
import mlxrt
model, tokenizer = mlxrt.load(sys.argv[1])
print(mlxrt.generate(model, tokenizer, prompt=sys.argv[2], max_tokens=12), end="")
"""


def pinned(name):
    for line in (ROOT / "versions.env").read_text().splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"versions.env has no {name}")


def run(*args, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.mark.long
def test_pip_install_builds_a_wheel_that_generates_mlx_lm_text(tmp_path, chat_model):
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-w", wheels)
    (wheel,) = wheels.glob("mlxrt-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    mlx_version = pinned("MLX_VERSION")
    run(python, "-m", "pip", "install", "-q", f"mlx=={mlx_version}", f"mlx-cpu=={mlx_version}", wheel)

    # Run outside the source tree, so that only the installed package can be imported.
    ours = run(python, "-c", SCRIPT, chat_model, PROMPT, cwd=tmp_path).stdout
    model, tokenizer = mlx_lm.load(str(chat_model))
    assert ours == mlx_lm.generate(model, tokenizer, prompt=PROMPT, max_tokens=12)
