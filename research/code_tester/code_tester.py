"""The code tester's reward rules in training: catch_share against credit_share (docs/code.md), and the single agent.

On the learning harness (`research/harness.py`: one warm start per seed, shared by the team arms; the single agent's
own), three arms: `at_grpo_credit_share` (the earlier rule), `at_grpo_catch_share` (the default) and `single_grpo`;
on request `at_grpo_per_role` (catch_share, one model per role, both from the team's warm start) and
`at_grpo_catch_share_centred` (catch_share with advantages not divided by the group's std). Besides held-out
success, it records what the tester's replies are worth at every training step and evaluation, from each tester
move's `info` (`TesterRecorder`, a run callback), into the runs' `metrics.jsonl`:

- `<prefix>/tester/catch_share`: the share of the known-wrong programs that a reply's valid cases catch (an
  unreadable reply 0; tasks without a known-wrong program left out);
- `<prefix>/tester/credited_share`: the share of a reply's cases that earn credit (credit_share's reward without
  the -0.5 of an unreadable reply);
- `<prefix>/tester/wrong_case_share`: the share of replies with a case the correct program fails;
- `<prefix>/tester/turn<t>/<share>`: each of the three over turn t's tester moves alone (the first turn's are the
  ones every episode has);

with prefix `rollout` (the training step's samples), `eval` (greedy) and `eval_sampled`. Both rules' figures are
recorded in every arm, whichever rule it trains on. It writes the harness's table (`OUT.md`) and `OUT/tester.md`:
each arm's held-out gain through RL (every seed's run against its own warm start), paired differences between every
two arms (success, and the tester's shares) and the shares over training. With `--until STEP` it trains nothing and
writes the same report as of one step (`OUT/tester_stepSTEP.md`, `.json`, `tester_catch_stepSTEP.png`), over the runs
with an evaluation at that step.

    OMP_NUM_THREADS=1 nice -n 10 python -m research.code_tester --seeds 0 1 2 3 progress=false
    python -m research.code_tester --seeds 0 1 2 3 --collect   # the tables from what is saved

The gain table also reads the coder: its first turn's local reward (greedy; the share of hidden cases its program
passes, -0.5 for none that compiles); held-out success split in two, greedy and sampled: the share of tasks the first
program solves and what the second turn adds to it (fixes minus breaks, the only way the tester's cases move
success); and, over the episodes that reach a second turn, the share of its second-turn replies with no program that
compiles. key=value items override the script's defaults (`DEFAULT_OVERRIDES`).

The study's other scripts: `python -m research.code_tester.before_rl` (a design's step-0 readings per seed),
`.reevaluate` (warm starts evaluated again: regression to the mean), `.tester_copies` (what the tester copies from
the shown examples) and `.code_task_space` (how many programs the tasks ask for); each has its own --help.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from research import harness
from verl_mas.env import INFRA_FAILURE
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.reporting import METRICS_FILE, read_metrics
from verl_mas.local.train import LocalRun
from verl_mas.rollout import EpisodeResult
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

ENV = "code"
DEFAULT_OUT = harness.REPO / "runs" / "code_tester"
ARMS = ("at_grpo_credit_share", "at_grpo_catch_share", "single_grpo")
# on request: one model per role (the env's default rule, catch_share), so the coder's updates cannot move the tester's;
# and catch_share without the std division, which makes a small reward gap inside a group a unit-sized advantage
OPTIONAL_ARMS = ("at_grpo_per_role", "at_grpo_catch_share_centred")
# the harness's code settings (one operation on two integers, brief prompts, two turns), with the examples shown in
# the brief prompts so that the tester's expert cases follow from what it sees; key=value arguments override them.
DEFAULT_OVERRIDES = [
    "env_options.brief_examples=true",
    "warm_start.tasks=384",
    "warm_start.epochs=10",
    "tasks_per_step=8",
    "k=4",
    "eval_tasks=64",
    "eval_samples=2",
]
DEFAULT_STEPS = 15
SHARES = ("catch_share", "credited_share", "wrong_case_share")
PREFIXES = ("rollout", "eval", "eval_sampled")


def tester_shares(moves: Sequence[tuple[bool, dict[str, Any]]]) -> dict[str, float]:
    """The `SHARES` of a rollout's tester moves, each (valid, info); moves the judge could not run left out."""
    judged = [(valid, info) for valid, info in moves if INFRA_FAILURE not in info]
    if not judged:
        return {}
    catches = [
        info["caught"] / info["known_wrong"] if valid else 0.0
        for valid, info in judged
        if info.get("known_wrong", 1)  # an unreadable reply has no info: it caught nothing
    ]
    credited = [info["credited"] / (info["cases"] + info["degenerate"]) if valid else 0.0 for valid, info in judged]
    wrong = [valid and info["failed_by_correct"] > 0 for valid, info in judged]
    shares = {"credited_share": statistics.fmean(credited), "wrong_case_share": statistics.fmean(wrong)}
    return shares | ({"catch_share": statistics.fmean(catches)} if catches else {})


