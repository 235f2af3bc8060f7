"""Benchmark: AT-GRPO through verl's real stack on CPU beside the local engine, from the same warm start and budget.

Both engines start from one warm-started tiny model (the embedded default's, with 2 attention heads: vLLM's CPU
attention needs a head size of 32), train the same number of steps on the same boards with the same K, tasks per
step, alpha, learning rate and token limit, and evaluate the same held-out boards greedily before and after.
They share the core (environment, tree rollout, estimator), so their figures should agree within noise.
Also prints each engine's step-time breakdown (median over the steps after the first).

    python -m research.verl_cpu --steps 20 --eval-tasks 128
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from verl_mas.cpu_run import run_on_cpu
from verl_mas.dataset import write_dataset
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.local.train import train
from verl_mas.overrides import apply_overrides

RESULTS = Path(__file__).resolve().parents[2] / "runs" / "verl_cpu"  # models, data, runs and results.json
LOCAL_TIMES = ("time/rollout_s", "time/generation_s", "time/advantage_s", "time/update_s", "time/step_s")
COMMAND_KEYS = ("steps", "tasks_per_step", "k", "eval_tasks", "seed", "mini_batch")
VERL_TIMES = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor", "timing_s/step")


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def comparison_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The local run's keys that every comparison of the two engines sets from its command line (--steps,
    --tasks-per-step, --k, --eval-tasks, --seed): 2 attention heads for vLLM, one greedy evaluation at the end."""
    return {
        "model": {"heads": 2},
        "steps": args.steps,
        "tasks_per_step": args.tasks_per_step,
        "k": args.k,
        "eval_tasks": args.eval_tasks,
        "eval_every": args.steps,
        "eval_samples": 0,
        "seed": args.seed,
        "progress": False,
    }


def local_config(args: argparse.Namespace, out: Path) -> LocalTrainConfig:
    keys = {"update": {"mini_batch_size": args.mini_batch}, "output_dir": str(out)}
    return apply_overrides(LocalTrainConfig(), comparison_keys(args) | keys)


def write_boards(config: LocalTrainConfig, folder: Path) -> None:
    """The local run's boards as verl's dataset in `folder`: its training boards in the order it trains on them, and
    its held-out boards."""
    n_train, n_eval = config.steps * config.tasks_per_step, config.eval_tasks
    write_dataset(config.env, folder, n_train=n_train, n_eval=n_eval, seed=config.seed, options=config.env_options)


def verl_overrides(config: LocalTrainConfig, model: Path, data: Path, out: Path) -> list[str]:
    """verl's keys set to the local run's values (everything else at verl-mas's defaults)."""
    options = [f"+mas.env_options.{key}={json.dumps(value)}" for key, value in config.env_options.items()]
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'eval.parquet'}",
        f"mas.env={config.env}",
        *options,
        f"mas.router={config.router}",
        f"mas.rollout.k={config.k}",
        f"mas.rollout.alpha={config.alpha}",
        "mas.rollout.max_turns=null",
        f"mas.grouping={config.grouping}",
        f"algorithm.norm_adv_by_std_in_grpo={str(config.norm_adv_by_std).lower()}",
        f"data.train_batch_size={config.tasks_per_step}",
        f"data.val_batch_size={config.eval_tasks}",
        "data.max_prompt_length=1000",
        f"data.max_response_length={config.sampling.max_new_tokens}",
        "actor_rollout_ref.rollout.max_model_len=1024",
        f"actor_rollout_ref.rollout.temperature={config.sampling.temperature}",
        f"actor_rollout_ref.actor.optim.lr={config.update.lr}",
        f"actor_rollout_ref.actor.optim.weight_decay={config.update.weight_decay}",
        f"actor_rollout_ref.actor.grad_clip={config.update.grad_clip}",
        f"actor_rollout_ref.actor.clip_ratio={config.update.clip_ratio}",
        # the same optimizer steps per training step as the local run (verl pads the batch to a multiple of this
        # with zero-advantage rows, so it stays near the samples of a step rather than above all of them)
        f"actor_rollout_ref.actor.ppo_mini_batch_size={config.update.mini_batch_size}",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=65536",
        f"trainer.total_training_steps={config.steps}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={config.steps}",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'checkpoints'}",
    ]


def median_times(rows: list[dict], names: tuple[str, ...]) -> dict[str, float]:
    later = rows[1:] or rows
    return {name: statistics.median(row[name] for row in later if name in row) for name in names if later}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.verl_cpu", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mini-batch", type=int, default=64, help="samples per optimizer step, both engines")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--reuse-local", action="store_true", help="take the local run's figures from OUT/local.json")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    config = local_config(args, out / "local")
    model = out / "model"
    if not model.exists():
        export_policies(local_config(args, out / "warm_start"), model)
    write_boards(config, out / "data")
    local_file = out / "local.json"
    if args.reuse_local and local_file.exists():
        local_result = json.loads(local_file.read_text())
    else:
        local = train(apply_overrides(config, {"model": {"path": str(model)}}))
        local_steps = [row for row in local.history if "time/step_s" in row]
        local_result = {
            "before": local.eval_success_before,
            "after": local.eval_success_after,
            "times": median_times(local_steps, LOCAL_TIMES),
        }
        local_file.write_text(json.dumps(local_result, indent=2))

    run = run_on_cpu(out / "verl", verl_overrides(config, model, out / "data", out / "verl"), args.timeout)
    if run.returncode != 0:
        raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
    logged = run.metrics()
    accuracy = [
        (row["step"], value) for row in logged for key, value in row["data"].items() if key.startswith("val-core/")
    ]
    verl_steps = [row["data"] for row in logged if "timing_s/step" in row["data"]]
    n = config.eval_tasks
    result = {
        "command": "python -m research.verl_cpu "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k in COMMAND_KEYS),
        "boards": n,
        "local": local_result,
        "verl": {
            "before": accuracy[0][1],
            "after": accuracy[-1][1],
            "times": median_times(verl_steps, VERL_TIMES),
            "wall_s": run.wall_s,
        },
    }
    (out / "results.json").write_text(json.dumps(result, indent=2))
    print(f"held-out greedy success on {n} boards, {config.steps} AT-GRPO steps (± binomial standard error)")
    print(f"{'engine':8} {'before':>14} {'after':>14} {'change':>8}")
    for engine in ("local", "verl"):
        before, after = result[engine]["before"], result[engine]["after"]
        print(
            f"{engine:8} {before:7.3f} ± {binomial_se(before, n):.3f} {after:7.3f} ± {binomial_se(after, n):.3f}"
            f" {after - before:+8.3f}"
        )
    print("median step-time breakdown (s), steps after the first:")
    for engine in ("local", "verl"):
        print(f"  {engine}: " + ", ".join(f"{k} {v:.3f}" for k, v in result[engine]["times"].items()))
    print(f"verl run wall time {run.wall_s:.0f} s (start-up included); results in {out / 'results.json'}")


if __name__ == "__main__":
    main()
