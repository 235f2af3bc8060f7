"""A few AT-GRPO steps of one environment through verl's real stack on CPU, from a tiny warm-started model.

The local engine warm-starts a tiny model (2 attention heads: vLLM's CPU attention needs a head size of 32) on the
environment's expert moves with brief prompts; `python -m verl_mas.main +platform=cpu` then trains it for a few
steps in shared mode (verl's trainer, TransferQueue, FSDP2 on gloo, vLLM on CPU) and validates before and after.
Prints what the run proves: steps completed, each update's advantages grouped per (task, role, turn) with zero mean
and unit spread, per-role metrics, validation, step times.

    python -m research.verl_cpu_tasks --env code
    python -m research.verl_cpu_tasks --env math
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections import defaultdict
from pathlib import Path

from verl_mas.cpu_run import run_on_cpu
from verl_mas.dataset import write_dataset
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.overrides import apply_overrides

RESULTS = Path(__file__).resolve().parents[2] / "runs" / "verl_cpu_tasks"  # models, data, runs and report.json
# small procedural tasks with brief prompts, as a tiny model can be warm-started on
ENV_OPTIONS = {
    "code": {"brief_prompts": True, "source_options": {"terms": 1, "variables": 2}, "max_turns": 2},
    "math": {
        "brief_prompts": True,
        "source_options": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        "max_turns": 2,
    },
}
TIMES = ("timing_s/gen", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor", "timing_s/step")


def warm_start_config(env: str, out: Path, tasks: int, epochs: int) -> LocalTrainConfig:
    base = dataclasses.replace(LocalTrainConfig(), env=env, env_options=ENV_OPTIONS[env])
    settings = {"model": {"heads": 2}, "warm_start": {"tasks": tasks, "epochs": epochs}, "progress": False}
    return apply_overrides(base, {**settings, "output_dir": str(out)})


def overrides(env: str, model: Path, data: Path, out: Path, args: argparse.Namespace) -> list[str]:
    options = [f"+mas.env_options.{key}={hydra_value(value)}" for key, value in ENV_OPTIONS[env].items()]
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'eval.parquet'}",
        f"mas.env={env}",
        *options,
        "mas.router=shared",
        f"mas.rollout.k={args.k}",
        "mas.rollout.max_turns=null",
        f"data.train_batch_size={args.tasks_per_step}",
        f"data.val_batch_size={args.eval_tasks}",
        f"data.max_prompt_length={1024 - args.max_new_tokens}",  # the tiny model's 1024 positions
        f"data.max_response_length={args.max_new_tokens}",
        "actor_rollout_ref.rollout.max_model_len=1024",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks_per_step}",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={args.steps}",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'checkpoints'}",
    ]


def hydra_value(value: object) -> str:
    """A value in hydra's override grammar (a mapping's keys unquoted)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


def advantage_groups(records: list[dict]) -> dict[str, float]:
    """Per-update check of the advantages the actor received, over every (task, role, turn) group."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for record in records:
        for row in record["rows"]:
            if not row["padding"]:
                groups[(record["step"], row["task_uid"], row["role"], row["turn"])].append(row["advantage"])
    spread = [values for values in groups.values() if max(values) > min(values)]
    return {
        "groups": len(groups),
        "groups_with_spread": len(spread),
        "largest_abs_group_mean": max(abs(statistics.fmean(v)) for v in groups.values()),
        "group_std_range": [
            min(statistics.stdev(v) for v in spread) if spread else None,
            max(statistics.stdev(v) for v in spread) if spread else None,
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.verl_cpu_tasks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--env", choices=sorted(ENV_OPTIONS), required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--warm-start-tasks", type=int, default=128)
    parser.add_argument("--warm-start-epochs", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    out = (args.out / args.env).resolve()
    model = out / "model"
    if not model.exists():
        export_policies(
            warm_start_config(args.env, out / "warm_start", args.warm_start_tasks, args.warm_start_epochs), model
        )
    data = out / "data"
    n_train = args.steps * args.tasks_per_step
    write_dataset(args.env, data, n_train=n_train, n_eval=args.eval_tasks, seed=0, options=ENV_OPTIONS[args.env])
    run = run_on_cpu(out / "verl", overrides(args.env, model, data, out / "verl", args), args.timeout, audit=True)
    if run.returncode != 0:
        raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
    logged = run.metrics()
    records = run.audit()
    steps = [row for row in logged if any(key.startswith("mas/") and "/reward/mean" in key for key in row["data"])]
    validations = {
        row["step"]: {k: v for k, v in row["data"].items() if k.startswith("val-core/")}
        for row in logged
        if any(k.startswith("val-core/") for k in row["data"])
    }
    per_role = {
        key: [round(row["data"][key], 3) for row in steps if key in row["data"]]
        for key in sorted({k for row in steps for k in row["data"] if k.startswith("mas/") and k.endswith("/mean")})
        if "/reward/" in key
    }
    report = {
        "env": args.env,
        "env_options": ENV_OPTIONS[args.env],
        "steps_completed": len(steps),
        "updates_audited": [(r["step"], r["policy"]) for r in records],
        "advantages_in_update_fields": all("advantages" in r["fields"] for r in records),
        "advantage_groups": advantage_groups(records),
        "per_role_reward_by_step": per_role,
        "validation": validations,
        "median_step_times_s": {
            name: round(statistics.median(row["data"][name] for row in steps[1:] or steps), 2)
            for name in TIMES
            if all(name in row["data"] for row in steps)
        },
        "wall_s": round(run.wall_s, 1),
    }
    print(json.dumps(report, indent=2))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
