#!/usr/bin/env bash
# math with Qwen/Qwen3-1.7B on one node at the reference settings (recipes/math/math.yaml).
# Usage: bash recipes/math/run_qwen3_1.7b.sh single|shared|per_role [extra hydra overrides ...]
# Environment: N_GPUS (default 8), MODEL (default Qwen/Qwen3-1.7B),
# DATA_DIR (default $HOME/data/verl_mas/math/<level>).
# Everything else is recipes/launch.sh: this is `bash recipes/launch.sh math 1.7b LEVEL ...`.
set -euo pipefail

: "${1:?usage: $0 single|shared|per_role [extra hydra overrides ...]}"
exec "$BASH" "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" math 1.7b "$@"
