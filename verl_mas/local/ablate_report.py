"""The table of `verl-mas ablate` from its runs' metrics: held-out success before and after per arm with its invalid
moves and zero-variance groups, each arm minus the baseline paired per seed, group health, and what to doubt."""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_mas.group_health import GROUP_HEALTH_PREFIX
from verl_mas.local.arms import GREEDY, SAMPLED, ArmsPlan, reached_end, set_keys
from verl_mas.local.files import RunError
from verl_mas.local.reporting import read_metrics
from verl_mas.local.warm_start import CutMoves, cut_moves_text
from verl_mas.stats import PairedSummary, interval_text, markdown_table, number, paired_by_seed, paired_summary

INVALID = "eval/invalid_move_share"
ZERO_VARIANCE = f"{GROUP_HEALTH_PREFIX}/zero_variance_share"
BUDGET_GUIDE = 'docs/local_engine.md, "Budget for an ablation"'
SUCCESS_HEADER = (
    "arm",
    "greedy before",
    "greedy after",
    "greedy gain",
    "sampled before",
    "sampled after",
    "sampled gain",
    "invalid moves before",
    "invalid moves after",
    "zero-variance groups",
)


@dataclass(frozen=True)
class ArmRun:
    """One arm's run on one seed: held-out success at step 0 and at its last evaluation (sampled: None unless
    eval_samples > 0), the share of invalid greedy moves at both, and the mean over its training steps of each
    group-health metric it logged."""

    arm: str
    seed: int
    folder: str
    greedy_before: float
    greedy_after: float
    sampled_before: float | None
    sampled_after: float | None
    invalid_before: float | None
    invalid_after: float | None
    group_health: dict[str, float]


@dataclass(frozen=True)
class ArmSummary:
    """One arm over the seeds: mean success and invalid-move share before and after, its gain paired per seed, its
    group health, and its mean share of zero-variance groups (no gradient; None where no step logged it)."""

    arm: str
    greedy_before: float
    greedy_after: float
    sampled_before: float | None
    sampled_after: float | None
    invalid_before: float | None
    invalid_after: float | None
    zero_variance: float | None
    greedy_gain: PairedSummary
    sampled_gain: PairedSummary
    group_health: dict[str, float]


@dataclass(frozen=True)
class AblationReport:
    """The ablation's table: every run, every arm's summary, each arm minus the baseline paired per seed, warnings
    that make the table unreadable, and notes on how far to trust it."""

    name: str
    keys: tuple[str, ...]
    baseline: str
    seeds: tuple[int, ...]
    steps: int
    env: str
    runs: tuple[ArmRun, ...]
    arms: tuple[ArmSummary, ...]
    greedy_vs_baseline: dict[str, PairedSummary]
    sampled_vs_baseline: dict[str, PairedSummary]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        def arm_dict(summary: ArmSummary) -> dict[str, Any]:
            fields = dataclasses.asdict(summary)
            return fields | {
                "greedy_gain": summary.greedy_gain.as_dict(),
                "sampled_gain": summary.sampled_gain.as_dict(),
            }

        return {
            "ablation": self.name,
            "keys": list(self.keys),
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "steps": self.steps,
            "env": self.env,
            "arms": [arm_dict(summary) for summary in self.arms],
            "minus_baseline": {
                arm: {"greedy_after": self.greedy_vs_baseline[arm].as_dict(), "sampled_after": sampled.as_dict()}
                for arm, sampled in self.sampled_vs_baseline.items()
            },
            "runs": [dataclasses.asdict(run) for run in self.runs],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }

    def markdown(self) -> str:
        """The tables as Markdown: warnings first, success per arm, each arm minus the baseline, group health."""
        n = len(self.seeds)
        keys = ", ".join(f"`{key}`" for key in self.keys)
        lines = [
            f"# Ablation `{self.name}` on `{self.env}`: {n} seeds ({', '.join(map(str, self.seeds))}), "
            f"{self.steps} steps per arm",
            "",
            *[f"**Warning:** {warning}\n" for warning in self.warnings],
            "Every arm of a seed starts from that seed's one warm start, with the same tasks, budget and sampler seed; "
            f"only {keys} {'differs' if len(self.keys) == 1 else 'differ'}. Held-out success, mean over the seeds; "
            "gains paired per seed: mean (SE) "
            f"[95% t interval, n = {n}]. Invalid moves: the share of greedy held-out replies the environment refused, "
            "at step 0 and at the last evaluation. Zero-variance groups: the share of the arm's advantage groups whose "
            "rewards were all equal (they give no gradient), mean over the training steps.",
            "",
            markdown_table([SUCCESS_HEADER] + [success_cells(summary) for summary in self.arms]),
            "",
            f"Each arm minus `{self.baseline}` after training, paired per seed (the arms share their start, so this is "
            "also the difference of their gains):",
            "",
            markdown_table(
                [["arm", f"greedy minus {self.baseline}", f"sampled minus {self.baseline}"]]
                + [
                    [f"`{arm}`", summary.text(), self.sampled_vs_baseline[arm].text()]
                    for arm, summary in self.greedy_vs_baseline.items()
                ]
            ),
            "",
            *self._group_health_lines(),
        ]
        if self.notes:
            lines += ["", *[f"Note: {note}" for note in self.notes]]
        return "\n".join(lines)

    def _group_health_lines(self) -> list[str]:
        keys = sorted({key for summary in self.arms for key in summary.group_health})
        if not keys:
            return ["Group health: no group-health metrics logged."]
        header = ["metric (mean over training steps and seeds)", *[f"`{s.arm}`" for s in self.arms]]
        rows = [[f"`{key}`", *[number(s.group_health.get(key)) for s in self.arms]] for key in keys]
        return ["Group health per arm:", "", markdown_table([header, *rows])]


