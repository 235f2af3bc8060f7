#!/usr/bin/env bash
# code with Qwen/Qwen3-8B on one node at the reference settings (recipes/code/code.yaml).
# Usage: bash recipes/code/run_qwen3_8b.sh single|shared|per_role [extra hydra overrides ...]
# Environment: N_GPUS (default 8), MODEL (default Qwen/Qwen3-8B),
# DATA_DIR (default $HOME/data/verl_mas/code/<level>).
# Everything else is recipes/launch.sh: this is `bash recipes/launch.sh code 8b LEVEL ...`.
set -euo pipefail

: "${1:?usage: $0 single|shared|per_role [extra hydra overrides ...]}"
exec "$BASH" "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" code 8b "$@"