def tester_shares_by_turn(moves: Sequence[tuple[int, bool, dict[str, Any]]]) -> dict[str, float]:
    """`tester_shares` of all the moves (turn, valid, info), and of each turn's as `turn<t>/<share>`: a later turn's
    moves exist only where the coder has not yet solved the task, so the mix of turns shifts as the coder learns."""
    shares = tester_shares([(valid, info) for _, valid, info in moves])
    for turn in sorted({turn for turn, _, _ in moves}):
        at_turn = tester_shares([(valid, info) for t, valid, info in moves if t == turn])
        shares |= {f"turn{turn}/{name}": value for name, value in at_turn.items()}
    return shares


class TesterRecorder(RunCallbacks):
    """A run callback: adds the tester's `SHARES` (over all turns and per turn) to every recorded rollout's metrics,
    from the `info` of each tester move that made a sample (replays of a chosen move make none)."""

    def rollout(self, run: LocalRun, prefix: str, results: Sequence[EpisodeResult]) -> dict[str, float]:
        moves = [
            (sample.turn, sample.valid, dict(info))
            for result in results
            for sample, info in zip(result.samples, result.move_infos, strict=True)
            if sample.role == "tester"
        ]
        return {f"{prefix}/tester/{k}": v for k, v in tester_shares_by_turn(moves).items()}


def history(out: Path, arm: str, seed: int, until: int | None = None) -> list[dict[str, Any]]:
    """A run's metrics rows; with `until`, those of steps up to it, as if the run had stopped there, and none for a
    run without an evaluation at that step (its last one would compare another step)."""
    folder = out / ENV / f"seed{seed}" / arm
    rows = read_metrics(folder) if (folder / METRICS_FILE).is_file() else []
    if until is None:
        return rows
    kept = [row for row in rows if row.get("step", 0) <= until]
    return kept if any(row.get("step") == until and "eval/success" in row for row in kept) else []


