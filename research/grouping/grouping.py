"""The grouping ablation: AT-GRPO's (task, role, turn) groups against (task, role) groups, plain GRPO's task groups
and the no-tree rollout, in a regime built for the grouping to matter, with the diagnostic that explains it.

The regime: Plan-Path 5x5 in compact tool mode (the learning harness's board settings), in which the tool agent pays
a fixed cost for every proposal (`tool_cost`, the env `plan_path_tool_cost`, which `main` registers). The cost moves
every tool reward by the same amount, so groups keyed by role (`task_role`, `task_role_turn`) take it out exactly,
and a run with it trains as a run without it would; in groups per task it sits next to the plan agent's rewards, and
the tool's samples get mostly negative advantages whatever they said. The rewards of Plan-Path also differ by turn
(the team reward is the progress made so far), which only `task_role_turn` takes out.

For each seed, one warm start serves every arm (`research/harness.py`), so the arms' before-RL evaluations are equal
(same weights, boards and random numbers; each arm plays its own). After the runs, a rollout of each warm start on
training tasks is scored under every grouping (the same samples, three keys) and the no-tree rollout under its own:
the mean advantage per role, per turn and per (role, turn), the share of negative advantages, the share of (task,
role, turn) groups whose every sample is negative, and the offset share (how much of the advantages' variance is a
value shared by all K candidates of one prompt, which says nothing about which reply was better). The same numbers
are recorded at every training step of every arm (`advantage_stats.jsonl` in the run's folder, written by a run
callback).

    OMP_NUM_THREADS=1 nice -n 10 python -m research.grouping --seeds 0 1 2 3 4 5 6 7 progress=false
    python -m research.grouping --seeds 0 1 2 3 4 5 6 7 --collect   # the tables from what is saved

It writes `OUT.md` and `OUT/learning.json` (the harness's table, with every arm's paired difference from the first
arm, `at_grpo_shared`), and `OUT/diagnostics.md` and `OUT/diagnostics.json`; the page's data are `OUT/runs.jsonl`
(the harness's run records) and `OUT/ablation.json` (the advantages and paired shares the page shows): copied into
research/grouping/data/, `python -m research.figures` recomputes the page from them. key=value items override the
script's defaults (`DEFAULT_OVERRIDES`). `--warm-start shared` trains one warm start (with `--warm-seed`) for every
seed and arm instead of one per seed. `--collect` trains nothing and re-reads what is saved.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from research import harness, methods
from research.grouping import figures
from verl_mas.advantage import GROUPINGS
from verl_mas.env import StepResult, register_env
from verl_mas.local.arms import WARM_START_KEY_FILE
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.presets import apply_train_overrides
from verl_mas.local.reporting import METRICS_FILE, read_metrics
from verl_mas.local.train import LocalRun, make_tasks, sample_advantages
from verl_mas.overrides import parse_overrides
from verl_mas.sample import Sample
from verl_mas.stats import difference_summary, interval_text, markdown_table, mean_se_text
from verl_mas_envs.puzzles.plan_path import PlanPathConfig, PlanPathEnv

ENV = "plan_path_tool_cost"
DEFAULT_OUT = harness.REPO / "runs" / "grouping"
# the harness's Plan-Path board settings, and the tool agent's cost per proposal
REGIME = {**methods.ENV_OPTIONS["plan_path"], "tool_cost": 2.0}
# The arms, as the harness names them; the first is the baseline of the paired differences.
ARMS = {
    "at_grpo_shared": "task_role_turn",
    "at_grpo_task_role": "task_role",
    "mas_grpo_task": "task",
    "mas_no_tree": "task_role_turn, no tree",
}
# 39 min for 8 seeds x 4 arms in one process with one thread on the shared 2-core machine (research/grouping/README.md),
# measured when the arms of a seed played their equal before-RL evaluation once; key=value arguments override them.
DEFAULT_OVERRIDES = [
    "warm_start.tasks=256",
    "warm_start.epochs=4",
    # only the plan agent's played moves are corrupted: the tool's proposals in the data stay right, so the plan
    # agent learns to lean on them and the team's success depends on the tool (what task grouping pushes down)
    "warm_start.corrupt_roles=[plan]",
    "k=4",
    "tasks_per_step=8",
    "eval_tasks=64",
    "eval_samples=4",
    "update.lr=1e-3",
    "sampling.max_new_tokens=16",  # the expert's longest move list on these boards is 13 tokens with eos
]
DEFAULT_STEPS = 30
STATS_FILE = "advantage_stats.jsonl"
DIAGNOSTIC_FILE = "diagnostic.json"


@dataclass(frozen=True)
class ToolCostConfig(PlanPathConfig):
    tool_cost: float = 0.0


class PlanPathToolCost(PlanPathEnv):
    """Plan-Path (the same boards) where every tool proposal costs `tool_cost`, taken from its local reward.
    Registered as `ENV` by `main` (importing this module registers nothing)."""

    def __init__(self, tool_cost: float = 0.0, **options: Any) -> None:
        super().__init__(**options)
        self.base_config = self.config = ToolCostConfig(**dataclasses.asdict(self.config), tool_cost=float(tool_cost))

    def step(self, role: str, text: str) -> StepResult:
        result = super().step(role, text)
        if role != "tool":
            return result
        return dataclasses.replace(result, local_reward=result.local_reward - self.config.tool_cost)


def advantage_breakdown(samples: Sequence[Sample], advantages: Sequence[float]) -> dict[str, Any]:
    """Per role, per turn and per (role, turn): samples, mean reward, mean advantage, the share of negative
    advantages, and the share of (task, role, turn) groups whose every advantage is negative; and the offset share:
    the part of the advantages' variance that is a value shared by every candidate of one (task, role, turn) group."""
    adv = np.asarray(advantages, dtype=np.float64)
    reward = np.array([s.reward for s in samples], dtype=np.float64)
    role = np.array([s.role for s in samples], dtype=object)
    turn = np.array([s.turn for s in samples], dtype=np.int64)
    group = np.array([f"{s.task_uid}|{s.role}|{s.turn}" for s in samples], dtype=object)
    cells: dict[str, Any] = {}
    keys = [(str(r), role == r) for r in dict.fromkeys(role)]
    keys += [(f"turn{t}", turn == t) for t in sorted(set(turn.tolist()))]
    keys += [(f"{r}/turn{t}", (role == r) & (turn == t)) for r in dict.fromkeys(role) for t in sorted(set(turn))]
    for name, rows in keys:
        if not rows.any():
            continue
        members = defaultdict(list)
        for g, a in zip(group[rows], adv[rows], strict=True):
            members[g].append(a)
        cells[name] = {
            "n": int(rows.sum()),
            "reward": float(reward[rows].mean()),
            "advantage": float(adv[rows].mean()),
            "negative_share": float((adv[rows] < 0).mean()),
            "all_negative_groups": float(np.mean([max(v) < 0 for v in members.values()])),
        }
    means = {g: adv[group == g].mean() for g in dict.fromkeys(group)}
    between = np.array([means[g] for g in group]) - adv.mean()
    total = float(((adv - adv.mean()) ** 2).sum())
    return {"cells": cells, "offset_share": float((between**2).sum() / total) if total > 0 else 0.0}


