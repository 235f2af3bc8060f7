#!/usr/bin/env bash
# The one launcher behind every recipe script: writes the data for the level, then runs python -m verl_mas.main
# with recipes/<env>/<env>.yaml and the model, level, data and GPU overrides.
#
# Usage: bash recipes/launch.sh ENV SIZE LEVEL [extra hydra overrides ...]
#   ENV    a recipe directory under recipes/: code, math, plan_path, sokoban or sudoku
#   SIZE   1.7b (Qwen/Qwen3-1.7B, vLLM gets 60% of each GPU) or
#          8b   (Qwen/Qwen3-8B, vLLM gets 50%; per_role also moves the optimizer states to CPU memory)
#   LEVEL  single (one agent), shared (tool + plan on one model) or per_role (one model per role)
# Extra arguments are hydra overrides, passed last so they win.
# Environment: N_GPUS (default 8), MODEL (default the size's Qwen3 model),
# DATA_DIR (default $HOME/data/verl_mas/<env>/<level>).
# recipes/<env>/run_qwen3_<size>.sh is this launcher with ENV and SIZE filled in: `bash
# recipes/sudoku/run_qwen3_8b.sh shared` is `bash recipes/launch.sh sudoku 8b shared`.
# An unknown ENV, SIZE or LEVEL exits with status 2 before anything runs.
# Checkpoints: $HOME/checkpoints/verl_mas/<env>_qwen3_<size>_<level> (the recipe yaml's trainer.default_local_dir),
# two kept per policy; launching the same ENV SIZE LEVEL again resumes from there (recipes/<env>/README.md).
set -euo pipefail

USAGE="usage: $0 code|math|plan_path|sokoban|sudoku 1.7b|8b single|shared|per_role [extra hydra overrides ...]"
ENV_NAME="${1:?$USAGE}"
SIZE="${2:?$USAGE}"
LEVEL="${3:?$USAGE}"
shift 3
RECIPE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$ENV_NAME"
if [[ ! -f "$RECIPE_DIR/$ENV_NAME.yaml" ]]; then
    echo "unknown environment '$ENV_NAME': no recipe $RECIPE_DIR/$ENV_NAME.yaml" >&2
    exit 2
fi

# per model size: the default model, vLLM's share of each GPU, whether per_role offloads the optimizer states
case "$SIZE" in
    1.7b) DEFAULT_MODEL=Qwen/Qwen3-1.7B; GPU_MEMORY_UTILIZATION=0.6; PER_ROLE_OPTIMIZER_OFFLOAD=false ;;
    8b) DEFAULT_MODEL=Qwen/Qwen3-8B; GPU_MEMORY_UTILIZATION=0.5; PER_ROLE_OPTIMIZER_OFFLOAD=true ;;
    *) echo "unknown model size '$SIZE': use 1.7b or 8b" >&2; exit 2 ;;
esac

MODEL="${MODEL:-$DEFAULT_MODEL}"
N_GPUS="${N_GPUS:-8}"
DATA_DIR="${DATA_DIR:-$HOME/data/verl_mas/$ENV_NAME/$LEVEL}"
LEVEL_OVERRIDES=()

case "$LEVEL" in
    single) SINGLE_AGENT=true; ROUTER=shared ;;
    shared) SINGLE_AGENT=false; ROUTER=shared ;;
    per_role) SINGLE_AGENT=false; ROUTER=per_role
              if [[ "$PER_ROLE_OPTIMIZER_OFFLOAD" == true ]]; then
                  # two 8B models on 4 GPUs each: Adam states go to CPU memory between updates
                  LEVEL_OVERRIDES=(actor_rollout_ref.actor.fsdp_config.optimizer_offload=true)
              fi ;;
    *) echo "unknown level '$LEVEL': use single, shared or per_role" >&2; exit 2 ;;
esac

# verl-mas and its python: those on PATH (an activated venv), else the checkout's own .venv (make creates it).
if ! command -v verl-mas > /dev/null; then
    VENV_BIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin"
    if [[ ! -x "$VENV_BIN/verl-mas" ]]; then
        echo "verl-mas is not on PATH and $VENV_BIN/verl-mas does not exist: install verl-mas (docs/gpu.md) and" \
             "activate its environment, e.g. source .venv/bin/activate" >&2
        exit 2
    fi
    PATH="$VENV_BIN:$PATH"
fi

# 6400 training rows (200 steps x 32 tasks: each row is played once) and 100 held-out boards.
# The rows carry the recipe's mas.env_options (--options-from), so they match the run's options.
verl-mas data --env "$ENV_NAME" --out "$DATA_DIR" --train 6400 --eval 100 --seed 0 \
    --options-from "$RECIPE_DIR/$ENV_NAME.yaml" single_agent="$SINGLE_AGENT"

python -m verl_mas.main \
    --config-path "$RECIPE_DIR" \
    --config-name "$ENV_NAME" \
    mas.env_options.single_agent="$SINGLE_AGENT" \
    mas.router="$ROUTER" \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/eval.parquet" \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION" \
    trainer.n_gpus_per_node="$N_GPUS" \
    trainer.nnodes=1 \
    trainer.experiment_name="${ENV_NAME}_qwen3_${SIZE}_$LEVEL" \
    "${LEVEL_OVERRIDES[@]}" \
    "$@"
