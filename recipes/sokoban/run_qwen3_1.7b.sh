#!/usr/bin/env bash
# sokoban with Qwen/Qwen3-1.7B on one node at the reference settings (recipes/sokoban/sokoban.yaml).
# Usage: bash recipes/sokoban/run_qwen3_1.7b.sh single|shared|per_role [extra hydra overrides ...]
# Environment: N_GPUS (default 8), MODEL (default Qwen/Qwen3-1.7B),
# DATA_DIR (default $HOME/data/verl_mas/sokoban/<level>).
set -euo pipefail

LEVEL="${1:?usage: $0 single|shared|per_role [extra hydra overrides ...]}"
shift
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="${MODEL:-Qwen/Qwen3-1.7B}"
N_GPUS="${N_GPUS:-8}"
DATA_DIR="${DATA_DIR:-$HOME/data/verl_mas/sokoban/$LEVEL}"
LEVEL_OVERRIDES=()

case "$LEVEL" in
    single) SINGLE_AGENT=true; ROUTER=shared ;;
    shared) SINGLE_AGENT=false; ROUTER=shared ;;
    per_role) SINGLE_AGENT=false; ROUTER=per_role ;;
    *) echo "unknown level '$LEVEL': use single, shared or per_role" >&2; exit 2 ;;
esac

# 6400 training rows (200 steps x 32 tasks: each row is played once) and 100 held-out boards.
verl-mas data --env sokoban --out "$DATA_DIR" --train 6400 --eval 100 --seed 0 single_agent="$SINGLE_AGENT"

python -m verl_mas.main \
    --config-path "$RECIPE_DIR" \
    --config-name sokoban \
    mas.env_options.single_agent="$SINGLE_AGENT" \
    mas.router="$ROUTER" \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/eval.parquet" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    trainer.n_gpus_per_node="$N_GPUS" \
    trainer.nnodes=1 \
    trainer.experiment_name="sokoban_qwen3_1.7b_$LEVEL" \
    "${LEVEL_OVERRIDES[@]}" \
    "$@"
