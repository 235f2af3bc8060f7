"""What one update does to what it was given: per role, how the sampled responses' log-probs move by advantage sign.

From a run's saved config (its `model.path`: a saved model), one training rollout of `--tasks` tasks, the advantages
as that config computes them, one update per `--lr` on those same samples (each from the saved model loaded afresh),
then each sample's summed log-prob again. A step that learns raises the responses it rewards; one that mostly pushes
the penalised ones down moves probability to responses nobody sampled. Also printed: how far the sampler's own
log-probs are from the trainer's on the same tokens (they must agree: the update scores what was sampled), and, per
role and turn, the rollout's samples grouped by their local reward with their mean advantage: which replies the update
reinforces (in a group where every candidate is poor, the least poor one gets a positive advantage).

With `--resample N`, it also asks whether the step climbs what it was given: each role's first-turn reward on the
same tasks, N candidates per task drawn from each task's first state before the update and after each rate's, and
the change per task. Every estimate starts from the same random state; the sampler batches all tasks and roles
together, so once any reply ends at another step the later draws of that batch no longer line up: the standard
error, not the shared seed, says how far a change is noise.

    python -m research.tools.update_direction runs/code_t2/code/seed1/at_grpo_catch_share/config.json \\
        --lr 3e-5 3e-4 1e-3 --out research/tools/data/update_direction.json
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from research.tools.probe import check_rates, probe_parser, write_results
from verl_mas.env import Task
from verl_mas.local.config import read_config
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.train import LocalRun, make_tasks, sample_advantages
from verl_mas.rollout import RolloutConfig, rollout_tasks
from verl_mas.sample import Sample, VerlBatchTensors, samples_to_tensors, trainable
from verl_mas.stats import mean_se_text, number

MODULE = "research.tools.update_direction"
RESAMPLE_SEED = 12345  # the first-turn draws' stream: one for every model compared, so that only the model differs


def summed_logprobs(run: LocalRun, policy: str, tensors: VerlBatchTensors) -> torch.Tensor:
    """Each row's response log-prob, summed over its tokens, under `policy`'s current weights."""
    return (run.trainers[policy].compute_logprobs(tensors) * tensors.response_mask).sum(-1)


def sampler_gap(
    run: LocalRun, samples: Sequence[Sample], rows: Sequence[int], policy: str, tensors: VerlBatchTensors
) -> float:
    """The largest |sampler log-prob - trainer log-prob| over `rows`' response tokens (`tensors`: those rows).

    Raises:
        ValueError: no sample carries the sampler's log-probs, so there is nothing to compare.
    """
    trainer = run.trainers[policy].compute_logprobs(tensors)
    gaps = [
        (trainer[row, : len(sampled)] - torch.tensor(sampled)).abs().max().item()
        for row, index in enumerate(rows)
        if (sampled := samples[index].logprobs)
    ]
    if not gaps:
        raise ValueError(f"no sample of policy {policy!r} carries the sampler's log-probs")
    return max(gaps)


def role_rows(samples: Sequence[Sample], advantages: torch.Tensor, moved: torch.Tensor) -> list[dict[str, Any]]:
    """Per role: samples, how many have a positive / negative advantage, the mean log-prob change of each."""
    rows = []
    for role in sorted({s.role for s in samples}):
        picked = [i for i, s in enumerate(samples) if s.role == role]
        up = [moved[i].item() for i in picked if advantages[i] > 0]
        down = [moved[i].item() for i in picked if advantages[i] < 0]
        rows.append(
            {
                "role": role,
                "samples": len(picked),
                "positive": len(up),
                "negative": len(down),
                "mean_change_positive": statistics.fmean(up) if up else None,
                "mean_change_negative": statistics.fmean(down) if down else None,
            }
        )
    return rows


def advantage_by_local_reward(samples: Sequence[Sample], advantages: torch.Tensor) -> list[dict[str, Any]]:
    """Per (role, turn, local reward): how many samples had that local reward and their mean advantage, sorted."""
    found: dict[tuple[str, int, float], list[float]] = {}
    for sample, advantage in zip(samples, advantages.tolist(), strict=True):
        found.setdefault((sample.role, sample.turn, sample.local_reward), []).append(advantage)
    return [
        {
            "role": role,
            "turn": turn,
            "local_reward": local,
            "samples": len(values),
            "mean_advantage": statistics.fmean(values),
        }
        for (role, turn, local), values in sorted(found.items())
    ]


def first_turn_rewards(run: LocalRun, tasks: Sequence[Task], n: int) -> dict[str, list[list[float]]]:
    """Per role, the judged first-turn rewards on each task (in `tasks`' order): `n` candidates from the task's first
    state, each scored on its own clone (alpha * team + local, as training scores them), drawn from RESAMPLE_SEED.
    A candidate the judge could not run is left out, as in training."""
    generator = BatchingGenerator(run.served, run.config.sampling, seed=RESAMPLE_SEED)
    config = RolloutConfig(k=n, alpha=run.config.alpha, max_turns=1)
    played = asyncio.run(rollout_tasks(list(tasks), generator, run.router, config, run.env_factory))
    rewards: dict[str, dict[str, list[float]]] = {}
    for result in played:
        if result.error:
            raise RuntimeError(f"task {result.task.uid} failed while resampling: {result.error}")
        for sample in result.samples:
            judged = rewards.setdefault(sample.role, {}).setdefault(sample.task_uid, [])
            if not sample.infra_failure:
                judged.append(sample.reward)
    if not rewards:
        raise RuntimeError("resampling played no first-turn candidate")
    missing = [(role, t.uid) for role, by_task in rewards.items() for t in tasks if not by_task.get(t.uid)]
    if missing:
        raise RuntimeError(f"no judged first-turn candidate for (role, task) {missing}")
    return {role: [by_task[t.uid] for t in tasks] for role, by_task in sorted(rewards.items())}


def reward_changes(before: dict[str, list[list[float]]], after: dict[str, list[list[float]]]) -> list[dict[str, Any]]:
    """Per role: the mean first-turn reward before and after, the change's mean and standard error over tasks (each
    task's mean over its judged candidates), and how many candidates were judged each time."""
    rows = []
    for role, old_by_task in before.items():
        old = [statistics.fmean(rewards) for rewards in old_by_task]
        new = [statistics.fmean(rewards) for rewards in after[role]]
        changes = [b - a for a, b in zip(old, new, strict=True)]
        se = statistics.stdev(changes) / len(changes) ** 0.5 if len(changes) > 1 else None
        rows.append(
            {
                "role": role,
                "tasks": len(changes),
                "judged_before": sum(map(len, old_by_task)),
                "judged_after": sum(map(len, after[role])),
                "before": statistics.fmean(old),
                "after": statistics.fmean(new),
                "change": statistics.fmean(changes),
                "change_se": se,
            }
        )
    return rows


def fresh_run(saved, lr: float) -> LocalRun:
    """A run of the saved config at `lr`, its models loaded from `model.path` (and each role's `policy_lr` dropped)."""
    update = dataclasses.replace(saved.update, lr=lr)
    return LocalRun(dataclasses.replace(saved, update=update, policy_lr={}), log=lambda line: None)


def updates(config_path: Path, rates: Sequence[float], tasks: int, resample: int = 0) -> list[dict[str, Any]]:
    """One rollout of `tasks` training tasks from the saved config's model, then one update per rate on those samples,
    each from the saved model loaded afresh; the per-role log-prob changes, and with `resample` > 0 the per-role
    first-turn reward on those tasks before and after (`first_turn_rewards`, `resample` candidates a task)."""
    saved = read_config(config_path)
    if not saved.model.path:
        raise ValueError(f"{config_path}: model.path is empty; this needs a saved model to start every rate from")
    first = fresh_run(saved, rates[0])
    rolled_out = make_tasks(saved, "train", 0, tasks)
    played = first.rollout(rolled_out, first.sampler, saved.k, saved.rollout_mode)
    samples = trainable([s for result in played for s in result.samples])
    advantages = sample_advantages(samples, saved.grouping, saved.norm_adv_by_std)
    by_policy: dict[str, list[int]] = {}
    for index, sample in enumerate(samples):
        by_policy.setdefault(sample.policy, []).append(index)
    pad = first.tokenizer.pad_token_id  # every rate's run loads the same tokenizer
    tensors = {policy: samples_to_tensors([samples[i] for i in rows], pad) for policy, rows in by_policy.items()}
    gap = max(sampler_gap(first, samples, rows, policy, tensors[policy]) for policy, rows in by_policy.items())
    before_rewards = first_turn_rewards(first, rolled_out, resample) if resample else {}
    by_reward = advantage_by_local_reward(samples, advantages)
    results = []
    start: dict[str, torch.Tensor] = {}  # each policy's log-prob sums under the saved model, from the first rate's run
    for index, lr in enumerate(rates):
        run = first if index == 0 else fresh_run(saved, lr)
        moved = torch.zeros(len(samples))
        for policy, rows in by_policy.items():
            batch = tensors[policy]
            before = summed_logprobs(run, policy, batch)
            if not torch.allclose(before, start.setdefault(policy, before), atol=1e-4):
                raise RuntimeError(f"the saved model loaded again for lr {lr:g} scores the samples differently")
            run.trainers[policy].step(batch, advantages[rows].unsqueeze(-1) * batch.response_mask)
            moved[rows] = summed_logprobs(run, policy, batch) - before
        result = {
            "lr": lr,
            "tasks": tasks,
            "sampler_gap": gap,
            "roles": role_rows(samples, advantages, moved),
            "advantage_by_local_reward": by_reward,  # of the one rollout every rate updates on
        }
        if resample:
            result["first_turn_reward"] = reward_changes(before_rewards, first_turn_rewards(run, rolled_out, resample))
            result["resample"] = resample
        results.append(result)
    return results


def report(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| lr | role | samples | adv > 0 | adv < 0 | log-prob change, adv > 0 | adv < 0 |", "|" + "---|" * 7]
    for result in results:
        for row in result["roles"]:
            lines.append(
                f"| {result['lr']:g} | {row['role']} | {row['samples']} | {row['positive']} | {row['negative']} "
                f"| {number(row['mean_change_positive'], signed=True)} "
                f"| {number(row['mean_change_negative'], signed=True)} |"
            )
    gaps = ", ".join(f"{r['lr']:g}: {r['sampler_gap']:.1e}" for r in results)
    text = "\n".join(lines) + f"\n\nlargest |sampler - trainer| log-prob per token: {gaps}\n"
    lines = ["\n| role | turn | local reward | samples | mean advantage |", "|" + "---|" * 5]
    for row in results[0]["advantage_by_local_reward"] if results else ():
        lines.append(
            f"| {row['role']} | {row['turn']} | {number(row['local_reward'], signed=True)} | {row['samples']} "
            f"| {number(row['mean_advantage'], signed=True)} |"
        )
    text += "\n".join(lines) + "\n"
    resampled = [r for r in results if "first_turn_reward" in r]
    if resampled:
        lines = [
            "\n| lr | role | tasks x candidates | judged before / after | first-turn reward before | after "
            "| change: mean (SE) |",
            "|" + "---|" * 7,
        ]
        for result in resampled:
            for row in result["first_turn_reward"]:
                lines.append(
                    f"| {result['lr']:g} | {row['role']} | {row['tasks']} x {result['resample']} "
                    f"| {row['judged_before']} / {row['judged_after']} "
                    f"| {number(row['before'])} | {number(row['after'])} "
                    f"| {mean_se_text(row['change'], row['change_se'])} |"
                )
        text += "\n".join(lines) + "\n"
    return text


def main(argv: list[str] | None = None) -> None:
    parser = probe_parser(MODULE, __doc__, per_rate="update")
    parser.add_argument("--tasks", type=int, default=8, help="training tasks rolled out (default: %(default)s)")
    parser.add_argument(
        "--resample", type=int, default=0, help="> 0: first-turn reward before and after, this many a task (see above)"
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if args.resample < 0:
        parser.error(f"--resample must be >= 0, got {args.resample}")
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    check_rates(parser, args.lr)
    results = updates(args.config, args.lr, args.tasks, args.resample)
    if args.out:
        write_results(args.out, MODULE, argv, results)
    print(report(results))


if __name__ == "__main__":
    main()
