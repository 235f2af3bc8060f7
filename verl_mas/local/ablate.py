"""`verl-mas ablate`: arms that differ in one training key, run from one warm start per seed that every arm shares,
and their paired table (held-out success before and after, each arm minus the baseline per seed with its 95% t
interval, and each arm's group health), printed and written as JSON and Markdown."""

from __future__ import annotations

import dataclasses
import json
import shutil
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_mas.env import make_env
from verl_mas.group_health import GROUP_HEALTH_PREFIX
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import (
    CONFIG_FILE,
    SEED,
    LocalTrainConfig,
    LoraSpec,
    config_json,
    read_config,
    trains_warm_start,
)
from verl_mas.local.export import export_policies
from verl_mas.local.files import RunError, check_writable_dir, write_text_atomic
from verl_mas.local.presets import PRESETS, apply_train_overrides, resolve_train_config
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import RESUME_FREE_KEYS, train
from verl_mas.stats import PairedSummary, interval_text, markdown_table, number, paired_summary


@dataclass(frozen=True)
class Ablation:
    """Arms that differ in the value of one training key; each is paired per seed with the `baseline` arm."""

    key: str
    arms: tuple[str, ...]
    baseline: str
    description: str


ABLATIONS: dict[str, Ablation] = {
    "grouping": Ablation(
        key="grouping",
        arms=("task", "task_role", "task_role_turn"),
        baseline="task_role_turn",
        description="advantage groups per task (plain GRPO), per (task, role), per (task, role, turn) (AT-GRPO)",
    ),
}
ABLATION_KEYS = ("seeds",)  # the command's own keys, next to the training keys
DEFAULT_SEEDS = 8
# Keys the command sets per seed or per arm itself: a user's value would break the pairing.
PER_SEED_KEYS = ("seed", "sampler_seed", "resume")
WARM_START_DIR = "warm_start"
WARM_START_KEY_FILE = "warm_start_key.json"
# What a warm start's weights and tokenizer depend on: a saved one whose key differs is another warm start.
WARM_START_KEYS = ("env", "env_options", "seed", "model", "warm_start", "device")
REPORT_JSON = "ablation.json"
REPORT_MARKDOWN = "ablation.md"
GREEDY, SAMPLED = "eval/success", "eval_sampled/success"
SUCCESS_HEADER = (
    "arm",
    "greedy before",
    "greedy after",
    "greedy gain",
    "sampled before",
    "sampled after",
    "sampled gain",
)


@dataclass(frozen=True)
class AblationPlan:
    """One ablation on one training config: its seeds and the folder that holds its warm starts, runs and table."""

    name: str
    ablation: Ablation
    seeds: tuple[int, ...]
    base: LocalTrainConfig
    out: Path

    def seed_folder(self, seed: int) -> Path:
        return self.out / f"seed_{seed}"

    @property
    def saves_warm_start(self) -> bool:
        """Whether each seed's start is a warm start saved here (`trains_warm_start`): a model built from scratch, or
        loaded weights with `warm_start.tune_loaded`; loaded weights left as they are are every arm's start."""
        return trains_warm_start(self.base)

    def warm_start_path(self, seed: int) -> str:
        """The model every arm of `seed` starts from: the seed's saved warm start, or `model.path` untuned."""
        return str(self.seed_folder(seed) / WARM_START_DIR) if self.saves_warm_start else self.base.model.path

    def warm_start_config(self, seed: int) -> LocalTrainConfig:
        """The run whose warm start is saved: one whole model (router=shared) warm-started on every role's moves."""
        overrides = {"seed": seed, "router": "shared", "output_dir": self.warm_start_path(seed)}
        config = apply_train_overrides(self.base, overrides)
        return dataclasses.replace(config, lora=LoraSpec(), policy_lr={})  # policy_lr names per_role's policies

    def arm_config(self, seed: int, arm: str) -> LocalTrainConfig:
        """The arm's run: the base config at `seed`, the arm's value of the key, from the seed's warm start."""
        overrides = {
            self.ablation.key: arm,
            "seed": seed,
            "model": {"path": self.warm_start_path(seed)},
            "warm_start": {"tune_loaded": False},  # the start is tuned already: the arms load it as it is
            "output_dir": str(self.seed_folder(seed) / arm),
            "resume": True,  # a run stopped part way continues from its latest checkpoint (none: from the start)
        }
        return apply_train_overrides(self.base, overrides)


