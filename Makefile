# The user-facing commands: `make` (set up and build), `make test`, `make demo`.
# Each installs what is missing (Debian packages, .venv with the pinned MLX wheels), then builds
# incrementally into build/. MLX_BACKEND picks the MLX wheel: cpu, or cuda-13 when an NVIDIA GPU
# is present; override with `make MLX_BACKEND=cpu`.
SHELL := /bin/bash
include versions.env

BUILD ?= build
JOBS ?= $(shell nproc)
MLX_BACKEND ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda-13 || echo cpu)
CTEST_ARGS ?=
# The Python environment holding the MLX wheels (see tools/setup/install-python-env.sh).
MLXRT_VENV ?= $(CURDIR)/.venv
export MLXRT_VENV

.PHONY: all build deps test test-long test-aarch64 fuzz-long demo check-cuda-kernels clean
all: build

deps:
	@tools/setup/install-debian-packages.sh
	@tools/setup/install-python-env.sh $(MLX_BACKEND)

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXRT_VENV=$(MLXRT_VENV)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)
	@# The Python package mlxrt, importable from the environment as built (an editable install).
	@"$(MLXRT_VENV)/bin/python3" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/mlxrt-build.pth", "w").write(sys.argv[1] + "\n")' "$(abspath $(BUILD))/python"

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The longer sweeps that `make test` samples: every tool-call format served side by side, and the
# cases marked `long` (tools/long_tests.py): real-weight repeats, a second seed of each sampler.
test-long: build
	@tools/setup/install-llama-cpp-converter.sh >/dev/null
	MLXRT_TEST_LONG=1 MLXRT_TOOL_FORMATS=all ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The CPU kernels on 64-bit Arm: cross-compiled with their tests and run under qemu-aarch64 against
# the aarch64 MLX wheel (tools/aarch64/test.sh; not part of `make test`). Its own build dir.
test-aarch64:
	@tools/aarch64/test.sh build-aarch64

# Every libFuzzer target under ASan+UBSan for FUZZ_SECONDS each (CTest runs them for 5 s, built at -O0; this builds an -O1 copy), with
# executions, coverage and findings printed per target (tools/fuzz_long.sh).
FUZZ_SECONDS ?= 600
fuzz-long: build
	@tools/fuzz_long.sh $(BUILD) $(FUZZ_SECONDS)

# The CUDA kernels' source text compiled with NVRTC, without a GPU: every template-argument
# combination the C++ launches as MLX compiles it (tools/cuda/nvrtc_check.py); the L3 kernels as
# mlxrt compiles them itself (MLXRT_CUDA_SELF_COMPILE=1: tests/nvrtc/, through our NVRTC wrapper);
# and the two compiles' machine code compared, instruction by instruction (tools/cuda/sass_compare.py).
# Not part of `make test` or CI. It downloads the pinned mlx-cuda-13 and NVIDIA's NVRTC and
# nvdisasm wheels into build-nvrtc/ once.
check-cuda-kernels: build
	@"$(MLXRT_VENV)/bin/python3" tools/cuda/nvrtc_check.py $(NVRTC_CHECK_ARGS)
	cmake --build $(BUILD) -j $(JOBS) --target mlxrt_nvrtc_tests mlxrt_kernel_program
	MLXRT_NVRTC_LIBRARY=$(CURDIR)/build-nvrtc/root/nvidia/cu13/lib/libnvrtc.so.13 $(BUILD)/mlxrt_nvrtc_tests
	@"$(MLXRT_VENV)/bin/python3" tools/cuda/sass_compare.py --program $(BUILD)/mlxrt_kernel_program

# FIDELITY=l3: the demo at mlxrt's own measured kernels (default l1: mlx-lm's bytes).
FIDELITY ?= l1
demo: build
	@FIDELITY=$(FIDELITY) tools/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
