"""`verl-mas eval`: independent K = 1 episodes on the evaluation split, from a checkpoint or a fresh warm start."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verl_mas.local.config import COUNT, LocalTrainConfig, Range
from verl_mas.local.files import check_writable_file, write_text_atomic
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.metrics import role_turn_stats, rollout_metrics

EVAL_FILE = "eval.json"


@dataclass(frozen=True)
class EvalConfig:
    """What `verl-mas eval` measures; the training config (from the checkpoint, or the default) rebuilds the models."""

    checkpoint: str = ""  # a step_* checkpoint, or a run folder / checkpoints folder (its latest); empty: warm start
    samples: int = 1  # independent episodes per evaluation task
    temperature: float = 0.0  # 0: greedy
    json: str = ""  # where the report goes; empty: eval.json in the checkpoint (or in output_dir)

    def __post_init__(self) -> None:
        COUNT.check("samples", self.samples)
        Range(0).check("temperature (0: greedy)", self.temperature)


@dataclass
class EvalReport:
    """The evaluation's numbers, as written to JSON."""

    checkpoint: str
    step: int
    tasks: int
    samples: int
    temperature: float
    success: dict[str, float]  # per environment: the share of solved episodes
    solved_by_any_sample: dict[str, float]  # per environment: the share of tasks that some episode solved
    role_turns: list[dict[str, float | str | int]]  # per (role, turn): sample and group statistics
    metrics: dict[str, float]


def evaluate(
    config: LocalTrainConfig,
    eval_config: EvalConfig,
    checkpoint: Path | None,
    log: Callable[[str], None] = print,
) -> EvalReport:
    """Evaluate `config.eval_tasks` tasks with `eval_config.samples` independent episodes each; write the JSON."""
    path = Path(eval_config.json) if eval_config.json else (checkpoint or Path(config.output_dir)) / EVAL_FILE
    check_writable_file(path, "json")  # before evaluating: a report that cannot be written wastes the whole run
    run = LocalRun(config, log, checkpoint)
    step = run.load(checkpoint)[0] if checkpoint is not None else 0
    greedy = eval_config.temperature == 0
    sampling = dataclasses.replace(
        config.sampling, greedy=greedy, temperature=config.sampling.temperature if greedy else eval_config.temperature
    )
    generator = BatchingGenerator(run.served, sampling, seed=config.seed)
    tasks = make_tasks(config, "eval", 0, config.eval_tasks)
    results = run.rollout(tasks, generator, eval_config.samples, "independent")
    solved = np.array([r.success for r in results], dtype=float).reshape(len(tasks), eval_config.samples)
    report = EvalReport(
        checkpoint=str(checkpoint or ""),
        step=step,
        tasks=len(tasks),
        samples=eval_config.samples,
        temperature=eval_config.temperature,
        success={config.env: float(solved.mean())},
        solved_by_any_sample={config.env: float(solved.max(axis=1).mean())},
        role_turns=[{"role": role, "turn": turn, **stats} for (role, turn), stats in role_turn_stats(results).items()],
        metrics=rollout_metrics(results, prefix="eval"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(dataclasses.asdict(report), indent=2))
    log(format_report(report))
    log(f"report written to {path}")
    return report


def format_report(report: EvalReport) -> str:
    source = report.checkpoint or "a fresh warm start"
    mode = "greedy" if report.temperature == 0 else f"temperature {report.temperature}"
    lines = [f"evaluation of {source}: {report.tasks} tasks x {report.samples} samples, {mode}"]
    for env, success in report.success.items():
        lines.append(f"{env}: success {success:.3f}, tasks solved by any sample {report.solved_by_any_sample[env]:.3f}")
    header = ("role", "turn", "reward", "team", "local", "length", "invalid", "group std")
    lines.append("{:<12} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}".format(*header))
    for row in report.role_turns:
        lines.append(
            f"{row['role']:<12} {row['turn']:>4} {row['reward']:>8.3f} {row['team_reward']:>8.3f} "
            f"{row['local_reward']:>8.3f} {row['response_length']:>8.2f} {row['invalid_move_share']:>8.3f} "
            f"{row['group_reward_std']:>9.3f}"
        )
    return "\n".join(lines)