def plan_ablation(name: str, overrides: Mapping[str, Any]) -> AblationPlan:
    """Check the ablation's name and keys and build its plan, before anything is trained.

    `overrides` are training keys (presets included) plus `seeds`: a count N (seeds 0..N-1) or a list of seeds, at
    least two. The output folder is `output_dir` when given, else runs/ablate_<name>.

    Raises:
        ValueError: naming the unknown ablation, the bad `seeds`, or the key that the arms set themselves.
    """
    if name not in ABLATIONS:
        raise ValueError(f"unknown ablation {name!r}; known ablations: {', '.join(ABLATIONS)}")
    ablation = ABLATIONS[name]
    overrides = dict(overrides)
    seeds = parse_seeds(overrides.pop("seeds", DEFAULT_SEEDS))
    for key in (ablation.key, *PER_SEED_KEYS):
        if key in overrides:
            raise ValueError(f"{key}: the ablation sets it for each {'arm' if key == ablation.key else 'seed'} itself")
    presets = overrides.get("preset", [])
    for preset in [presets] if isinstance(presets, str) else presets:
        known = PRESETS[preset].overrides if preset in PRESETS else {}  # resolve_train_config names unknown ones
        taken = [key for key in (ablation.key, *PER_SEED_KEYS) if key in known]
        if taken:
            raise ValueError(f"preset={preset} sets {taken[0]}, which the ablation sets itself; leave the preset out")
    base = resolve_train_config(overrides, other_keys=ABLATION_KEYS)
    try:
        make_env(base.env, **base.env_options)
    except KeyError as error:  # an unknown env: its message lists the known ones
        raise ValueError(f"env: {error.args[0]}") from None
    out = Path(base.output_dir if "output_dir" in overrides else f"runs/ablate_{name}")
    check_writable_dir(out, "output_dir")
    plan = AblationPlan(name, ablation, seeds, dataclasses.replace(base, output_dir=str(out)), out)
    check_saved_folders(plan)
    return plan


def ablate_help() -> str:
    """What `verl-mas ablate --help` says before the training keys: the ablations, the command's keys, its output."""
    ablations = [
        f"  {name:<10} {ablation.key}={'|'.join(ablation.arms)}, each against {ablation.baseline}:\n"
        f"             {ablation.description}"
        for name, ablation in ABLATIONS.items()
    ]
    return "\n".join(
        [
            "arms that differ in one training key, on your environment, before you spend GPU hours:",
            "  verl-mas ablate grouping env=my_game seeds=8 steps=200 [preset=NAME] [key=value ...]",
            "",
            "ablations:",
            *ablations,
            "",
            "ablate keys:",
            f"  seeds      a count N (seeds 0..N-1) or a list (seeds=[0,3,5]), at least 2 (default {DEFAULT_SEEDS})",
            "  output_dir the ablation's folder (default runs/ablate_NAME)",
            "",
            "Per seed, one warm start (saved once to seed_S/warm_start as one model trained on every role's expert",
            "moves: the tiny model's, or model.path's with warm_start.tune_loaded=true; model.path itself otherwise)",
            "is every arm's start, through model.path, with the same",
            "tasks, step budget and sampler seed. Each arm trains in seed_S/ARM, a normal run folder (config.json,",
            "metrics.jsonl, learning_curve.png, checkpoints/). The table goes to the terminal, ablation.json and",
            "ablation.md: held-out greedy and sampled success before and after, each arm's gain and each arm minus",
            "the baseline paired per seed (mean, SE, 95% t interval), and per arm the mean over training steps of",
            "every group_health/ metric. Re-running the same command trains no finished arm; one stopped part way",
            "resumes from its latest checkpoint (checkpoint_every > 0), else trains again from its warm start.",
            f"The ablation sets {', '.join(sorted({*(a.key for a in ABLATIONS.values()), *PER_SEED_KEYS}))} itself",
            "(giving one is an error), and refuses a folder holding runs of other settings.",
        ]
    )