class AdvantageRecorder(RunCallbacks):
    """A run callback: every training step of a run appends its advantages' breakdown to `STATS_FILE` in the run's
    folder (the engine computes the advantages as always; this only reads them)."""

    def started(self, run: LocalRun, step: int) -> None:
        if step == 0:  # a run that starts afresh records afresh
            (run.out / STATS_FILE).unlink(missing_ok=True)

    def advantages(self, run: LocalRun, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> None:
        breakdown = advantage_breakdown(samples, advantages.tolist())
        record = {"step": step + 1, "grouping": run.config.grouping, **breakdown}
        with (run.out / STATS_FILE).open("a") as out:
            out.write(json.dumps(record) + "\n")


def diagnose(config, warm_path: str, tasks: int, log) -> dict[str, Any]:
    """The warm start's rollout of `tasks` training tasks (tree, and K independent episodes), scored under every
    grouping: the tree's samples under each of the three keys, the independent episodes' under task_role_turn."""
    config = apply_train_overrides(config, {"model": {"path": warm_path}, "output_dir": str(Path(warm_path).parent)})
    run = LocalRun(config, log)
    train_tasks = make_tasks(config, "train", 0, tasks)
    out: dict[str, Any] = {"tasks": tasks, "k": config.k}
    tree = [s for r in run.rollout(train_tasks, run.sampler, config.k, "tree") for s in r.samples]
    for grouping in GROUPINGS:
        scored = sample_advantages(tree, grouping, config.norm_adv_by_std)
        out[grouping] = advantage_breakdown(tree, scored.tolist())
    independent = [s for r in run.rollout(train_tasks, run.sampler, config.k, "independent") for s in r.samples]
    no_tree = sample_advantages(independent, "task_role_turn", config.norm_adv_by_std).tolist()
    out["no_tree"] = advantage_breakdown(independent, no_tree)
    return out


def shared_warm_start(args: argparse.Namespace, overrides: dict[str, Any]) -> Path:
    """The one warm start every seed's arms start from (`--warm-start shared`): trained with `--warm-seed`, or reused
    from OUT/warm_start_team when saved there with the same settings."""
    config = dataclasses.replace(methods.env_config(ENV, ["default"], overrides, args.steps), seed=args.warm_seed)
    folder = args.out / "warm_start_team"
    if args.collect:
        return folder
    warm = harness.prepare_warm_start(config, "team", folder, harness.prefixed_log(ENV, args.warm_seed, "warm start"))
    if warm.error:
        raise SystemExit(f"research.grouping: the warm start failed: {warm.error}")
    return folder


def diagnostics(args: argparse.Namespace, overrides: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each seed's diagnostic, computed from the warm start its arms started from (or read back when saved with the
    same warm start and settings)."""
    config = methods.env_config(ENV, ["default"], overrides, args.steps)
    found = {}
    for seed in args.seeds:
        seed_config = dataclasses.replace(config, seed=seed)
        folder = args.out / ENV / f"seed{seed}"
        warm = Path(config.model.path) if config.model.path else folder / "warm_start_team"
        key_file = warm / WARM_START_KEY_FILE
        key = {"warm_start": key_file.read_text() if key_file.is_file() else str(warm), "seed": seed, "k": config.k}
        path = folder / DIAGNOSTIC_FILE
        saved = json.loads(path.read_text()) if path.is_file() else None
        if saved is not None and saved.get("key") == key and saved.get("tasks") == args.diagnose_tasks:
            found[seed] = saved
        elif not args.collect and (warm / "config.json").is_file():
            log = harness.prefixed_log(ENV, seed, "diagnose")
            result = diagnose(seed_config, str(warm), args.diagnose_tasks, log)
            found[seed] = {"key": key, **result}
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(found[seed], indent=2))
    return found


# Held-out metrics of the last evaluation compared per seed with the baseline arm: success (greedy and sampled), the
# team reward an episode ends with, each role's mean reward (what RL maximises; the tool's includes its cost), its
# share of invalid replies and its reply length in tokens.
PAIRED_METRICS = (
    "eval/success",
    "eval_sampled/success",
    "eval_sampled/team_reward_final",
    *(f"eval_sampled/{role}/{name}" for role in ("tool", "plan") for name in ("reward", "invalid_move_share")),
    *(f"eval_sampled/{role}/response_length" for role in ("tool", "plan")),
)


def paired_metrics(out: Path, arms: Sequence[str], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Per arm after the first, per metric: the last evaluation's value minus the first arm's on the same seed, and
    both arms' values before and after (means over the seeds where both have one)."""
    last: dict[tuple[str, int], dict[str, float]] = {}
    first: dict[tuple[str, int], dict[str, float]] = {}
    for arm in arms:
        for seed in seeds:
            folder = out / ENV / f"seed{seed}" / arm
            rows = read_metrics(folder) if (folder / METRICS_FILE).is_file() else []
            evals = [row for row in rows if "eval/success" in row]
            if len(evals) > 1:
                first[arm, seed], last[arm, seed] = evals[0], evals[-1]
    rows = []
    for arm in arms[1:]:
        for metric in PAIRED_METRICS:
            both = [s for s in seeds if (arm, s) in last and (arms[0], s) in last and metric in last[arm, s]]
            differences = [last[arm, s][metric] - last[arms[0], s][metric] for s in both]
            summary = difference_summary(differences)
            rows.append(
                {
                    "arm": arm,
                    "metric": metric,
                    "seeds": both,
                    "before": statistics.fmean(first[arm, s][metric] for s in both) if both else None,
                    "baseline_after": statistics.fmean(last[arms[0], s][metric] for s in both) if both else None,
                    "after": statistics.fmean(last[arm, s][metric] for s in both) if both else None,
                    **summary,
                }
            )
    return rows


def paired_lines(rows: list[dict[str, Any]], baseline: str) -> list[str]:
    header = ["arm - baseline", "metric", "seeds", "before", f"{baseline} after", "arm after", "difference (SE)"]
    lines = [header + ["95% interval", "per seed"]]
    for row in rows:
        if not row["seeds"]:
            continue
        lines.append(
            [
                f"{row['arm']} - {baseline}",
                row["metric"],
                str(len(row["seeds"])),
                f"{row['before']:.3f}",
                f"{row['baseline_after']:.3f}",
                f"{row['after']:.3f}",
                mean_se_text(row["mean"], row["se"]),
                interval_text(row["ci95"]),
                " ".join(f"{d:+.3f}" for d in row["per_seed"]),
            ]
        )
    return [markdown_table(lines)]


def training_stats(out: Path, seeds: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per arm, the mean over its runs' steps and seeds of every recorded cell's mean advantage and shares."""
    by_arm: dict[str, dict[str, list[dict[str, float]]]] = {}
    for arm in ARMS:
        cells: dict[str, list[dict[str, float]]] = defaultdict(list)
        offsets = []
        for seed in seeds:
            path = out / ENV / f"seed{seed}" / arm / STATS_FILE
            if not path.is_file():
                continue
            for line in path.read_text().splitlines():
                record = json.loads(line)
                offsets.append(record["offset_share"])
                for name, values in record["cells"].items():
                    cells[name].append(values)
        if offsets:
            by_arm[arm] = {"steps": len(offsets), "offset_share": statistics.fmean(offsets), "cells": {}}
            for name, rows in cells.items():
                by_arm[arm]["cells"][name] = {k: statistics.fmean(r[k] for r in rows) for k in rows[0] if k != "n"}
    return by_arm


CELLS = ("tool", "plan", "turn0", "turn1", "turn2", "tool/turn0", "tool/turn2", "plan/turn0", "plan/turn2")


# The paired held-out metrics the page's data keep, per seed.
ABLATION_METRICS = tuple(
    f"eval_sampled/{name}" for name in ("team_reward_final", "tool/invalid_move_share", "plan/invalid_move_share")
)
ADVANTAGE_FIELDS = ("advantage", "negative_share", "all_negative_groups")


def ablation_record(found: dict[int, dict[str, Any]], paired: list[dict[str, Any]]) -> dict[str, Any]:
    """What the page's figures read (`figures.ABLATION_FILE`): per seed, the warm start's advantages under every
    grouping in the cells the page shows; per kept metric and arm, its per-seed difference from the baseline arm."""
    advantages = {
        str(seed): {
            name: {
                "offset_share": result[name]["offset_share"],
                "cells": {c: {f: result[name]["cells"][c][f] for f in ADVANTAGE_FIELDS} for c in figures.CELLS},
            }
            for name in (*GROUPINGS, "no_tree")
        }
        for seed, result in found.items()
    }
    by_metric = {m: {row["arm"]: row["per_seed"] for row in paired if row["metric"] == m} for m in ABLATION_METRICS}
    return {"advantages": advantages, "paired": by_metric}


def diagnostic_lines(found: dict[int, dict[str, Any]], trained: dict[str, dict[str, Any]]) -> list[str]:
    """The Markdown of the diagnostic: at the warm start (mean over seeds) and during training (mean over steps)."""
    lines = [
        "# Grouping ablation: the diagnostic",
        "",
        "Mean advantage (and, in brackets, the share of negative advantages) per role, per turn and per (role, turn);",
        "`all-neg` is the share of a role's (task, role, turn) groups whose every sample got a negative advantage;",
        "`offset` is the share of the advantages' variance that is a value shared by all candidates of one (task,",
        "role, turn) group (0 when the groups are the key).",
        "",
    ]
    if found:
        lines += [f"## At the warm start: one rollout per seed's warm start ({len(found)} seeds), every grouping", ""]
        names = (*GROUPINGS, "no_tree")
        lines += _cell_table({name: [f[name] for f in found.values()] for name in names})
    if trained:
        lines += ["", "## During training: every step of every seed, under the arm's own grouping", ""]
        lines += _cell_table({f"{arm} ({ARMS[arm]}, {s['steps']} steps)": [s] for arm, s in trained.items()})
    return lines


def _cell_table(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    header = ["grouping", *CELLS, "tool all-neg", "plan all-neg", "offset"]
    lines = [header]
    for name, parts in results.items():
        row = [name]
        for cell in CELLS:
            values = [p["cells"][cell] for p in parts if cell in p["cells"]]
            if values:
                advantage = statistics.fmean(v["advantage"] for v in values)
                negative = statistics.fmean(v["negative_share"] for v in values)
                row.append(f"{advantage:+.2f} ({negative:.2f})")
            else:
                row.append("-")
        for role in ("tool", "plan"):
            values = [p["cells"][role]["all_negative_groups"] for p in parts if role in p["cells"]]
            row.append(f"{statistics.fmean(values):.2f}" if values else "-")
        row.append(f"{statistics.fmean(p['offset_share'] for p in parts):.2f}")
        lines.append(row)
    return [markdown_table(lines)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m research.grouping", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(8)), help="default: 0-7")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="RL steps of every arm (default: %(default)s)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS), help="default: all four")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: runs/grouping)")
    parser.add_argument("--diagnose-tasks", type=int, default=16, help="training tasks of the warm-start diagnostic")
    parser.add_argument(
        "--warm-start",
        choices=("shared", "per_seed"),
        default="per_seed",
        help="per_seed (default): the harness's one warm start per seed, shared by its arms; shared: one warm "
        "start, trained with --warm-seed, for every seed and arm",
    )
    parser.add_argument("--warm-seed", type=int, default=0, help="the seed of the shared warm start (default 0)")
    parser.add_argument("--collect", action="store_true", help="train nothing: report what is saved under OUT")
    parser.add_argument("overrides", nargs="*", help="key=value training overrides, after the defaults above")
    args = harness.parse_with_overrides(parser, argv)
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    register_env(ENV)(PlanPathToolCost)
    methods.ENV_OPTIONS[ENV] = REGIME  # the env's board options, as the harness holds every env's
    overrides = [*DEFAULT_OVERRIDES, *args.overrides]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.warm_start == "shared" and "path" not in parse_overrides(overrides).get("model", {}):
        overrides.append(f"model.path={shared_warm_start(args, parse_overrides(overrides))}")
    command = ["python", "-m", "research.grouping", *args.argv]
    plan = harness.arms_plan(ENV, args, command, overrides)
    harness.run_plan(plan, callbacks=[AdvantageRecorder()])
    found = diagnostics(args, parse_overrides(overrides))
    trained = training_stats(args.out, args.seeds)
    paired = paired_metrics(args.out, args.arms, args.seeds)
    report = {"command": shlex.join(command), "warm_start": found, "training": trained, "paired": paired}
    (args.out / "diagnostics.json").write_text(json.dumps(report, indent=2))
    (args.out / figures.ABLATION_FILE).write_text(json.dumps(ablation_record(found, paired), indent=1) + "\n")
    text = "\n".join(diagnostic_lines(found, trained)) + "\n"
    text += f"\n## Held-out metrics, paired with `{args.arms[0]}`\n\n" + "\n".join(paired_lines(paired, args.arms[0]))
    text += "\n"
    (args.out / "diagnostics.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
