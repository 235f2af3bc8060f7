#!/usr/bin/env bash
# sudoku with Qwen/Qwen3-8B on one node at the reference settings (recipes/sudoku/sudoku.yaml).
# Usage: bash recipes/sudoku/run_qwen3_8b.sh single|shared|per_role [extra hydra overrides ...]
# Environment: N_GPUS (default 8), MODEL (default Qwen/Qwen3-8B),
# DATA_DIR (default $HOME/data/verl_mas/sudoku/<level>).
# Everything else is recipes/launch.sh: this is `bash recipes/launch.sh sudoku 8b LEVEL ...`.
set -euo pipefail

: "${1:?usage: $0 single|shared|per_role [extra hydra overrides ...]}"
exec "$BASH" "$(dirname "${BASH_SOURCE[0]}")/../launch.sh" sudoku 8b "$@"