def parse_seeds(value: Any) -> tuple[int, ...]:
    """`seeds`: a count N >= 2 (seeds 0..N-1) or a list of at least two distinct seeds."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 2:
            raise ValueError(f"seeds must be at least 2 (a paired interval needs two seeds), got {value}")
        seeds = tuple(range(value))
    elif isinstance(value, list) and all(isinstance(seed, int) and not isinstance(seed, bool) for seed in value):
        seeds = tuple(value)
        if len(seeds) < 2 or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must list at least two distinct seeds, got {value}")
    else:
        raise ValueError(f"seeds must be a count (seeds=8) or a list of seeds (seeds=[0,3,5]), got {value!r}")
    for seed in seeds:
        SEED.check("seeds", seed)
    return seeds


def warm_start_key(config: LocalTrainConfig) -> str:
    """The settings a warm start's weights and tokenizer depend on, as JSON."""
    settings = json.loads(config_json(config))
    return json.dumps({key: settings[key] for key in WARM_START_KEYS}, indent=2, sort_keys=True)


def check_saved_folders(plan: AblationPlan) -> None:
    """Each warm start or run the output folder already holds is of this plan's settings: one of others is an error
    naming its folder and the keys that differ, so that a re-run never mixes two experiments in one table."""
    for seed in plan.seeds:
        if plan.saves_warm_start:
            key_file = Path(plan.warm_start_path(seed)) / WARM_START_KEY_FILE
            wanted = warm_start_key(plan.warm_start_config(seed))
            if key_file.is_file() and key_file.read_text() != wanted:
                differing = differing_keys(json.loads(key_file.read_text()), json.loads(wanted))
                raise ValueError(
                    f"output_dir: {key_file.parent} holds a warm start of other settings ({', '.join(differing)}); "
                    "choose another output_dir"
                )
        for arm in plan.ablation.arms:
            config = plan.arm_config(seed, arm)
            saved_file = Path(config.output_dir) / CONFIG_FILE
            if saved_file.is_file():
                # read back through the schema: a key added since the folder was written counts at its default
                saved = json.loads(config_json(read_config(saved_file)))
                differing = differing_keys(saved, json.loads(config_json(config)), RESUME_FREE_KEYS)
                if differing:
                    raise ValueError(
                        f"output_dir: {saved_file.parent} holds a run of other settings ({', '.join(differing)}); "
                        "choose another output_dir"
                    )


def differing_keys(saved: Mapping[str, Any], wanted: Mapping[str, Any], free: Sequence[str] = ()) -> list[str]:
    """The top-level keys (less `free`) whose values differ between two configs' JSON objects."""
    return sorted(key for key in saved.keys() | wanted.keys() if key not in free and saved.get(key) != wanted.get(key))


def prepare_warm_start(plan: AblationPlan, seed: int, log: Callable[[str], None]) -> None:
    """Save the seed's warm start once (the engine's export, into a partial folder renamed when complete); with
    `model.path` given untuned, or one already saved, nothing is done."""
    if not plan.saves_warm_start:
        return
    folder = Path(plan.warm_start_path(seed))
    if (folder / WARM_START_KEY_FILE).is_file():
        log(f"reusing the warm start in {folder}")
        return
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by a run stopped while exporting
    config = plan.warm_start_config(seed)
    export_policies(config, partial, log=log)
    (partial / WARM_START_KEY_FILE).write_text(warm_start_key(config))
    partial.rename(folder)


def is_finished(config: LocalTrainConfig) -> bool:
    """Whether config.output_dir holds a run that reached config.steps and evaluated there."""
    try:
        history = read_metrics(Path(config.output_dir))
    except (OSError, ValueError):
        return False
    return bool(history) and history[-1].get("step") == config.steps and GREEDY in history[-1]


