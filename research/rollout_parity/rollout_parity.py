"""Benchmark: do verl's rollouts (vLLM on CPU, the `mas_agent` loop) draw what the local engine's rollouts draw?

Both engines run `--steps` steps at a learning rate of 1e-12 (Adam moves a weight by about that much a step, so the
policy stays fixed; 0 is refused) from `research.verl_learning`'s warm start, on the same boards in the same order
(`data.shuffle=false`), so every step samples one policy on the same 16 boards in both engines. Per step, each
engine logs per-role rewards, invalid-move shares and zero-variance group shares, and per turn the samples (how many
tasks reached that turn, times K and the roles) and the mean reward. The report is, per metric, the mean over steps
of (verl - local) with its standard error over steps: a difference beyond noise is a difference in how the engines
sample or score, with the weights and boards held equal.

    OMP_NUM_THREADS=1 python -m research.rollout_parity --steps 30
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np
import torch

from research.verl_cpu.verl_cpu import write_boards
from research.verl_learning.readings import finite_or_null, or_dash, paired
from research.verl_learning.settings import WORK, local_config, verl_command, with_keys
from verl_mas.cpu_run import run_on_cpu
from verl_mas.env import Workflow, make_env
from verl_mas.local.export import export_policies
from verl_mas.local.train import train
from verl_mas.overrides import apply_overrides

RESULTS = Path(__file__).resolve().parent / "data" / "rollout_parity.json"
FROZEN_LR = 1e-12


# per-role figures: (the local engine's key, verl's key)
ROLE_FIGURES = {
    "reward": ("rollout/{role}/reward", "mas/{role}/reward/mean"),
    "invalid_share": ("rollout/{role}/invalid_move_share", "mas/{role}/invalid_share"),
    "zero_variance_share": ("rollout/{role}/zero_variance_share", "mas/{role}/zero_variance_group_share"),
}


def role_figures(row: dict, engine: int, workflow: Workflow) -> dict[str, float]:
    """`row`'s per-role figures for `workflow`'s roles; `engine` 0 reads the local engine's keys, 1 verl's."""
    return {
        f"{role}/{name}": row[keys[engine].format(role=role)]
        for name, keys in ROLE_FIGURES.items()
        for role in workflow.roles
    }


def local_step_metrics(row: dict, workflow: Workflow) -> dict[str, float]:
    """One local step's figures under the names `verl_step_metrics` gives verl's: the per-turn ones pool the roles,
    as verl's `mas/turn_<t>/*` do."""
    out = role_figures(row, 0, workflow)
    for turn in range(workflow.max_turns):
        counts = {role: row.get(f"rollout/{role}/turn{turn}/samples", 0.0) for role in workflow.roles}
        samples = sum(counts.values())
        out[f"turn_{turn}/samples"] = samples
        if samples:
            rewards = sum(counts[r] * row[f"rollout/{r}/turn{turn}/reward"] for r in workflow.roles if counts[r])
            out[f"turn_{turn}/reward"] = rewards / samples
    return out


def verl_step_metrics(row: dict, workflow: Workflow) -> dict[str, float]:
    out = role_figures(row, 1, workflow)
    for turn in range(workflow.max_turns):
        out[f"turn_{turn}/samples"] = row.get(f"mas/turn_{turn}/samples", 0.0)
        if f"mas/turn_{turn}/reward/mean" in row:
            out[f"turn_{turn}/reward"] = row[f"mas/turn_{turn}/reward/mean"]
    return out


def compare(
    local: dict[int, dict[str, float]], verl: dict[int, dict[str, float]]
) -> dict[str, dict[str, float | None]]:
    """Per metric, over the steps both engines logged it: the engines' means and `paired`'s mean of the per-step
    differences verl - local with its standard error (sd / sqrt(steps)) and z."""
    out = {}
    steps = sorted(set(local) & set(verl))
    for name in sorted({name for step in steps for name in local[step]}):
        both = [step for step in steps if name in local[step] and name in verl[step]]
        if len(both) < 2:
            continue
        local_values = np.array([local[s][name] for s in both])
        verl_values = np.array([verl[s][name] for s in both])
        difference = paired(verl_values, local_values)
        out[name] = {
            "steps": len(both),
            "local": float(local_values.mean()),
            "verl": float(verl_values.mean()),
            "difference": difference["mean"],
            "se": difference["se"],
            "z": difference["z"],
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.rollout_parity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    # research.verl_learning's settings (its evaluation is not run here; one eval task keeps the local run light)
    args.router, args.eval_tasks, args.eval_every, args.threads = "shared", 1, args.steps, 1
    work = WORK / "rollout_parity"
    config = apply_overrides(local_config(args, work / "local"), {"update": {"lr": FROZEN_LR}, "checkpoint_every": 0})
    model = WORK / "model"
    if not model.exists():
        export_policies(apply_overrides(local_config(args, WORK / "warm_start"), {"router": "shared"}), model)
    write_boards(config, work / "data")
    summary = train(apply_overrides(config, {"model": {"path": str(model)}}), log=lambda _: None)
    workflow = make_env(config.env, **config.env_options).workflow()
    local = {row["step"]: local_step_metrics(row, workflow) for row in summary.history if "time/step_s" in row}
    overrides = with_keys(
        verl_command(config, args, model, work / "data", work / "verl"),
        {"trainer.save_freq": -1, "trainer.val_before_train": "false", "trainer.test_freq": -1},
    )
    run = run_on_cpu(work / "verl", overrides, args.timeout)
    if run.returncode != 0:
        raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
    verl = {
        row["step"]: verl_step_metrics(row["data"], workflow) for row in run.metrics() if "timing_s/step" in row["data"]
    }
    result = {
        "date": datetime.date.today().isoformat(),
        "command": f"python -m research.rollout_parity --steps {args.steps}",
        "steps": args.steps,
        "tasks_per_step": args.tasks_per_step,
        "k": args.k,
        "seed": args.seed,
        "comparison": compare(local, verl),
        "local_steps": local,
        "verl_steps": verl,
    }
    RESULTS.write_text(json.dumps(finite_or_null(result), indent=1, allow_nan=False))
    print(f"{args.steps} steps x {args.tasks_per_step} boards, lr {FROZEN_LR} (one policy), verl - local per step:")
    for name, c in result["comparison"].items():
        print(
            f"  {name:28} local {c['local']:7.3f}  verl {c['verl']:7.3f}  "
            f"difference {c['difference']:+.3f} ± {or_dash(c['se'], '.3f')} ({or_dash(c['z'], '+.1f')} SE)"
        )


if __name__ == "__main__":
    main()