@dataclass(frozen=True)
class Runs:
    """Every (arm, seed) run's metrics rows, read once for all the report's tables ([] for a run not there)."""

    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    rows: dict[tuple[str, int], list[dict[str, Any]]]

    @classmethod
    def read(cls, out: Path, arms: Sequence[str], seeds: Sequence[int], until: int | None = None) -> Runs:
        """The runs under `out`, as of step `until` where given (`history`)."""
        rows = {
            (arm, seed): [with_second_turn(row) for row in history(out, arm, seed, until)]
            for arm in arms
            for seed in seeds
        }
        return cls(tuple(arms), tuple(seeds), rows)

    def of(self, arm: str) -> list[list[dict[str, Any]]]:
        """`arm`'s runs, one per seed, in seed order."""
        return [self.rows[arm, seed] for seed in self.seeds]

    def before_after(self, arm: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The run's held-out evaluation before RL and its last one; None for a run not evaluated after RL."""
        evals = [row for row in self.rows[arm, seed] if "eval/success" in row]
        return (evals[0], evals[-1]) if len(evals) > 1 else None


def has(ends: tuple[dict[str, Any], dict[str, Any]], metric: str) -> bool:
    """Whether both the evaluation before RL and the last one hold `metric`."""
    return metric in ends[0] and metric in ends[1]


def training_window(rows: list[dict[str, Any]], key: str, first: bool, width: int) -> float | None:
    """The mean of `key` over the first (or last) `width` training steps that have it."""
    values = [row[key] for row in rows if row.get("step", 0) > 0 and key in row]
    part = values[:width] if first else values[-width:]
    return statistics.fmean(part) if part else None


PAIRED = ("eval/success", "eval_sampled/success", *(f"eval_sampled/tester/{s}" for s in SHARES))


def paired_rows(runs: Runs) -> list[dict[str, Any]]:
    """For every two arms and metric of `PAIRED`: the last evaluation's value of one minus the other's, same seed;
    and for held-out success, `gain of <metric>`: one arm's gain through RL minus the other's, which leaves out how
    far apart their warm starts were (the team's and the single agent's are two)."""
    seeds = runs.seeds
    evaluated = {key: runs.before_after(*key) for key in runs.rows}
    rows = []
    for a, b in itertools.combinations(runs.arms, 2):
        for metric in PAIRED:
            both = [s for s in seeds if all(evaluated[x, s] and metric in evaluated[x, s][1] for x in (a, b))]
            differences = [evaluated[b, s][1][metric] - evaluated[a, s][1][metric] for s in both]
            row = {"pair": f"{b} - {a}", "metric": metric, "seeds": both, **difference_summary(differences)}
            rows.append(row)
        for metric in ("eval/success", "eval_sampled/success"):
            both = [s for s in seeds if all(evaluated[x, s] and has(evaluated[x, s], metric) for x in (a, b))]
            gains = {x: [evaluated[x, s][1][metric] - evaluated[x, s][0][metric] for s in both] for x in (a, b)}
            differences = [gb - ga for ga, gb in zip(gains[a], gains[b], strict=True)]
            summary = difference_summary(differences)
            rows.append({"pair": f"{b} - {a}", "metric": f"gain of {metric}", "seeds": both, **summary})
    return rows


# held-out success, and readings of the coder that say where a change of success came from: its first turn's local
# reward (the share of hidden cases its program passes; -0.5 for no program that compiles); the share of tasks its
# first program solves (its first-turn team reward: solved after that move); what the second turn adds to that
# (success minus it: fixes minus breaks, the only way the tester's cases move success); and, over the episodes that
# reach a second turn, the share of its second-turn replies with no program that compiles (such a reply leaves the
# first program standing). The split of success and the second-turn replies are read greedy and sampled, the local
# reward greedy.
EVALUATIONS = ("eval", "eval_sampled")
CODER_READINGS = (
    "eval/coder/turn0/local_reward",
    *(
        f"{kind}/{name}"
        for kind in EVALUATIONS
        for name in ("coder/turn0/team_reward", "second_turn_adds", "coder/turn1/invalid_move_share")
    ),
)
GAINED = ("eval/success", "eval_sampled/success", *CODER_READINGS)


def with_second_turn(row: dict[str, Any]) -> dict[str, Any]:
    """`row`, plus `<evaluation>/second_turn_adds` for each evaluation it holds with the first program's share:
    success = the first program's solves + what the second turn adds (a revision that fixes, minus one that breaks)."""
    added = {
        f"{kind}/second_turn_adds": row[f"{kind}/success"] - row[f"{kind}/coder/turn0/team_reward"]
        for kind in EVALUATIONS
        if f"{kind}/success" in row and f"{kind}/coder/turn0/team_reward" in row
    }
    return row | added


def gain_rows(runs: Runs) -> list[dict[str, Any]]:
    """Per arm and metric of `GAINED`: the last evaluation's value minus the first's (before RL) in each seed's run,
    so each seed is paired with its own warm start; mean, SE and 95% t interval over the seeds."""
    rows, seeds = [], runs.seeds
    for arm in runs.arms:
        evaluated = {seed: runs.before_after(arm, seed) for seed in seeds}
        for metric in GAINED:
            both = [s for s in seeds if evaluated[s] and has(evaluated[s], metric)]
            gains = [evaluated[s][1][metric] - evaluated[s][0][metric] for s in both]
            rows.append({"arm": arm, "metric": metric, "seeds": both, **difference_summary(gains)})
    return rows


def share_rows(runs: Runs, width: int) -> list[dict[str, Any]]:
    """Per arm and share (of every turn's tester moves, and of the first turn's): its mean over seeds in the first
    and last `width` training steps, and at the held-out evaluations (sampled) before RL and after, with the standard
    error over seeds of the change."""
    rows = []
    for arm in runs.arms:
        evaluated = [(runs.rows[arm, seed], ends) for seed in runs.seeds if (ends := runs.before_after(arm, seed))]
        for share in (*SHARES, *(f"turn0/{name}" for name in SHARES)):
            key = f"rollout/tester/{share}"
            early = [v for r, _ in evaluated if (v := training_window(r, key, True, width)) is not None]
            late = [v for r, _ in evaluated if (v := training_window(r, key, False, width)) is not None]
            sampled = f"eval_sampled/tester/{share}"
            pairs = [(ends[0][sampled], ends[1][sampled]) for _, ends in evaluated if has(ends, sampled)]
            change = difference_summary([after - before for before, after in pairs])
            if not (early or pairs):
                continue
            rows.append(
                {
                    "arm": arm,
                    "share": share,
                    "seeds": max(len(early), len(pairs)),  # runs recorded before per-turn shares lack those
                    "train_first": statistics.fmean(early) if early else None,
                    "train_last": statistics.fmean(late) if late else None,
                    "eval_before": statistics.fmean(b for b, _ in pairs) if pairs else None,
                    "eval_after": statistics.fmean(a for _, a in pairs) if pairs else None,
                    "eval_change": change,
                }
            )
    return rows


# the per-step curves: the recorded shares, and the engine's share of unreadable tester replies (all, first turn)
CURVES = (*SHARES, "invalid_move_share", "turn0/invalid_move_share")


def per_step_means(runs: Sequence[list[dict[str, Any]]], key: str) -> list[list[float]]:
    """[step, mean of `key` over the runs that have it there] at every training step (step > 0) that has it."""
    by_step: dict[int, list[float]] = {}
    for rows in runs:
        for row in rows:
            if row.get("step", 0) > 0 and key in row:
                by_step.setdefault(row["step"], []).append(row[key])
    return [[step, statistics.fmean(by_step[step])] for step in sorted(by_step)]


def curves(runs: Runs) -> dict[str, dict[str, list[list[float]]]]:
    """Per arm and `CURVES` name: [step, mean over the seeds that have it] at every training step."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    for arm in runs.arms:
        for name in CURVES:
            if points := per_step_means(runs.of(arm), f"rollout/tester/{name}"):
                found.setdefault(arm, {})[name] = points
    return found


def curve_lines(found: dict[str, dict[str, list[list[float]]]]) -> list[str]:
    """The curves as a table: one row per (arm, name), one column per step."""
    steps = sorted({int(step) for arm in found.values() for points in arm.values() for step, _ in points})
    if not steps:
        return []
    table = [["arm", "training rollout", *map(str, steps)]]
    for arm, names in found.items():
        for name, points in names.items():
            at = {int(step): value for step, value in points}
            table.append([arm, name, *(f"{at[step]:.2f}" if step in at else "-" for step in steps)])
    return ["## The tester's replies at every training step (mean over seeds)", "", markdown_table(table), ""]


def report_lines(
    gains: list[dict[str, Any]],
    paired: list[dict[str, Any]],
    shares: list[dict[str, Any]],
    width: int,
    until: int | None = None,
) -> list[str]:
    title = "# Code tester: held-out gains, paired differences and the tester's shares"
    lines = [title + ("" if until is None else f", as of step {until}"), ""]
    table = [["arm", "metric", "seeds", "after - before: mean (SE) [95% interval]", "per seed"]]
    for row in gains:
        if row["seeds"]:
            per_seed = " ".join(f"{d:+.3f}" for d in row["per_seed"])
            table.append([row["arm"], row["metric"], str(len(row["seeds"])), summary_text(row), per_seed])
    lines += ["## Held-out gain through RL (each seed's run against its own warm start)", ""]
    lines += [markdown_table(table), ""]
    table = [["arm - other arm", "metric", "seeds", "mean (SE) [95% interval]", "per seed"]]
    for row in paired:
        if row["seeds"]:
            per_seed = " ".join(f"{d:+.3f}" for d in row["per_seed"])
            table.append([row["pair"], row["metric"], str(len(row["seeds"])), summary_text(row), per_seed])
    at = "the last evaluation" if until is None else f"the evaluation at step {until}"
    lines += [f"## Paired differences at {at} (same seed)", "", markdown_table(table), ""]
    table = [["arm", "share", "seeds", f"training, first {width} steps", f"training, last {width} steps"]]
    table[0] += ["held-out sampled, before RL", "after", "change: mean (SE) [95% interval]"]
    for row in shares:
        table.append(
            [
                row["arm"],
                row["share"],
                str(row["seeds"]),
                number(row["train_first"]),
                number(row["train_last"]),
                number(row["eval_before"]),
                number(row["eval_after"]),
                summary_text(row["eval_change"]) if row["eval_change"]["n"] else "-",
            ]
        )
    lines += ["## The tester's shares (mean over seeds)", "", markdown_table(table), ""]
    return lines


def plot_shares(runs: Runs, arms: Sequence[str], path: Path) -> None:
    """The tester's catch share at each training step, one line per team arm (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm in arms:
        if points := per_step_means(runs.of(arm), "rollout/tester/catch_share"):
            ax.plot([step for step, _ in points], [mean for _, mean in points], marker="o", label=arm)
    ax.set_title("code: the tester's catch share per training step (mean over seeds)")
    ax.set_xlabel("step")
    ax.set_ylabel("catch share")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m research.code_tester",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3], help="default: 0-3")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="RL steps of every arm (default: %(default)s)")
    arms_help = "default: the first three"
    parser.add_argument("--arms", nargs="+", choices=ARMS + OPTIONAL_ARMS, default=list(ARMS), help=arms_help)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: runs/code_tester)")
    parser.add_argument("--window", type=int, default=5, help="training steps averaged at the start and the end")
    parser.add_argument("--collect", action="store_true", help="train nothing: report what is saved under OUT")
    until_help = "train nothing: report the runs with an evaluation at this step as of it, into OUT/tester_stepN.*"
    parser.add_argument("--until", type=int, help=until_help)
    parser.add_argument("overrides", nargs="*", help="key=value training overrides, after the defaults above")
    args = harness.parse_with_overrides(parser, argv)
    args.out = args.out.resolve()
    if args.until is not None:
        if args.until < 0:
            parser.error(f"--until must be a step >= 0, got {args.until}")
        args.collect = True  # a report of saved runs: nothing trains
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = ["python", "-m", "research.code_tester", *args.argv]
    plan = harness.arms_plan(ENV, args, command, [*DEFAULT_OVERRIDES, *args.overrides])
    harness.run_plan(plan, callbacks=[TesterRecorder()])
    runs = Runs.read(args.out, args.arms, args.seeds, args.until)
    gains, paired, shares, found = gain_rows(runs), paired_rows(runs), share_rows(runs, args.window), curves(runs)
    report = {"command": shlex.join(command), "gains": gains, "paired": paired, "shares": shares, "curves": found}
    name = "tester" if args.until is None else f"tester_step{args.until}"
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2))
    text = "\n".join(report_lines(gains, paired, shares, args.window, args.until) + curve_lines(found)) + "\n"
    (args.out / f"{name}.md").write_text(text)
    team_arms = [arm for arm in args.arms if arm != "single_grpo"]
    plot_name = "tester_catch.png" if args.until is None else f"tester_catch_step{args.until}.png"
    plot_shares(runs, team_arms, args.out / plot_name)
    print(text)


if __name__ == "__main__":
    main()