def run_ablation(
    plan: AblationPlan, log: Callable[[str], None] = print, callbacks: Sequence[RunCallbacks] = ()
) -> AblationReport:
    """Per seed: its warm start, then every arm from it (an arm already finished is not trained again; one stopped
    part way resumes from its latest checkpoint, or starts again without one); then the table, from every arm's
    metrics.jsonl, written to the output folder. `callbacks` go to every arm's run."""
    for seed in plan.seeds:
        prepare_warm_start(plan, seed, _prefixed(log, f"seed {seed} warm start"))
        for arm in plan.ablation.arms:
            config = plan.arm_config(seed, arm)
            arm_log = _prefixed(log, f"seed {seed} {arm}")
            if is_finished(config):
                arm_log(f"finished already in {config.output_dir}: not trained again")
                continue
            train(config, log=arm_log, callbacks=callbacks)
    report = ablation_report(plan)
    plan.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(plan.out / REPORT_JSON, json.dumps(report.as_dict(), indent=2) + "\n")
    write_text_atomic(plan.out / REPORT_MARKDOWN, report.markdown() + "\n")
    return report


def _prefixed(log: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda message: log(f"[{label}] {message}")


@dataclass(frozen=True)
class ArmRun:
    """One arm's run on one seed: held-out success at step 0 and at its last evaluation (sampled: None unless
    eval_samples > 0), and the mean over its training steps of each group-health metric it logged."""

    arm: str
    seed: int
    folder: str
    greedy_before: float
    greedy_after: float
    sampled_before: float | None
    sampled_after: float | None
    group_health: dict[str, float]


@dataclass(frozen=True)
class ArmSummary:
    """One arm over the seeds: mean success before and after, its gain paired per seed, and its group health."""

    arm: str
    greedy_before: float
    greedy_after: float
    sampled_before: float | None
    sampled_after: float | None
    greedy_gain: PairedSummary
    sampled_gain: PairedSummary
    group_health: dict[str, float]


@dataclass(frozen=True)
class AblationReport:
    """The ablation's table: every run, every arm's summary, and each arm minus the baseline paired per seed."""

    name: str
    key: str
    baseline: str
    seeds: tuple[int, ...]
    steps: int
    env: str
    runs: tuple[ArmRun, ...]
    arms: tuple[ArmSummary, ...]
    greedy_vs_baseline: dict[str, PairedSummary]
    sampled_vs_baseline: dict[str, PairedSummary]
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
            "key": self.key,
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
            "notes": list(self.notes),
        }

    def markdown(self) -> str:
        """The tables as Markdown: success per arm, each arm minus the baseline, and the group health per arm."""
        n = len(self.seeds)
        lines = [
            f"# Ablation `{self.name}` on `{self.env}`: {n} seeds ({', '.join(map(str, self.seeds))}), "
            f"{self.steps} steps per arm",
            "",
            "Every arm of a seed starts from that seed's one warm start, with the same tasks, budget and sampler seed; "
            f"only `{self.key}` differs. Held-out success, mean over the seeds; gains paired per seed: mean (SE) "
            f"[95% t interval, n = {n}].",
            "",
            markdown_table(
                [SUCCESS_HEADER]
                + [
                    [
                        f"`{s.arm}`",
                        number(s.greedy_before),
                        number(s.greedy_after),
                        s.greedy_gain.text(),
                        number(s.sampled_before),
                        number(s.sampled_after),
                        s.sampled_gain.text(),
                    ]
                    for s in self.arms
                ]
            ),
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


def ablation_report(plan: AblationPlan) -> AblationReport:
    """The table from the arms' metrics.jsonl files (every arm of every seed must have finished)."""
    runs = tuple(arm_run(plan, seed, arm) for seed in plan.seeds for arm in plan.ablation.arms)
    by_arm: dict[str, list[ArmRun]] = defaultdict(list)
    for run in runs:
        by_arm[run.arm].append(run)
    baseline = {run.seed: run for run in by_arm[plan.ablation.baseline]}
    others = [arm for arm in plan.ablation.arms if arm != plan.ablation.baseline]
    arms = tuple(arm_summary(arm, by_arm[arm]) for arm in plan.ablation.arms)
    (baseline_summary,) = [summary for summary in arms if summary.arm == plan.ablation.baseline]
    return AblationReport(
        name=plan.name,
        key=plan.ablation.key,
        baseline=plan.ablation.baseline,
        seeds=plan.seeds,
        steps=plan.base.steps,
        env=plan.base.env,
        runs=runs,
        arms=arms,
        greedy_vs_baseline={
            arm: paired_summary([r.greedy_after - baseline[r.seed].greedy_after for r in by_arm[arm]]) for arm in others
        },
        sampled_vs_baseline={arm: sampled_difference(by_arm[arm], baseline) for arm in others},
        notes=(baseline_learning_note(baseline_summary, plan.ablation.key), *unshared_starts(runs)),
    )


def arm_run(plan: AblationPlan, seed: int, arm: str) -> ArmRun:
    folder = Path(plan.arm_config(seed, arm).output_dir)
    history = read_metrics(folder)
    greedy = [row[GREEDY] for row in history if GREEDY in row]
    sampled = [row[SAMPLED] for row in history if SAMPLED in row]
    if not greedy or history[-1].get("step") != plan.base.steps:
        raise RunError(f"{folder}: the run has not finished ({plan.base.steps} steps and an evaluation)")
    return ArmRun(
        arm=arm,
        seed=seed,
        folder=str(folder.relative_to(plan.out)),
        greedy_before=greedy[0],
        greedy_after=greedy[-1],
        sampled_before=sampled[0] if sampled else None,
        sampled_after=sampled[-1] if sampled else None,
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


def arm_summary(arm: str, runs: Sequence[ArmRun]) -> ArmSummary:
    sampled = all(run.sampled_before is not None for run in runs)
    health: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for key, value in run.group_health.items():
            health[key].append(value)
    return ArmSummary(
        arm=arm,
        greedy_before=statistics.fmean(run.greedy_before for run in runs),
        greedy_after=statistics.fmean(run.greedy_after for run in runs),
        sampled_before=statistics.fmean(run.sampled_before for run in runs) if sampled else None,
        sampled_after=statistics.fmean(run.sampled_after for run in runs) if sampled else None,
        greedy_gain=paired_summary([run.greedy_after - run.greedy_before for run in runs]),
        sampled_gain=paired_summary([run.sampled_after - run.sampled_before for run in runs] if sampled else []),
        group_health={key: statistics.fmean(found) for key, found in sorted(health.items())},
    )


def sampled_difference(runs: Sequence[ArmRun], baseline: Mapping[int, ArmRun]) -> PairedSummary:
    """Sampled success after training, the arm minus the baseline per seed (none without sampled evaluations)."""
    pairs = [(run.sampled_after, baseline[run.seed].sampled_after) for run in runs]
    if any(value is None for pair in pairs for value in pair):
        return paired_summary([])
    return paired_summary([arm - base for arm, base in pairs])


def baseline_learning_note(baseline: ArmSummary, key: str) -> str:
    """Whether the baseline arm's own gain is beyond noise (its 95% interval above 0, greedy or sampled): where it is
    not, the regime does not learn, and the arms' differences say little about `key`."""
    gains = {"greedy": baseline.greedy_gain, "sampled": baseline.sampled_gain}
    shown = ", ".join(f"{kind} {interval_text(gain.ci95)}" for kind, gain in gains.items() if gain.ci95 is not None)
    if any(gain.ci95 is not None and gain.ci95[0] > 0 for gain in gains.values()):
        return f"`{baseline.arm}` learned beyond noise (gain intervals: {shown}): the regime learns."
    return (
        f"`{baseline.arm}` did not learn beyond noise (gain intervals: {shown}): the differences between the arms say "
        f"little about `{key}` here; train longer, or at another learning rate, before reading them."
    )


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
