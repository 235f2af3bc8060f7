"""Benchmark: a `per_role` run through verl's real stack on CPU with `mas.timeline`: how much of each step's rollout
each policy's servers sit idle (no request in flight), and whether the policies' phases overlap.

For each environment: a tiny model warm-started by the local engine (2 attention heads: vLLM's CPU attention needs a
head size of 32), then `python -m verl_mas.main +platform=cpu mas.router=per_role` (two worker groups on one logical
GPU each, two vLLM servers) for a few steps. From the timeline it reports, per training step, the rollout window (first
request sent to last answer), each pool's idle share in it, the share with both pools busy, and the old-log-prob,
update and weight-sync spans of both policies (trainer: dispatch to answer; workers: compute), and it draws the
timeline of one step.

    python benchmarks/bench_policy_overlap.py --env plan_path --env code --steps 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from verl_mas.cpu_run import run_on_cpu
from verl_mas.dataset import write_dataset
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.overrides import apply_overrides
from verl_mas.verl_engine.timeline import (
    phase_overlaps,
    phase_records,
    read_timeline,
    rollout_idle_shares,
    worker_spans_of,
)

RESULTS = Path(__file__).resolve().parent / "results" / "policy_overlap"
WORK = Path(__file__).resolve().parents[1] / "runs" / "policy_overlap"  # models, data, logs (not kept)
# small tasks a tiny model can be warm-started on, with brief prompts; roles in workflow order
ENVS = {
    "plan_path": {
        "options": {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True},
        "max_new_tokens": 24,
        "policies": ("tool", "plan"),
        "workflow": "sequential: the plan agent answers after the tool agent, every turn",
    },
    "code": {
        "options": {"brief_prompts": True, "source_options": {"terms": 1, "variables": 2}, "max_turns": 2},
        "max_new_tokens": 64,
        "policies": ("coder", "tester"),
        "workflow": "parallel: coder and tester answer the same turn at once",
    },
}
PHASES = ("old_log_prob", "update_actor", "update_weights")


def hydra_value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


def warm_start(env: str, out: Path, tasks: int, epochs: int) -> Path:
    model = out / "model"
    if not model.exists():
        base = dataclasses.replace(LocalTrainConfig(), env=env, env_options=ENVS[env]["options"])
        settings = {"model": {"heads": 2}, "warm_start": {"tasks": tasks, "epochs": epochs}, "progress": False}
        export_policies(apply_overrides(base, {**settings, "output_dir": str(out / "warm_start")}), model)
    return model


def overrides(env: str, model: Path, data: Path, out: Path, args: argparse.Namespace) -> list[str]:
    spec = ENVS[env]
    options = [f"+mas.env_options.{key}={hydra_value(value)}" for key, value in spec["options"].items()]
    return [
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'eval.parquet'}",
        f"mas.env={env}",
        *options,
        "mas.router=per_role",
        "trainer.n_gpus_per_node=2",
        "ray_kwargs.ray_init.num_gpus=2",
        f"+mas.timeline={out / 'timeline.jsonl'}",
        f"mas.rollout.k={args.k}",
        "mas.rollout.max_turns=null",
        f"data.train_batch_size={args.tasks_per_step}",
        f"data.max_prompt_length={1024 - spec['max_new_tokens']}",
        f"data.max_response_length={spec['max_new_tokens']}",
        "actor_rollout_ref.rollout.max_model_len=1024",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.tasks_per_step}",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'checkpoints'}",
    ]


def summarize(records: list[dict], policies: tuple[str, ...]) -> dict:
    idle = rollout_idle_shares(records, policies)
    phases = {}
    for phase in PHASES:
        rows = [row for row in phase_overlaps(records, phase) if row["step"] is not None]
        phases[phase] = [
            {
                "step": row["step"],
                "worker_s": {p: round(span[1] - span[0], 3) for p, span in row["worker"].items() if span},
                "worker_overlap_s": round(row.get("worker_overlap_s", 0.0), 3),
                "trainer_wall_s": round(
                    max(end for _, end in row["trainer"].values()) - min(start for start, _ in row["trainer"].values()),
                    3,
                ),
            }
            for row in rows
        ]
    steps = sorted(idle)
    return {
        "rollout": {
            str(step): {
                "window_s": round(idle[step]["window_s"], 2),
                "requests": idle[step]["requests"],
                "idle_share": {p: round(v, 3) for p, v in idle[step]["idle_share"].items()},
                "both_busy_share": round(idle[step]["both_busy_share"], 3),
            }
            for step in steps
        },
        "median_idle_share": {
            p: round(statistics.median(idle[s]["idle_share"][p] for s in steps), 3) for p in policies
        },
        "phases": phases,
    }


def draw(records: list[dict], policies: tuple[str, ...], step: int, path: Path, title: str) -> None:
    """One step's timeline: per policy, requests in flight (rollout) and the trainer's and workers' phase spans."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = [r for r in phase_records(records) if r["step"] == step]
    requests = [
        span
        for r in records
        if r.get("kind") == "requests" and r.get("step") == step and r.get("split") == "train"
        for span in r["spans"]
    ]
    t0 = min([s for _, s, _ in requests] + [r["start"] for r in phases])
    colors = {"old_log_prob": "tab:blue", "update_actor": "tab:red", "update_weights": "tab:green"}
    fig, ax = plt.subplots(figsize=(11, 2.8))
    for row, policy in enumerate(policies):
        y = len(policies) - 1 - row
        busy = sorted((s - t0, e - t0) for p, s, e in requests if p == policy)
        ax.broken_barh([(s, e - s) for s, e in busy], (y + 0.55, 0.3), color="tab:gray", alpha=0.35)
        for record in phases:
            if record["policy"] != policy or record["phase"] not in colors or record["mode"] != "concurrent":
                continue
            start, ready = record["start"] - t0, record["ready"] - t0
            ax.broken_barh([(start, ready - start)], (y + 0.15, 0.3), color=colors[record["phase"]])
            for worker in records:
                if (
                    worker.get("kind") == "worker"
                    and worker["policy"] == policy
                    and worker["method"] == record["method"]
                    and record["start"] <= worker["start"]
                    and worker["end"] <= record["ready"]
                ):
                    ax.plot([worker["start"] - t0, worker["end"] - t0], [y + 0.1, y + 0.1], color="black", lw=2)
    ax.set_yticks([len(policies) - 1 - i + 0.5 for i in range(len(policies))], policies)
    ax.set_xlabel("seconds from the step's first generation request")
    handles = [plt.Rectangle((0, 0), 1, 1, color="tab:gray", alpha=0.35)] + [
        plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()
    ]
    ax.legend(handles, ["requests in flight", *colors], loc="upper center", ncol=4, fontsize=8, frameon=False)
    ax.set_ylim(0, len(policies) + 0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_phase_check(records: list[dict], policies: tuple[str, ...], step: int, path: Path) -> None:
    """A `PhaseCheck` trainer hook's step: each policy's worker compute spans of old log-probs and update, one policy
    after the other (the reference) and then at the same time, on one time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = [r for r in phase_records(records) if r["step"] == step and r["phase"] in ("old_log_prob", "update_actor")]
    t0 = min(r["start"] for r in phases)
    colors = {"old_log_prob": "tab:blue", "update_actor": "tab:red"}
    fig, ax = plt.subplots(figsize=(11, 2.4))
    for row, policy in enumerate(policies):
        y = len(policies) - 1 - row
        for record in phases:
            if record["policy"] != policy:
                continue
            for start, end in worker_spans_of(records, record, slack_s=0.0):
                alpha = 0.45 if record["mode"] == "sequential" else 1.0
                ax.broken_barh([(start - t0, end - start)], (y + 0.2, 0.6), color=colors[record["phase"]], alpha=alpha)
    for mode in ("sequential", "concurrent"):
        starts = [r["start"] - t0 for r in phases if r["mode"] == mode]
        ax.text(min(starts), len(policies) + 0.05, mode, fontsize=9)
    ax.set_yticks([len(policies) - 1 - i + 0.5 for i in range(len(policies))], policies)
    ax.set_xlabel("seconds (worker compute spans; pale: the same phases one policy after the other)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), loc="upper right", fontsize=8, frameon=False)
    ax.set_ylim(0, len(policies) + 0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", choices=sorted(ENVS), default=[])
    parser.add_argument(
        "--phase-check-timeline", type=Path, help="draw the phase-check step of this plan_path timeline instead"
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--warm-start-tasks", type=int, default=128)
    parser.add_argument("--warm-start-epochs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.phase_check_timeline:
        records = read_timeline(args.phase_check_timeline)
        step = next(r["step"] for r in phase_records(records) if r["mode"] == "sequential")
        draw_phase_check(records, ENVS["plan_path"]["policies"], step, RESULTS / "phase_check.png")
        return
    for env in args.env:
        work = WORK / env
        model = warm_start(env, work, args.warm_start_tasks, args.warm_start_epochs)
        data = work / "data"
        n_train = args.steps * args.tasks_per_step
        write_dataset(env, data, n_train=n_train, n_eval=4, seed=0, options=ENVS[env]["options"])
        run = run_on_cpu(work / "verl", overrides(env, model, data, work / "verl", args), args.timeout)
        if run.returncode != 0:
            raise SystemExit(f"the verl run failed ({run.returncode}); see {run.folder / 'log.txt'}")
        records = read_timeline(work / "verl" / "timeline.jsonl")
        policies = ENVS[env]["policies"]
        settings = {key: value for key, value in vars(args).items() if key != "env"}
        report = {"env": env, "workflow": ENVS[env]["workflow"], "wall_s": round(run.wall_s, 1), "settings": settings}
        report.update(summarize(records, policies))
        (RESULTS / f"{env}.json").write_text(json.dumps(report, indent=1) + "\n")
        (RESULTS / f"{env}_timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        step = min(int(s) for s in report["rollout"]) + 1 if len(report["rollout"]) > 1 else 1
        title = f"{env} per_role on CPU, step {step}: {ENVS[env]['workflow']}"
        draw(records, policies, step, RESULTS / f"{env}_step{step}.png", title)
        print(json.dumps({k: report[k] for k in ("env", "median_idle_share", "rollout")}, indent=1))


if __name__ == "__main__":
    main()