def success_cells(summary: ArmSummary) -> list[str]:
    """One arm's line of the success table."""
    return [
        f"`{summary.arm}`",
        number(summary.greedy_before),
        number(summary.greedy_after),
        summary.greedy_gain.text(),
        number(summary.sampled_before),
        number(summary.sampled_after),
        summary.sampled_gain.text(),
        number(summary.invalid_before),
        number(summary.invalid_after),
        number(summary.zero_variance),
    ]


def ablation_report(plan: ArmsPlan) -> AblationReport:
    """The table from the arms' metrics.jsonl files (every arm of every seed must have finished)."""
    runs = tuple(arm_run(plan, seed, arm) for seed in plan.seeds for arm in plan.arms)
    by_arm: dict[str, list[ArmRun]] = defaultdict(list)
    for run in runs:
        by_arm[run.arm].append(run)
    baseline = {run.seed: run for run in by_arm[plan.baseline]}
    others = [arm for arm in plan.arms if arm != plan.baseline]
    arms = tuple(arm_summary(arm, by_arm[arm]) for arm in plan.arms)
    (baseline_summary,) = [summary for summary in arms if summary.arm == plan.baseline]
    keys = set_keys([*plan.arms.values()])
    return AblationReport(
        name=plan.name,
        keys=keys,
        baseline=plan.baseline,
        seeds=plan.seeds,
        steps=plan.base.steps,
        env=plan.base.env,
        runs=runs,
        arms=arms,
        greedy_vs_baseline={arm: paired_after(by_arm[arm], baseline, "greedy_after") for arm in others},
        sampled_vs_baseline={arm: paired_after(by_arm[arm], baseline, "sampled_after") for arm in others},
        warnings=tuple(budget_warnings(plan, plan.seeds)),
        notes=(
            baseline_learning_note(baseline_summary, keys),
            *no_success_note(arms),
            *unshared_starts(runs),
        ),
    )


def arm_run(plan: ArmsPlan, seed: int, arm: str) -> ArmRun:
    folder = Path(plan.arm_config(seed, arm).output_dir)
    history = read_metrics(folder)
    evaluations = [row for row in history if GREEDY in row]
    sampled = [row[SAMPLED] for row in history if SAMPLED in row]
    if not evaluations or not reached_end(plan.arm_config(seed, arm), history):
        raise RunError(f"{folder}: the run has not finished ({plan.base.steps} steps and an evaluation)")
    return ArmRun(
        arm=arm,
        seed=seed,
        folder=str(folder.relative_to(plan.out)),
        greedy_before=evaluations[0][GREEDY],
        greedy_after=evaluations[-1][GREEDY],
        sampled_before=sampled[0] if sampled else None,
        sampled_after=sampled[-1] if sampled else None,
        invalid_before=evaluations[0].get(INVALID),
        invalid_after=evaluations[-1].get(INVALID),
        group_health=group_health_means(history),
    )


