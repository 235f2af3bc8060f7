"""`verl-mas eval`: independent K = 1 episodes on the evaluation split, from a checkpoint or a fresh warm start, each
role served by its trained policy or, to probe whether the roles specialised, by another role's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verl_mas.data_files import write_text_atomic
from verl_mas.env import make_env
from verl_mas.local.config import COUNT, LocalTrainConfig, Range
from verl_mas.local.files import check_writable_file
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.train import LocalRun, make_tasks
from verl_mas.metrics import role_turn_stats, rollout_metrics
from verl_mas.router import PolicyRouter

EVAL_FILE = "eval.json"
SWAPPED_EVAL_FILE = "eval_swapped.json"  # roles served by other policies: the as-trained report is kept beside it


@dataclass(frozen=True)
class EvalConfig:
    """What `verl-mas eval` measures; the training config (from the checkpoint, or the default) rebuilds the models."""

    checkpoint: str = ""  # a step_* checkpoint, or a run folder / checkpoints folder (its latest); empty: warm start
    samples: int = 1  # independent episodes per evaluation task
    temperature: float = 0.0  # 0: greedy
    json: str = ""  # where the report goes; empty: eval.json in the checkpoint (or in output_dir)
    swap_roles: bool = False  # two roles on two policies: each role served by the other role's policy
    serve: dict[str, str] = field(default_factory=dict)  # {role: policy}: which trained policy serves each role

    def __post_init__(self) -> None:
        COUNT.check("samples", self.samples)
        Range(0).check("temperature (0: greedy)", self.temperature)
        if not isinstance(self.swap_roles, bool):
            raise ValueError(f"swap_roles must be true or false, got {self.swap_roles!r}")
        if not isinstance(self.serve, Mapping):
            raise ValueError(f"serve must be a {{role: policy}} mapping, e.g. serve.tool=plan, got {self.serve!r}")
        for role, policy in self.serve.items():
            if not isinstance(policy, str) or not policy:
                raise ValueError(f"serve.{role} must name a policy, got {policy!r}")
        if self.swap_roles and self.serve:
            raise ValueError(
                "swap_roles and serve: give one (swap_roles exchanges two roles' policies, serve maps each)"
            )


def serving_router(trained: PolicyRouter, eval_config: EvalConfig) -> PolicyRouter:
    """Which of the trained policies serves each role in this evaluation: the trained router itself, its two
    policies exchanged (`swap_roles`), or `serve`'s mapping, which must name a trained policy for every role."""
    policies, roles = trained.policies, trained.roles
    if eval_config.swap_roles:
        if len(policies) == 1:
            raise ValueError(
                f"swap_roles: every role is served by the one policy {policies[0]!r}; a swap changes nothing"
            )
        if len(policies) != 2 or len(roles) != 2:
            shown = ", ".join(f"{role}: {policy}" for role, policy in trained.role_to_policy)
            raise ValueError(
                f"swap_roles exchanges two roles on two policies; this run serves {{{shown}}}: "
                "name each role's policy with serve.<role>=<policy>"
            )
        other = {policies[0]: policies[1], policies[1]: policies[0]}
        return PolicyRouter(tuple((role, other[policy]) for role, policy in trained.role_to_policy))
    if not eval_config.serve:
        return trained
    if len(policies) == 1:
        raise ValueError(f"serve: every role is served by the one policy {policies[0]!r}; there is no other to serve")
    for role, policy in eval_config.serve.items():
        if role not in roles:
            raise ValueError(f"serve.{role}: no such role; the roles are {list(roles)}")
        if policy not in policies:
            raise ValueError(f"serve.{role}: no policy {policy!r} was trained; the policies are {list(policies)}")
    unserved = [role for role in roles if role not in eval_config.serve]
    if unserved:
        raise ValueError(f"serve: role(s) {unserved} unserved; name a policy for every role of {list(roles)}")
    return PolicyRouter.from_spec(eval_config.serve, roles)


@dataclass
class EvalReport:
    """The evaluation's numbers, as written to JSON."""

    checkpoint: str
    step: int
    tasks: int
    samples: int
    temperature: float
    served_by: dict[str, str]  # role -> the policy whose weights served it
    as_trained: bool  # every role served by the policy it was trained as
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
    trained = PolicyRouter.from_spec(config.router, make_env(config.env, **config.env_options).workflow().roles)
    serving = serving_router(trained, eval_config)  # before building: a bad mapping fails in a moment
    default_name = EVAL_FILE if serving == trained else SWAPPED_EVAL_FILE
    path = Path(eval_config.json) if eval_config.json else (checkpoint or Path(config.output_dir)) / default_name
    check_writable_file(path, "json")  # before evaluating: a report that cannot be written wastes the whole run
    run = LocalRun(config, log, checkpoint)
    # The rollout asks the router which policy each role's requests go to; the weights stay as trained and loaded.
    run.router = serving
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
        served_by=dict(serving.role_to_policy),
        as_trained=serving == trained,
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
    if not report.as_trained:
        served = ", ".join(f"{role} by {policy}" for role, policy in report.served_by.items())
        lines.append(f"roles served by other policies than in training: {served}")
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