def group_health_means(history: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each `group_health/` metric's mean over the training steps that logged it."""
    values: dict[str, list[float]] = defaultdict(list)
    for row in history:
        for key, value in row.items():
            if key.startswith(f"{GROUP_HEALTH_PREFIX}/"):
                values[key].append(value)
    return {key: statistics.fmean(found) for key, found in sorted(values.items())}


def mean_of_all(values: Sequence[float | None]) -> float | None:
    """The mean, or None where some value is missing."""
    return None if any(value is None for value in values) else statistics.fmean(values)


def arm_summary(arm: str, runs: Sequence[ArmRun]) -> ArmSummary:
    sampled = all(run.sampled_before is not None for run in runs)
    health: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for key, value in run.group_health.items():
            health[key].append(value)
    group_health = {key: statistics.fmean(found) for key, found in sorted(health.items())}
    return ArmSummary(
        arm=arm,
        greedy_before=statistics.fmean(run.greedy_before for run in runs),
        greedy_after=statistics.fmean(run.greedy_after for run in runs),
        sampled_before=mean_of_all([run.sampled_before for run in runs]),
        sampled_after=mean_of_all([run.sampled_after for run in runs]),
        invalid_before=mean_of_all([run.invalid_before for run in runs]),
        invalid_after=mean_of_all([run.invalid_after for run in runs]),
        zero_variance=group_health.get(ZERO_VARIANCE),
        greedy_gain=paired_summary([run.greedy_after - run.greedy_before for run in runs]),
        sampled_gain=paired_summary([run.sampled_after - run.sampled_before for run in runs] if sampled else []),
        group_health=group_health,
    )


def paired_after(runs: Sequence[ArmRun], baseline: Mapping[int, ArmRun], reading: str) -> PairedSummary:
    """A reading after training, the arm minus the baseline per seed, over the seeds where both have it."""
    values = {run.seed: getattr(run, reading) for run in runs}
    return paired_by_seed(values, {seed: getattr(run, reading) for seed, run in baseline.items()})


def budget_warnings(plan: ArmsPlan, seeds: Sequence[int]) -> list[str]:
    """One warning per reply limit of the arms that the expert moves of the seeds' warm starts exceed, summed over the
    seeds (each warm start once, however many arms share it)."""
    cuts: dict[tuple[str, int], list[CutMoves]] = defaultdict(list)
    seeds_cut: dict[tuple[str, int], set[int]] = defaultdict(set)
    counted: set[tuple[str, str, int]] = set()
    for seed in seeds:
        for arm in plan.arms:
            for cut in plan.cut_expert_moves(seed, arm):
                if (plan.warm_start_path(seed, arm), cut.key, cut.limit) not in counted:
                    counted.add((plan.warm_start_path(seed, arm), cut.key, cut.limit))
                    cuts[cut.key, cut.limit].append(cut)
                    seeds_cut[cut.key, cut.limit].add(seed)
    warnings = []
    for (key, limit), found in cuts.items():
        moves, cut, longest = (sum(c.moves for c in found), sum(c.cut for c in found), max(c.longest for c in found))
        warnings.append(
            "the warm start's expert moves do not fit the reply budget "
            f"(seeds {', '.join(map(str, sorted(seeds_cut[key, limit])))}): "
            f"{cut_moves_text(CutMoves(key, limit, moves, cut, longest))} A cut move is an invalid one, so the arms' "
            f"success and gains say little here ({BUDGET_GUIDE})."
        )
    return warnings


def baseline_learning_note(baseline: ArmSummary, keys: Sequence[str]) -> str:
    """Whether the baseline arm's own gain is beyond noise (its 95% interval above 0, greedy or sampled): where it is
    not, the regime does not learn, and the arms' differences say little about the keys they set."""
    gains = {"greedy": baseline.greedy_gain, "sampled": baseline.sampled_gain}
    shown = ", ".join(f"{kind} {interval_text(gain.ci95)}" for kind, gain in gains.items() if gain.ci95 is not None)
    if any(gain.ci95 is not None and gain.ci95[0] > 0 for gain in gains.values()):
        return f"`{baseline.arm}` learned beyond noise (gain intervals: {shown}): the regime learns."
    return (
        f"`{baseline.arm}` did not learn beyond noise (gain intervals: {shown}): the differences between the arms say "
        f"little about {', '.join(f'`{key}`' for key in keys)} here; train longer, or at another learning rate, before "
        "reading them."
    )


def no_success_note(arms: Sequence[ArmSummary]) -> list[str]:
    """A note where no arm succeeded at any evaluation shown: then every difference is 0 by construction."""
    readings = [
        value
        for s in arms
        for value in (s.greedy_before, s.greedy_after, s.sampled_before, s.sampled_after)
        if value is not None
    ]
    if any(readings):
        return []
    return [
        "no arm succeeded on any held-out task, before or after training, so every difference is 0: the start plays "
        "no winning move. The invalid-move and zero-variance columns say why; a larger warm start or reply budget "
        f"comes first ({BUDGET_GUIDE})."
    ]


def unshared_starts(runs: Sequence[ArmRun]) -> list[str]:
    """A note per seed whose arms began at different step-0 success: their starting weights were not the same."""
    before: dict[int, set[tuple[float, float | None]]] = defaultdict(set)
    for run in runs:
        before[run.seed].add((run.greedy_before, run.sampled_before))
    return [
        f"the arms of seed {seed} began at different step-0 success {sorted(found, key=str)}: they did not share "
        "their start (a changed warm start, or a device that is not deterministic)"
        for seed, found in sorted(before.items())
        if len(found) > 1
    ]
